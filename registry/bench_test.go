package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// BenchmarkEncode is the cost of encoding one record's value once its schema is cached (the
// steady state: Encode then makes no registry round trip), per format, for the order of the
// tests (a nested record with two items), against a baseline in the same run: compacting
// the same JSON, which is what a plain JSON value costs. The registry is franz-go's
// in-process fake: it is asked once, before the timer starts.
//
//	go test ./registry/ -run '^$' -bench BenchmarkEncode -benchmem
func BenchmarkEncode(b *testing.B) {
	fake := srfake.New()
	b.Cleanup(fake.Close)
	avroID, _, err := fake.RegisterSchema("bench-avro", sr.Schema{Type: sr.TypeAvro, Schema: avroOrder})
	require.NoError(b, err)
	protoID, _, err := fake.RegisterSchema("bench-proto", sr.Schema{Type: sr.TypeProtobuf, Schema: protoOrder})
	require.NoError(b, err)
	jsonID, _, err := fake.RegisterSchema("bench-json", sr.Schema{Type: sr.TypeJSON, Schema: jsonSchemaOrder})
	require.NoError(b, err)
	// The order with logical types in their convenient forms: the data is prepared (and
	// rewritten) before goavro reads it.
	logicalID, _, err := fake.RegisterSchema("bench-avro-logical", sr.Schema{Type: sr.TypeAvro, Schema: avroLogicalOrder})
	require.NoError(b, err)
	enc, err := New(Config{URL: fake.URL()})
	require.NoError(b, err)

	// The baseline: what a plain {"type": "json"} value costs, compacting the same data.
	b.Run("baseline-json-compact", func(b *testing.B) {
		data := []byte(avroData)
		var buf bytes.Buffer
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			buf.Reset()
			if err := json.Compact(&buf, data); err != nil {
				b.Fatal(err)
			}
			_ = append([]byte(nil), buf.Bytes()...)
		}
	})

	for _, c := range []struct {
		name   string
		format Format
		ref    Ref
		data   string
	}{
		{"avro", Avro, Ref{ID: avroID}, avroData},
		{"avro-latest", Avro, Ref{Subject: "bench-avro"}, avroData},
		{"avro-logical", Avro, Ref{ID: logicalID}, avroLogicalData},
		{"protobuf", Protobuf, Ref{ID: protoID, Message: "shop.v1.Order"}, protoData},
		{"jsonschema", JSONSchema, Ref{ID: jsonID}, jsonData},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			data := []byte(c.data)
			_, err := enc.Encode(ctx, c.format, c.ref, data)
			require.NoError(b, err)
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for b.Loop() {
				if _, err := enc.Encode(ctx, c.format, c.ref, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

const avroLogicalOrder = `{
  "type": "record", "name": "Order", "namespace": "shop.v1",
  "fields": [
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
      {"name": "sku", "type": "string"},
      {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
      {"name": "qty", "type": "int"}
    ]}}}
  ]
}`

const avroLogicalData = `{"id": "123e4567-e89b-12d3-a456-426614174000", "at": "2026-01-02T03:04:05.123Z", "day": "2026-01-02",
  "items": [{"sku": "a", "price": 1.50, "qty": 2}, {"sku": "b", "price": 2.25, "qty": 1}]}`
