package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

func ref(name, subject string) sr.SchemaReference {
	return sr.SchemaReference{Name: name, Subject: subject, Version: 1}
}

// The three formats with references two levels deep: the schema references an address,
// which references a point; the schema also references a second schema directly.
const (
	protoGeo     = "syntax = \"proto3\";\npackage shop.geo;\nmessage Point { double lat = 1; double lon = 2; }\n"
	protoAddress = "syntax = \"proto3\";\npackage shop.common;\nimport \"geo/point.proto\";\n" +
		"message Address { string street = 1; shop.geo.Point at = 2; }\n"
	protoMoney     = "syntax = \"proto3\";\npackage shop.common;\nmessage Money { int64 cents = 1; string currency = 2; }\n"
	protoOrderRefs = "syntax = \"proto3\";\npackage shop.v1;\nimport \"money.proto\";\nimport \"common/address.proto\";\n" +
		"import \"google/protobuf/timestamp.proto\";\n" +
		"message Order { shop.common.Money total = 1; shop.common.Address ship_to = 2; google.protobuf.Timestamp at = 3; }\n"
	protoRefsData = `{"total": {"cents": "1250", "currency": "EUR"}, "shipTo": {"street": "Main 1", "at": {"lat": 1.5, "lon": 2.5}}, "at": "2026-01-02T03:04:05Z"}`

	avroGeo     = `{"type": "record", "name": "Point", "namespace": "shop.geo", "fields": [{"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}]}`
	avroAddress = `{"type": "record", "name": "Address", "namespace": "shop.common", "fields": [
		{"name": "street", "type": "string"},
		{"name": "at", "type": "shop.geo.Point"},
		{"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["HOME", "WORK"]}}]}`
	avroCurrency  = `{"type": "enum", "name": "Currency", "namespace": "shop.common", "symbols": ["EUR", "USD"]}`
	avroOrderRefs = `{"type": "record", "name": "Order", "namespace": "shop.common", "fields": [
		{"name": "ship_to", "type": "Address"},
		{"name": "bill_to", "type": ["null", "shop.common.Address"], "default": null},
		{"name": "kind", "type": "Kind"},
		{"name": "currency", "type": "shop.common.Currency"},
		{"name": "where", "type": {"type": "array", "items": "shop.geo.Point"}}]}`
	avroRefsData = `{"ship_to": {"street": "Main 1", "at": {"lat": 1.5, "lon": 2.5}, "kind": "HOME"},
		"bill_to": {"shop.common.Address": {"street": "x", "at": {"lat": 0, "lon": 0}, "kind": "WORK"}},
		"kind": "WORK", "currency": "EUR", "where": [{"lat": 3, "lon": 4}]}`

	jsonGeo     = `{"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}, "required": ["lat", "lon"]}`
	jsonAddress = `{"type": "object", "properties": {"street": {"type": "string"}, "at": {"$ref": "geo.json"}}, "required": ["street"]}`
	jsonMoney   = `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "number", "minimum": 0}` // Apicurio guesses the format of a schema without "properties" from "$schema"
	jsonOrder   = `{"type": "object", "properties": {"ship_to": {"$ref": "address.json"},
		"total": {"$ref": "https://example.com/schemas/money.json"}}, "required": ["ship_to"]}`
	jsonRefsData = `{"ship_to": {"street": "Main 1", "at": {"lat": 1.5, "lon": 2.5}}, "total": 12.5}`
)

type refSchemas struct{ protoID, avroID, jsonID int }

func registerRefSchemas(t *testing.T, a *admin) refSchemas {
	t.Helper()
	var s refSchemas
	geo, _ := a.register("proto-geo", sr.TypeProtobuf, protoGeo)
	addr, _ := a.register("proto-address", sr.TypeProtobuf, protoAddress, ref("geo/point.proto", geo))
	money, _ := a.register("proto-money", sr.TypeProtobuf, protoMoney)
	// A reference naming a well-known file, as Confluent's serializers register them: the
	// built-in file is used, whatever the subject holds.
	ts, _ := a.register("proto-timestamp", sr.TypeProtobuf, "syntax = \"proto3\";\npackage google.protobuf;\n"+
		"message Timestamp { int64 seconds = 1; int32 nanos = 2; }\n")
	_, s.protoID = a.register("proto-order", sr.TypeProtobuf, protoOrderRefs,
		ref("money.proto", money), ref("common/address.proto", addr), ref("google/protobuf/timestamp.proto", ts))

	ageo, _ := a.register("avro-geo", sr.TypeAvro, avroGeo)
	aaddr, _ := a.register("avro-address", sr.TypeAvro, avroAddress, ref("shop.geo.Point", ageo))
	acur, _ := a.register("avro-currency", sr.TypeAvro, avroCurrency)
	_, s.avroID = a.register("avro-order", sr.TypeAvro, avroOrderRefs,
		ref("shop.common.Address", aaddr), ref("shop.common.Currency", acur), ref("shop.geo.Point", ageo))

	jgeo, _ := a.register("json-geo", sr.TypeJSON, jsonGeo)
	jaddr, _ := a.register("json-address", sr.TypeJSON, jsonAddress, ref("geo.json", jgeo))
	jmoney, _ := a.register("json-money", sr.TypeJSON, jsonMoney)
	_, s.jsonID = a.register("json-order", sr.TypeJSON, jsonOrder,
		ref("address.json", jaddr), ref("https://example.com/schemas/money.json", jmoney))
	return s
}

func TestReferences(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			a := newAdmin(t, tg.url)
			s := registerRefSchemas(t, a)
			enc, err := New(Config{URL: tg.url})
			require.NoError(t, err)
			ctx := context.Background()

			for _, c := range []struct {
				name     string
				format   Format
				ref      Ref
				data     string
				wantBack string
			}{
				{"protobuf", Protobuf, Ref{ID: s.protoID, Message: "shop.v1.Order"}, protoRefsData, protoRefsData},
				{"avro", Avro, Ref{ID: s.avroID}, avroRefsData, avroRefsData},
				{"jsonschema", JSONSchema, Ref{ID: s.jsonID}, jsonRefsData, jsonRefsData},
			} {
				t.Run(c.name, func(t *testing.T) {
					b, err := enc.Encode(ctx, c.format, c.ref, []byte(c.data))
					require.NoError(t, err)
					id, back, err := enc.Decode(ctx, c.format, b)
					require.NoError(t, err)
					require.Equal(t, c.ref.ID, id)
					requireJSONEq(t, c.wantBack, string(back))
				})
			}

			// The referenced types are checked where they are used, and named by their path.
			for _, c := range []struct {
				name, data, path string
				format           Format
				ref              Ref
			}{
				{"protobuf", `{"shipTo": {"at": {"lat": "x"}}}`, "shipTo.at.lat", Protobuf, Ref{ID: s.protoID, Message: "shop.v1.Order"}},
				{"avro", strings.Replace(avroRefsData, `"lat": 1.5`, `"lat": "x"`, 1), "ship_to.at.lat", Avro, Ref{ID: s.avroID}},
				{"avro enum of a reference", strings.Replace(avroRefsData, `"currency": "EUR"`, `"currency": "GBP"`, 1), "currency", Avro, Ref{ID: s.avroID}},
				{"jsonschema", `{"ship_to": {"street": "s", "at": {"lat": "x", "lon": 1}}}`, "ship_to.at.lat", JSONSchema, Ref{ID: s.jsonID}},
				{"jsonschema absolute name", `{"ship_to": {"street": "s"}, "total": -1}`, "total", JSONSchema, Ref{ID: s.jsonID}},
			} {
				t.Run("mismatch "+c.name, func(t *testing.T) {
					_, err := enc.Encode(ctx, c.format, c.ref, []byte(c.data))
					var me *MismatchError
					require.ErrorAs(t, err, &me, "got %v", err)
					require.Equal(t, c.path, me.Path, "reason: %s", me.Reason)
				})
			}
		})
	}
}

// A schema referenced by several is fetched once, and kept: a second schema referencing it
// costs one request, its own.
func TestReferencesCached(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			a := newAdmin(t, tg.url)
			s := registerRefSchemas(t, a)
			jgeo := a.subject("json-geo")
			_, other := a.register("json-other", sr.TypeJSON, `{"$schema": "http://json-schema.org/draft-07/schema#", "$ref": "geo.json"}`, ref("geo.json", jgeo))
			url, requests := counting(t, tg.url)
			enc, err := New(Config{URL: url})
			require.NoError(t, err)
			ctx := context.Background()
			before := requests.Load()
			_, err = enc.Encode(ctx, JSONSchema, Ref{ID: s.jsonID}, []byte(jsonRefsData))
			require.NoError(t, err)
			require.Equal(t, int64(4), requests.Load()-before, "the schema, address, geo, money")
			_, err = enc.Encode(ctx, JSONSchema, Ref{ID: other}, []byte(`{"lat": 1, "lon": 2}`))
			require.NoError(t, err)
			require.Equal(t, int64(5), requests.Load()-before, "the other schema only: geo is cached")

			// Concurrent callers of two schemas sharing references: one request per schema
			// and per referenced version.
			enc, err = New(Config{URL: url})
			require.NoError(t, err)
			before = requests.Load()
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for i := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id, data := s.jsonID, jsonRefsData
					if i%2 == 1 {
						id, data = other, `{"lat": 1, "lon": 2}`
					}
					_, err := enc.Encode(ctx, JSONSchema, Ref{ID: id}, []byte(data))
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Equal(t, int64(5), requests.Load()-before, "two schemas, address, geo, money: each once")
		})
	}
}

// fakeWith is an srfake whose answers for some paths are the test's: schemas the registry
// would not take (cycles, references to nothing).
func fakeWith(t *testing.T, answers map[string]any) *srfake.Registry {
	t.Helper()
	fake := srfake.New()
	t.Cleanup(fake.Close)
	fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		a, ok := answers[r.URL.Path]
		if !ok {
			return false
		}
		if code, ok := a.(int); ok {
			w.WriteHeader(code)
			_, _ = w.Write([]byte(`{"error_code": 50001, "message": "down"}`))
			return true
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a)
		return true
	})
	return fake
}

type fakeRef struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

func fakeSchema(typ, text string, refs ...fakeRef) map[string]any {
	return map[string]any{"schema": text, "schemaType": typ, "references": refs}
}

func fakeVersion(subject string, version, id int, typ, text string, refs ...fakeRef) map[string]any {
	m := fakeSchema(typ, text, refs...)
	m["subject"], m["version"], m["id"] = subject, version, id
	return m
}

func TestReferencesRefused(t *testing.T) {
	const str = `{"type": "string"}`
	answers := map[string]any{
		// A reference to a subject the registry does not have.
		"/schemas/ids/9001": fakeSchema("PROTOBUF", "syntax = \"proto3\";\nimport \"gone.proto\";\nmessage M { Gone g = 1; }\n",
			fakeRef{"gone.proto", "gone", 3}),
		// a → b → a.
		"/schemas/ids/9002":             fakeSchema("JSON", `{"$ref": "a.json"}`, fakeRef{"a.json", "a", 1}),
		"/subjects/a/versions/1":        fakeVersion("a", 1, 501, "JSON", `{"$ref": "b.json"}`, fakeRef{"b.json", "b", 1}),
		"/subjects/b/versions/1":        fakeVersion("b", 1, 502, "JSON", `{"$ref": "a.json"}`, fakeRef{"a.json", "a", 1}),
		"/schemas/ids/9003":             fakeSchema("JSON", str, fakeRef{"down.json", "down", 1}),
		"/subjects/down/versions/1":     http.StatusInternalServerError,
		"/schemas/ids/9004":             fakeSchema("AVRO", `"string"`, fakeRef{"x.json", "jsonsub", 1}),
		"/subjects/jsonsub/versions/1":  fakeVersion("jsonsub", 1, 503, "JSON", str),
		"/schemas/ids/9005":             fakeSchema("AVRO", `{"type": "record", "name": "R", "fields": [{"name": "x", "type": "a.Gone"}]}`, fakeRef{"a.Gone", "gone-avro", 1}),
		"/subjects/self/versions/1":     fakeVersion("self", 1, 504, "JSON", str, fakeRef{"self.json", "self", 1}),
		"/schemas/ids/9006":             fakeSchema("JSON", str, fakeRef{"self.json", "self", 1}),
		"/subjects/deep-0/versions/1":   fakeVersion("deep-0", 1, 600, "JSON", str),
		"/subjects/wide-err/versions/1": fakeVersion("wide-err", 1, 700, "JSON", str),
	}
	// deep-i references deep-(i-1): deep-n is n+1 schemas deep.
	for i := 1; i <= maxRefDepth; i++ {
		answers[fmt.Sprintf("/subjects/deep-%d/versions/1", i)] = fakeVersion(fmt.Sprintf("deep-%d", i), 1, 600+i, "JSON", str,
			fakeRef{fmt.Sprintf("deep-%d.json", i-1), fmt.Sprintf("deep-%d", i-1), 1})
	}
	answers["/schemas/ids/9010"] = fakeSchema("JSON", str, fakeRef{"deep-15.json", "deep-15", 1}) // 16 deep: the bound
	answers["/schemas/ids/9011"] = fakeSchema("JSON", str, fakeRef{"deep-16.json", "deep-16", 1}) // 17 deep
	var wide, wider []fakeRef
	for i := range maxRefCount + 1 {
		subject := fmt.Sprintf("wide-%d", i)
		answers["/subjects/"+subject+"/versions/1"] = fakeVersion(subject, 1, 1000+i, "JSON", str)
		r := fakeRef{subject + ".json", subject, 1}
		if i < maxRefCount {
			wide = append(wide, r)
		}
		wider = append(wider, r)
	}
	answers["/schemas/ids/9020"] = fakeSchema("JSON", str, wide...)
	answers["/schemas/ids/9021"] = fakeSchema("JSON", str, wider...)
	fake := fakeWith(t, answers)
	enc, err := New(Config{URL: fake.URL()})
	require.NoError(t, err)
	ctx := context.Background()

	for _, c := range []struct {
		name   string
		format Format
		id     int
		want   error
		says   []string
	}{
		{"missing reference", Protobuf, 9001, ErrUnknownSchema, []string{`"gone.proto"`, `subject "gone" version 3`, "schema id 9001"}},
		{"cycle", JSONSchema, 9002, ErrUnsupportedSchema, []string{"cycle", `schema id 9002 → "a.json" (subject "a" version 1) → "b.json" (subject "b" version 1) → "a.json" (subject "a" version 1)`}},
		{"references itself", JSONSchema, 9006, ErrUnsupportedSchema, []string{"cycle", `"self.json" (subject "self" version 1) → "self.json"`}},
		{"registry down for a reference", JSONSchema, 9003, ErrUnavailable, []string{`"down.json" (subject "down" version 1)`}},
		{"reference of another format", Avro, 9004, ErrUnsupportedSchema, []string{`"x.json"`, "JSON"}},
		{"missing avro reference", Avro, 9005, ErrUnknownSchema, []string{`"a.Gone" (subject "gone-avro" version 1)`}},
		{"too deep", JSONSchema, 9011, ErrUnsupportedSchema, []string{"more than 16 deep", `"deep-16.json"`, `"deep-0.json" (subject "deep-0" version 1)`}},
		{"too many", JSONSchema, 9021, ErrUnsupportedSchema, []string{"more than 256", `"wide-256.json"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := enc.Encode(ctx, c.format, Ref{ID: c.id}, []byte(`"x"`))
			require.ErrorIs(t, err, c.want, "got %v", err)
			for _, s := range c.says {
				require.Contains(t, err.Error(), s)
			}
			t.Log(err)
			enc.mu.RLock()
			_, cached := enc.byID[c.id]
			enc.mu.RUnlock()
			require.False(t, cached, "a failure is not cached")
		})
	}
	for _, id := range []int{9010, 9020} {
		_, err := enc.Encode(ctx, JSONSchema, Ref{ID: id}, []byte(`"x"`))
		require.NoError(t, err, "schema id %d: at the bounds", id)
	}
}

// A JSON Schema reference's name resolves against the schema's location and the "$id"s the
// documents declare: a referenced document with its own "$id" finds its references beside
// it. Nothing else is loaded: a "$ref" to a file is refused.
func TestJSONSchemaReferenceBases(t *testing.T) {
	addr := dep{name: "address.json", subject: "a", version: 1, schema: sr.Schema{Type: sr.TypeJSON,
		Schema: `{"$id": "https://example.com/schemas/address.json", "type": "object", "properties": {"at": {"$ref": "geo.json"}}}`}}
	geo := dep{name: "geo.json", subject: "g", version: 1, schema: sr.Schema{Type: sr.TypeJSON,
		Schema: `{"type": "object", "properties": {"lat": {"type": "number"}}}`}}
	for _, root := range []string{
		`{"properties": {"a": {"$ref": "address.json"}}}`,
		`{"$id": "https://example.com/schemas/order.json", "properties": {"a": {"$ref": "address.json"}}}`,
		`{"$id": "https://example.com/schemas/order.json", "properties": {"a": {"$ref": "https://example.com/schemas/address.json"}}}`,
		`{"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://example.com/schemas/order.json",
		  "properties": {"a": {"$ref": "address.json"}}}`,
	} {
		j, err := compileJSONSchema(root, []dep{geo, addr})
		require.NoError(t, err, root)
		_, err = j.encode([]byte(`{"a": {"at": {"lat": "x"}}}`))
		var me *MismatchError
		require.ErrorAs(t, err, &me, root)
		require.Equal(t, "a.at.lat", me.Path, root)
	}
	_, err := compileJSONSchema(`{"$ref": "file:///etc/hostname"}`, nil)
	require.ErrorContains(t, err, "neither in the schema nor one of its references")
}
