package test

// Schema Registry formats through the coordinator (docs/records.md): the bytes a read_committed
// consumer reads are decoded with the registry and the same library, and compared;
// records_readback_test.go reads them back with Confluent's Python client as well.
//
// The registry: SCHEMA_REGISTRY_URL, which scripts/test.sh sets to the Apicurio Registry that
// scripts/services.sh runs (its Confluent-compatible API, /apis/ccompat/v7). In CI a missing
// SCHEMA_REGISTRY_URL fails these tests; elsewhere, without one, franz-go's in-process fake of
// the Confluent API (pkg/sr/srfake) serves them, which checks the coordinator's wiring, the wire
// format and the errors but is no stand-in for a real registry.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/kpgtx/coordinator/internal/registrytest"
	"github.com/kpgtx/coordinator/registry"
	"github.com/kpgtx/coordinator/service"
)

const (
	orderAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"id","type":"string"},{"name":"total","type":"double"},
		{"name":"note","type":["null","string"],"default":null}]}`
	orderProto = `syntax = "proto3";
package shop;
message Envelope { string source = 1; }
message Order {
  message Line { string sku = 1; int32 qty = 2; }
  string id = 1;
  repeated Line lines = 2;
}`
	orderJSONSchema = `{"type":"object","required":["id","total"],"additionalProperties":false,
		"properties":{"id":{"type":"string"},"total":{"type":"number","minimum":0}}}`
)

// schemaRegistryURL is the registry these tests use, and its kind.
func schemaRegistryURL(t *testing.T) (string, string) {
	t.Helper()
	if u := os.Getenv("SCHEMA_REGISTRY_URL"); u != "" {
		return u, "real"
	}
	if os.Getenv("CI") != "" {
		t.Fatal("SCHEMA_REGISTRY_URL is not set: CI must run scripts/test.sh, which starts Apicurio Registry (bash scripts/services.sh start-apicurio)")
	}
	fake := srfake.New()
	t.Cleanup(fake.Close)
	t.Log("SCHEMA_REGISTRY_URL is not set: franz-go's srfake serves the registry API;" +
		" `bash scripts/services.sh start-apicurio && eval \"$(bash scripts/services.sh env)\"` runs a real one")
	return fake.URL(), "srfake"
}

func TestRecordsSchemaRegistry(t *testing.T) {
	t.Parallel()
	url, kind := schemaRegistryURL(t)
	t.Logf("registry: %s (%s)", url, kind)
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.SchemaRegistry.URL = url }})
	ctx := context.Background()
	cl, err := sr.NewClient(sr.URLs(url))
	require.NoError(t, err)
	register := func(name string, typ sr.SchemaType, text string) (string, int) {
		subject := e.prefix + "-" + name
		return subject, registerSubject(t, cl, subject, sr.Schema{Schema: text, Type: typ})
	}
	avroSubject, avroID := register("order-avro", sr.TypeAvro, orderAvro)
	protoSubject, protoID := register("order-proto", sr.TypeProtobuf, orderProto)
	jsSubject, jsID := register("order-json", sr.TypeJSON, orderJSONSchema)
	dec, err := registry.New(registry.Config{URL: url})
	require.NoError(t, err)

	r := e.post(map[string]any{"id": "sr-1",
		"sql": []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('sr-1', 12.5) RETURNING id, total"}},
		"kafka": []any{
			map[string]any{"topic": e.topic, "key": "sr-1",
				"value": map[string]any{"type": "avro", "subject": avroSubject, "data": map[string]any{"id": "sr-1", "total": 12.5, "note": map[string]any{"string": "gift"}}}},
			map[string]any{"topic": e.topic, "key": "sr-1",
				"value": map[string]any{"type": "PROTOBUF", "schema_id": protoID, "message": "shop.Order",
					"data": map[string]any{"id": "sr-1", "lines": []any{map[string]any{"sku": "a", "qty": 2}}}}},
			map[string]any{"topic": e.topic, "key": "sr-1",
				"value": map[string]any{"type": "jsonschema", "subject": jsSubject, "data": map[string]any{"id": "sr-1", "total": 12.5}}},
			map[string]any{"topic": e.topic, "key": "sr-1", // P2: the inserted row, encoded against the schema
				"value": map[string]any{"type": "jsonschema", "schema_id": jsID, "from": "sql[0].rows[0]"}},
		}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	wants := []struct {
		format registry.Format
		id     int
		json   string
	}{
		{registry.Avro, avroID, `{"id":"sr-1","total":12.5,"note":{"string":"gift"}}`},
		{registry.Protobuf, protoID, `{"id":"sr-1","lines":[{"sku":"a","qty":2}]}`},
		{registry.JSONSchema, jsID, `{"id":"sr-1","total":12.5}`},
		{registry.JSONSchema, jsID, `{"id":"sr-1","total":12.5}`},
	}
	for i, w := range wants {
		rec := e.landed(r, i)
		require.GreaterOrEqual(t, len(rec.Value), 5)
		assert.Equal(t, byte(0), rec.Value[0], "record %d: the magic byte", i)
		assert.Equal(t, uint32(w.id), binary.BigEndian.Uint32(rec.Value[1:5]), "record %d: the schema id", i)
		id, got, err := dec.Decode(ctx, w.format, rec.Value)
		require.NoError(t, err, "record %d", i)
		assert.Equal(t, w.id, id)
		assert.JSONEq(t, w.json, string(got), "record %d", i)
	}
	if w := e.landed(r, 1).Value; assert.Greater(t, len(w), 5) {
		assert.Equal(t, []byte{0x02, 0x02}, w[5:7], "the message indexes of shop.Order, the second message: [1]")
	}

	bad := []struct {
		name   string
		value  map[string]any
		status int
		field  string
	}{
		{"avro data missing a field", map[string]any{"type": "avro", "subject": avroSubject, "data": map[string]any{"id": "x"}}, 400, "kafka[0].value.data"},
		{"json schema minimum", map[string]any{"type": "jsonschema", "subject": jsSubject, "data": map[string]any{"id": "x", "total": -1}}, 400, "kafka[0].value.data.total"},
		{"protobuf unknown field", map[string]any{"type": "protobuf", "subject": protoSubject, "message": "shop.Order", "data": map[string]any{"nope": 1}}, 400, "kafka[0].value.data"},
		{"avro double beyond float64", map[string]any{"type": "avro", "subject": avroSubject,
			"data": json.RawMessage(`{"id": "x", "total": 1e400}`)}, 400, "kafka[0].value.data.total"},
		{"avro null for a double", map[string]any{"type": "avro", "subject": avroSubject,
			"data": json.RawMessage(`{"id": "x", "total": null}`)}, 400, "kafka[0].value.data.total"},
		{"avro data null", map[string]any{"type": "avro", "subject": avroSubject, "data": nil}, 400, "kafka[0].value.data"},
		{"protobuf int32 beyond its range", map[string]any{"type": "protobuf", "subject": protoSubject, "message": "shop.Order",
			"data": json.RawMessage(`{"lines": [{"qty": 1}, {"qty": 12345678901234567890}]}`)}, 400, "kafka[0].value.data.lines[1].qty"},
		{"unknown subject", map[string]any{"type": "avro", "subject": e.prefix + "-none", "data": map[string]any{}}, 400, "kafka[0].value.subject"},
		{"unknown schema id", map[string]any{"type": "avro", "schema_id": 987654, "data": map[string]any{}}, 400, "kafka[0].value.schema_id"},
		{"unknown version", map[string]any{"type": "avro", "subject": avroSubject, "version": 9, "data": map[string]any{}}, 400, "kafka[0].value.subject"},
		{"avro schema used as protobuf", map[string]any{"type": "protobuf", "schema_id": avroID, "data": map[string]any{}}, 400, "kafka[0].value.schema_id"},
		{"result that does not fit", map[string]any{"type": "avro", "subject": avroSubject, "from": "sql[0].rows[0]"}, 409, ""},
	}
	for i, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			id := fmt.Sprintf("sr-bad-%d", i)
			r := e.post(map[string]any{"id": id,
				"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1) RETURNING id", "args": []any{id}}},
				"kafka": []any{map[string]any{"topic": e.topic, "key": id, "value": b.value}}})
			require.Equal(t, b.status, r.Status, "%s", r.Raw)
			if b.field != "" {
				assert.True(t, r.str("error", "field") == b.field || len(r.str("error", "field")) > len(b.field) && r.str("error", "field")[:len(b.field)] == b.field,
					"field %q, want %q or a field inside it: %s", r.str("error", "field"), b.field, r.Raw)
				g := e.do(http.MethodGet, "/v1/transactions/"+id, nil)
				assert.Equal(t, http.StatusNotFound, g.Status, "nothing was logged")
			}
			assert.Equal(t, 0, countRows(t, e.db, id))
			assert.Zero(t, e.committedWithKey(id))
		})
	}

	// null where the formats have it, and numbers as written: the JSON Schema payload carries
	// the total byte for byte, beyond what a float64 holds.
	exact := e.post(map[string]any{"id": "sr-exact", "kafka": []any{
		map[string]any{"topic": e.topic, "key": "sr-exact", "value": map[string]any{"type": "avro", "subject": avroSubject,
			"data": json.RawMessage(`{"id": "sr-exact", "total": 1.10, "note": null}`)}},
		map[string]any{"topic": e.topic, "key": "sr-exact", "value": map[string]any{"type": "jsonschema", "subject": jsSubject,
			"data": json.RawMessage(`{"id": "sr-exact", "total": 12345678901234567890.10}`)}},
	}})
	require.Equal(t, http.StatusOK, exact.Status, "%s", exact.Raw)
	_, got, err := dec.Decode(ctx, registry.Avro, e.landed(exact, 0).Value)
	require.NoError(t, err)
	assert.JSONEq(t, `{"id":"sr-exact","total":1.1,"note":null}`, string(got))
	assert.Equal(t, `{"id":"sr-exact","total":12345678901234567890.10}`, string(e.landed(exact, 1).Value[5:]))
	assert.Empty(t, e.preparedLeft())
}

// A registry that cannot be reached: 503, nothing logged, nothing run, safe to retry.
func TestRecordsSchemaRegistryDown(t *testing.T) {
	t.Parallel()
	down := fmt.Sprintf("http://127.0.0.1:%d", freePort(t)) // nothing listens there
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.SchemaRegistry.URL = down }})
	start := time.Now()
	r := e.post(map[string]any{"id": "sr-down",
		"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('sr-down', 1)"}},
		"kafka": []any{map[string]any{"topic": e.topic, "value": map[string]any{"type": "avro", "schema_id": 1, "data": map[string]any{}}}}})
	t.Logf("answered after %s", time.Since(start))
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Raw)
	assert.Contains(t, r.str("error", "message"), "schema registry")
	g := e.do(http.MethodGet, "/v1/transactions/sr-down", nil)
	assert.Equal(t, http.StatusNotFound, g.Status, "nothing was logged")
	assert.Equal(t, 0, countRows(t, e.db, "sr-down"))
	assert.Empty(t, e.preparedLeft())
	// Plain records do not need the registry.
	ok := e.post(map[string]any{"kafka": []any{map[string]any{"topic": e.topic, "value": "plain"}}})
	assert.Equal(t, http.StatusOK, ok.Status, "%s", ok.Raw)
}

// registerSubject registers s under subject for the test, which deletes the subject at its end,
// and returns the schema id.
func registerSubject(t *testing.T, cl *sr.Client, subject string, s sr.Schema) int {
	t.Helper()
	return registrytest.Register(t, cl, subject, s).ID
}
