package test

// Schema references and Avro logical types through the coordinator (docs/records.md): records
// of each format whose schema references other subjects, and an Avro record whose logical
// types are written in their convenient forms, read back by a read_committed consumer and
// decoded with the registry.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/kpgtx/coordinator/registry"
	"github.com/kpgtx/coordinator/service"
)

const (
	refsProtoMoney = "syntax = \"proto3\";\npackage shop.common;\nmessage Money { int64 cents = 1; string currency = 2; }\n"
	refsProtoLine  = "syntax = \"proto3\";\npackage shop.common;\nimport \"shop/money.proto\";\n" +
		"message Line { string sku = 1; shop.common.Money price = 2; }\n"
	refsProtoOrder = "syntax = \"proto3\";\npackage shop.v2;\nimport \"shop/line.proto\";\nimport \"google/protobuf/timestamp.proto\";\n" +
		"message Order { string id = 1; repeated shop.common.Line lines = 2; google.protobuf.Timestamp at = 3; }\n"

	refsAvroMoney = `{"type": "record", "name": "Money", "namespace": "shop.common", "fields": [
		{"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
		{"name": "currency", "type": "string"}]}`
	refsAvroLine = `{"type": "record", "name": "Line", "namespace": "shop.common", "fields": [
		{"name": "sku", "type": "string"}, {"name": "price", "type": "Money"}]}`
	refsAvroOrder = `{"type": "record", "name": "Order", "namespace": "shop.v2", "fields": [
		{"name": "id", "type": "string"},
		{"name": "lines", "type": {"type": "array", "items": "shop.common.Line"}},
		{"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}`

	refsJSONMoney = `{"type": "object", "properties": {"amount": {"type": "number", "minimum": 0}, "currency": {"type": "string"}},
		"required": ["amount"]}`
	refsJSONLine  = `{"type": "object", "properties": {"sku": {"type": "string"}, "price": {"$ref": "money.json"}}}`
	refsJSONOrder = `{"type": "object", "properties": {"id": {"type": "string"}, "lines": {"type": "array", "items": {"$ref": "line.json"}}},
		"required": ["id"]}`

	// Every logical type, and a decimal the statement's numeric fills.
	logicalAvro = `{"type": "record", "name": "Payment", "namespace": "shop.v2", "fields": [
		{"name": "id", "type": "string"},
		{"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
		{"name": "fee", "type": {"type": "fixed", "name": "Fee", "size": 4, "logicalType": "decimal", "precision": 6, "scale": 3}, "default": "\u0000\u0000\u0000\u0000"},
		{"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
		{"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}, "default": 0},
		{"name": "day", "type": {"type": "int", "logicalType": "date"}, "default": 0},
		{"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}, "default": 0},
		{"name": "tm_us", "type": {"type": "long", "logicalType": "time-micros"}, "default": 0},
		{"name": "ref", "type": ["null", {"type": "string", "logicalType": "uuid"}], "default": null}]}`
)

func TestRecordsSchemaReferences(t *testing.T) {
	t.Parallel()
	url, kind := schemaRegistryURL(t)
	t.Logf("registry: %s (%s)", url, kind)
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.SchemaRegistry.URL = url }})
	ctx := context.Background()
	cl, err := sr.NewClient(sr.URLs(url))
	require.NoError(t, err)
	register := func(name string, typ sr.SchemaType, text string, refs ...sr.SchemaReference) (string, int) {
		subject := e.prefix + "-" + name
		return subject, registerSubject(t, cl, subject, sr.Schema{Schema: text, Type: typ, References: refs})
	}
	ref := func(name, subject string) sr.SchemaReference {
		return sr.SchemaReference{Name: name, Subject: subject, Version: 1}
	}
	// Two levels: the order references the line, which references the money.
	pm, _ := register("refs-proto-money", sr.TypeProtobuf, refsProtoMoney)
	pl, _ := register("refs-proto-line", sr.TypeProtobuf, refsProtoLine, ref("shop/money.proto", pm))
	protoSubject, protoID := register("refs-proto-order", sr.TypeProtobuf, refsProtoOrder, ref("shop/line.proto", pl))
	am, _ := register("refs-avro-money", sr.TypeAvro, refsAvroMoney)
	al, _ := register("refs-avro-line", sr.TypeAvro, refsAvroLine, ref("shop.common.Money", am))
	avroSubject, avroID := register("refs-avro-order", sr.TypeAvro, refsAvroOrder, ref("shop.common.Line", al))
	jm, _ := register("refs-json-money", sr.TypeJSON, refsJSONMoney)
	jl, _ := register("refs-json-line", sr.TypeJSON, refsJSONLine, ref("money.json", jm))
	jsonSubject, jsonID := register("refs-json-order", sr.TypeJSON, refsJSONOrder, ref("line.json", jl))
	logicalSubject, logicalID := register("logical-avro", sr.TypeAvro, logicalAvro)
	dec, err := registry.New(registry.Config{URL: url})
	require.NoError(t, err)

	at := time.Date(2026, 1, 2, 3, 4, 5, 123_000_000, time.UTC)
	value := func(typ, subject string, data string) map[string]any {
		return map[string]any{"type": typ, "subject": subject, "data": json.RawMessage(data)}
	}
	r := e.post(map[string]any{"id": "srref-1",
		"sql": []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('srref-1', 12.50) RETURNING id, total"}},
		"kafka": []any{
			map[string]any{"topic": e.topic, "key": "srref-1", "value": value("protobuf", protoSubject,
				`{"id": "srref-1", "lines": [{"sku": "a", "price": {"cents": "1250", "currency": "EUR"}}], "at": "2026-01-02T03:04:05.123Z"}`)},
			map[string]any{"topic": e.topic, "key": "srref-1", "value": value("avro", avroSubject,
				`{"id": "srref-1", "lines": [{"sku": "a", "price": {"amount": 12.50, "currency": "EUR"}}], "at": "2026-01-02T03:04:05.123Z"}`)},
			map[string]any{"topic": e.topic, "key": "srref-1", "value": value("jsonschema", jsonSubject,
				`{"id": "srref-1", "lines": [{"sku": "a", "price": {"amount": 12.50, "currency": "EUR"}}]}`)},
			map[string]any{"topic": e.topic, "key": "srref-1", "value": value("avro", logicalSubject,
				`{"id": "srref-1", "total": -12345678.90, "fee": 1.5, "at": "2026-01-02T03:04:05.123Z", "at_us": "2026-01-02T03:04:05.123456Z",
				  "day": "2026-01-02", "tm": "13:14:15.123", "tm_us": "13:14:15.123456", "ref": {"string": "123e4567-e89b-12d3-a456-426614174000"}}`)},
			// P2: the inserted row's numeric total becomes the decimal, exactly.
			map[string]any{"topic": e.topic, "key": "srref-1", "value": map[string]any{"type": "avro", "schema_id": logicalID, "from": "sql[0].rows[0]"}},
		}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)

	ms := fmt.Sprint(at.UnixMilli())
	wants := []struct {
		format registry.Format
		id     int
		json   string
	}{
		{registry.Protobuf, protoID, `{"id":"srref-1","lines":[{"sku":"a","price":{"cents":"1250","currency":"EUR"}}],"at":"2026-01-02T03:04:05.123Z"}`},
		// Decode gives back Avro's JSON: the decimal as the bytes of its unscaled value (1250 =
		// 0x04e2), the timestamp as epoch milliseconds.
		{registry.Avro, avroID, `{"id":"srref-1","lines":[{"sku":"a","price":{"amount":"\u0004\u00e2","currency":"EUR"}}],"at":` + ms + `}`},
		{registry.JSONSchema, jsonID, `{"id":"srref-1","lines":[{"sku":"a","price":{"amount":12.50,"currency":"EUR"}}]}`},
		// -1234567890 = 0xb669fd2e; 1500 in 4 bytes; 2026-01-02 is day 20455; 13:14:15.123 is
		// 47655123 ms.
		{registry.Avro, logicalID, `{"id":"srref-1","total":"\u00b6\u0069\u00fd\u002e","fee":"\u0000\u0000\u0005\u00dc","at":` + ms +
			`,"at_us":` + fmt.Sprint(at.UnixMicro()+456) + `,"day":20455,"tm":47655123,"tm_us":47655123456,"ref":{"string":"123e4567-e89b-12d3-a456-426614174000"}}`},
		{registry.Avro, logicalID, `{"id":"srref-1","total":"\u0004\u00e2","fee":"\u0000\u0000\u0000\u0000","at":0,"at_us":0,"day":0,"tm":0,"tm_us":0,"ref":null}`},
	}
	for i, w := range wants {
		rec := e.landed(r, i)
		require.GreaterOrEqual(t, len(rec.Value), 5)
		assert.Equal(t, uint32(w.id), binary.BigEndian.Uint32(rec.Value[1:5]), "record %d: the schema id", i)
		id, got, err := dec.Decode(ctx, w.format, rec.Value)
		require.NoError(t, err, "record %d", i)
		assert.Equal(t, w.id, id)
		assert.JSONEq(t, w.json, string(got), "record %d", i)
	}

	bad := []struct {
		name  string
		value map[string]any
		field string
	}{
		{"a referenced type's field", value("avro", avroSubject, `{"id": "x", "lines": [{"sku": "a", "price": {"amount": 1.234, "currency": "EUR"}}], "at": 0}`),
			"kafka[0].value.data.lines[0].price.amount"},
		{"a referenced message's field", value("protobuf", protoSubject, `{"lines": [{"price": {"cents": 1.5}}]}`), "kafka[0].value.data.lines[0].price.cents"},
		{"a referenced document's rule", value("jsonschema", jsonSubject, `{"id": "x", "lines": [{"price": {"amount": -1}}]}`), "kafka[0].value.data.lines[0].price.amount"},
		{"a timestamp finer than its unit", value("avro", logicalSubject, `{"id": "x", "total": 1, "at": "2026-01-02T03:04:05.1234Z"}`), "kafka[0].value.data.at"},
		{"a date that is not one", value("avro", logicalSubject, `{"id": "x", "total": 1, "day": "2026-02-30"}`), "kafka[0].value.data.day"},
		{"a uuid that is not one", value("avro", logicalSubject, `{"id": "x", "total": 1, "ref": {"string": "nope"}}`), "kafka[0].value.data.ref.string"},
	}
	for i, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			id := fmt.Sprintf("srref-bad-%d", i)
			r := e.post(map[string]any{"id": id,
				"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{id}}},
				"kafka": []any{map[string]any{"topic": e.topic, "key": id, "value": b.value}}})
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Raw)
			assert.Equal(t, b.field, r.str("error", "field"), "%s", r.Raw)
			assert.Equal(t, 0, countRows(t, e.db, id))
			assert.Zero(t, e.committedWithKey(id))
		})
	}
	assert.Empty(t, e.preparedLeft())
}

// References and logical types read back by Confluent's Python client: each format with
// two-level references, and every Avro logical type written in its convenient form, decode in
// the deserializers we did not write to the values sent (Avro's logical values as the
// deserializer gives them: decimals, datetimes, dates, times, UUIDs).
func TestRecordsSchemaReferencesReadBackByConfluentPython(t *testing.T) {
	t.Parallel()
	py := readerPython(t)
	url, _ := schemaRegistryURL(t)
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.SchemaRegistry.URL = url }})
	cl, err := sr.NewClient(sr.URLs(url))
	require.NoError(t, err)
	register := func(name string, typ sr.SchemaType, text string, refs ...sr.SchemaReference) string {
		subject := e.prefix + "-py-" + name
		registerSubject(t, cl, subject, sr.Schema{Schema: text, Type: typ, References: refs})
		return subject
	}
	ref := func(name, subject string) sr.SchemaReference {
		return sr.SchemaReference{Name: name, Subject: subject, Version: 1}
	}
	protoSubject := register("proto-order", sr.TypeProtobuf, refsProtoOrder,
		ref("shop/line.proto", register("proto-line", sr.TypeProtobuf, refsProtoLine,
			ref("shop/money.proto", register("proto-money", sr.TypeProtobuf, refsProtoMoney)))))
	avroSubject := register("avro-order", sr.TypeAvro, refsAvroOrder,
		ref("shop.common.Line", register("avro-line", sr.TypeAvro, refsAvroLine,
			ref("shop.common.Money", register("avro-money", sr.TypeAvro, refsAvroMoney)))))
	jsonSubject := register("json-order", sr.TypeJSON, refsJSONOrder,
		ref("line.json", register("json-line", sr.TypeJSON, refsJSONLine,
			ref("money.json", register("json-money", sr.TypeJSON, refsJSONMoney)))))
	logicalSubject := register("logical", sr.TypeAvro, logicalAvro)

	topics := map[string]string{}
	var recs []any
	for _, c := range []struct{ name, typ, subject, data string }{
		{"proto", "protobuf", protoSubject, `{"id": "py-1", "lines": [{"sku": "a", "price": {"cents": "1250", "currency": "EUR"}}], "at": "2026-01-02T03:04:05.123Z"}`},
		{"avro", "avro", avroSubject, `{"id": "py-1", "lines": [{"sku": "a", "price": {"amount": 12.50, "currency": "EUR"}}], "at": "2026-01-02T03:04:05.123Z"}`},
		{"json", "jsonschema", jsonSubject, `{"id": "py-1", "lines": [{"sku": "a", "price": {"amount": 12.50, "currency": "EUR"}}]}`},
		{"logical", "avro", logicalSubject, `{"id": "py-1", "total": -12345678.90, "fee": 1.5, "at": "2026-01-02T03:04:05.123Z",
			"at_us": "2026-01-02T03:04:05.123456Z", "day": "2026-01-02", "tm": "13:14:15.123", "tm_us": "13:14:15.123456",
			"ref": {"string": "123e4567-e89b-12d3-a456-426614174000"}}`},
	} {
		topics[c.name] = e.prefix + "-py-" + c.name
		e.createTopic(topics[c.name], 1)
		recs = append(recs, map[string]any{"topic": topics[c.name], "key": "py-1",
			"value": map[string]any{"type": c.typ, "subject": c.subject, "data": json.RawMessage(c.data)}})
	}
	r := e.post(map[string]any{"id": "py-1", "kafka": recs})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)

	lines := runReader(t, py, url, e.brokers, []string{topics["proto"] + ":string:protobuf:1", topics["avro"] + ":string:avro:1",
		topics["json"] + ":string:jsonschema:1", topics["logical"] + ":string:avro:1"})
	got := map[string]any{}
	for _, l := range lines {
		require.NotContains(t, l, "error", "%v", l)
		got[l["topic"].(string)] = l["value"]
	}
	at := map[string]any{"$datetime": "2026-01-02T03:04:05.123000+00:00"}
	compareJSON(t, "proto", map[string]any{"id": "py-1", "lines": []any{map[string]any{"sku": "a",
		"price": map[string]any{"cents": "1250", "currency": "EUR"}}}, "at": "2026-01-02T03:04:05.123Z"}, got[topics["proto"]])
	compareJSON(t, "avro", map[string]any{"id": "py-1", "lines": []any{map[string]any{"sku": "a",
		"price": map[string]any{"amount": map[string]any{"$decimal": "12.50"}, "currency": "EUR"}}}, "at": at}, got[topics["avro"]])
	compareJSON(t, "json", map[string]any{"id": "py-1", "lines": []any{map[string]any{"sku": "a",
		"price": map[string]any{"amount": 12.5, "currency": "EUR"}}}}, got[topics["json"]])
	compareJSON(t, "logical", map[string]any{"id": "py-1", "total": map[string]any{"$decimal": "-12345678.90"},
		"fee": map[string]any{"$decimal": "1.500"}, "at": at,
		"at_us": map[string]any{"$datetime": "2026-01-02T03:04:05.123456+00:00"}, "day": map[string]any{"$date": "2026-01-02"},
		"tm": map[string]any{"$time": "13:14:15.123000"}, "tm_us": map[string]any{"$time": "13:14:15.123456"},
		"ref": "123e4567-e89b-12d3-a456-426614174000"}, got[topics["logical"]])
}
