package registry

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
)

// A schema with every numeric type where Avro data can hold one: fields, a union's branch, an
// array's items, a map's values, and a named type from another namespace referenced by name.
const avroNumbersSchema = `{
  "type": "record", "name": "Numbers", "namespace": "num.v1",
  "fields": [
    {"name": "l", "type": "long", "default": 0},
    {"name": "i", "type": "int", "default": 0},
    {"name": "d", "type": "double", "default": 0},
    {"name": "f", "type": "float", "default": 0},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
    {"name": "o", "type": ["null", "long", "double"], "default": null},
    {"name": "arr", "type": {"type": "array", "items": "long"}, "default": []},
    {"name": "m", "type": {"type": "map", "values": "int"}, "default": {}},
    {"name": "inner", "type": ["null", {"type": "record", "name": "Inner", "namespace": "other",
      "fields": [{"name": "n", "type": "long"}]}], "default": null},
    {"name": "again", "type": ["null", "other.Inner"], "default": null}
  ]
}`

// Integer types without a float or a double: the check runs once goavro refused the data.
const avroIntsSchema = `{"type": "record", "name": "Ints", "fields": [
  {"name": "l", "type": "long", "default": 0}, {"name": "items", "type": {"type": "array", "items": "int"}, "default": []}]}`

const protoNumbersSchema = `syntax = "proto3";
package num.v1;
message Numbers {
  int64 l = 1;
  int32 i = 2;
  double d = 3;
  float f = 4;
  uint64 u = 5;
  repeated int64 arr = 6;
  map<string, int32> m = 7;
}
`

const jsonNumbersSchema = `{"type": "object", "properties": {
  "n": {"type": "number"}, "i": {"type": "integer"}, "o": {"type": ["null", "integer"]}}}`

// Numbers reach the encoders as written: an integer beyond its type's range, or a fraction or
// an exponent for an integer type, is refused naming the field and the number as written
// (never rounded through a float64); what a type takes is encoded exactly.
func TestEncodeNumbers(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			a := newAdmin(t, tg.url)
			_, avroID := a.register("avro-numbers", sr.TypeAvro, avroNumbersSchema)
			_, intsID := a.register("avro-ints", sr.TypeAvro, avroIntsSchema)
			_, protoID := a.register("proto-numbers", sr.TypeProtobuf, protoNumbersSchema)
			_, jsonID := a.register("json-numbers", sr.TypeJSON, jsonNumbersSchema)
			enc, err := New(Config{URL: tg.url})
			require.NoError(t, err)
			ctx := context.Background()

			accepted := []struct {
				name   string
				format Format
				id     int
				data   string
				back   string // a part of the value decoded again
			}{
				{"avro long's maximum", Avro, avroID, `{"l": 9223372036854775807}`, `"l":9223372036854775807`},
				{"avro long's minimum", Avro, avroID, `{"l": -9223372036854775808}`, `"l":-9223372036854775808`},
				{"avro int's maximum", Avro, avroID, `{"i": 2147483647}`, `"i":2147483647`},
				{"avro long in a union", Avro, avroID, `{"o": {"long": 9223372036854775807}}`, `{"long":9223372036854775807}`},
				{"avro null for a union", Avro, avroID, `{"o": null, "inner": null}`, `"o":null`},
				{"avro a decimal for a double", Avro, avroID, `{"d": 1.10}`, `"d":1.1`},
				{"avro a large integer for a double", Avro, avroID, `{"d": 12345678901234567890}`, `"d":1.2345678901234567e+19`},
				{"avro named type by reference", Avro, avroID, `{"again": {"other.Inner": {"n": 9223372036854775807}}}`, `9223372036854775807`},
				{"avro ints", Avro, intsID, `{"l": -9223372036854775808, "items": [2147483647]}`, `-9223372036854775808`},
				{"protobuf int64's maximum", Protobuf, protoID, `{"l": 9223372036854775807}`, `"l":"9223372036854775807"`},
				{"protobuf uint64's maximum", Protobuf, protoID, `{"u": 18446744073709551615}`, `"u":"18446744073709551615"`},
				{"protobuf int64 as a string", Protobuf, protoID, `{"l": "-9223372036854775808"}`, `"l":"-9223372036854775808"`},
				{"protobuf an integral exponent (proto3's JSON mapping)", Protobuf, protoID, `{"l": 1e3}`, `"l":"1000"`},
				{"jsonschema numbers as written", JSONSchema, jsonID, `{"n": 12345678901234567890, "x": 1.10, "y": 1e400, "o": null}`,
					`{"n":12345678901234567890,"x":1.10,"y":1e400,"o":null}`},
				{"jsonschema an integral decimal is an integer", JSONSchema, jsonID, `{"i": 1.0}`, `{"i":1.0}`},
			}
			for _, c := range accepted {
				t.Run(c.name, func(t *testing.T) {
					b, err := enc.Encode(ctx, c.format, Ref{ID: c.id}, []byte(c.data))
					require.NoError(t, err)
					_, back, err := enc.Decode(ctx, c.format, b)
					require.NoError(t, err)
					require.Contains(t, string(back), c.back)
				})
			}

			refused := []struct {
				name   string
				format Format
				id     int
				data   string
				path   string
				reason string // a part of it
			}{
				{"avro beyond long", Avro, avroID, `{"l": 12345678901234567890}`, "l", "12345678901234567890 is beyond the range of type long"},
				{"avro just beyond long", Avro, avroID, `{"l": 9223372036854775808}`, "l", "9223372036854775808 is beyond"},
				{"avro beyond int", Avro, avroID, `{"i": 2147483648}`, "i", "2147483648 is beyond the range of type int"},
				{"avro a fraction for a long", Avro, avroID, `{"l": 1.5}`, "l", "type long takes an integer written without fraction or exponent, not 1.5"},
				{"avro an integral decimal for a long", Avro, avroID, `{"l": 1.0}`, "l", "not 1.0"},
				{"avro an exponent for a long", Avro, avroID, `{"l": 1e3}`, "l", "not 1e3"},
				{"avro a fraction for a timestamp", Avro, avroID, `{"ts": 1.5}`, "ts", "type long"},
				{"avro beyond double", Avro, avroID, `{"d": 1e400}`, "d", "1e400 is beyond the range of type double"},
				{"avro goavro's infinity", Avro, avroID, `{"d": 1e999}`, "d", "1e999 is beyond"},
				{"avro beyond float", Avro, avroID, `{"f": 1e39}`, "f", "1e39 is beyond the range of type float"},
				{"avro null for a double", Avro, avroID, `{"d": null}`, "d", "type double does not take null"},
				{"avro beyond long in a union", Avro, avroID, `{"o": {"long": 12345678901234567890}}`, "o.long", "beyond the range of type long"},
				{"avro a fraction in an array", Avro, avroID, `{"arr": [1, 2, 2.5]}`, "arr[2]", "not 2.5"},
				{"avro beyond int in a map", Avro, avroID, `{"m": {"a": 1, "b": 2147483648}}`, "m.b", "beyond the range of type int"},
				{"avro a fraction in a named type", Avro, avroID, `{"inner": {"other.Inner": {"n": 0.5}}}`, "inner.other.Inner.n", "not 0.5"},
				{"avro an escaped field name", Avro, avroID, `{"\u006c": 1.5}`, "l", "not 1.5"},
				{"avro ints: beyond long", Avro, intsID, `{"l": 12345678901234567890}`, "l", "12345678901234567890 is beyond"},
				{"avro ints: an exponent in an array", Avro, intsID, `{"items": [1, 2e1]}`, "items[1]", "not 2e1"},
				{"protobuf beyond int64", Protobuf, protoID, `{"l": 12345678901234567890}`, "l", "12345678901234567890"},
				{"protobuf beyond int32", Protobuf, protoID, `{"i": 2147483648}`, "i", "2147483648"},
				{"protobuf a fraction for an int64", Protobuf, protoID, `{"l": 1.5}`, "l", "1.5"},
				{"protobuf beyond double", Protobuf, protoID, `{"d": 1e400}`, "d", "1e400"},
				{"protobuf beyond uint64", Protobuf, protoID, `{"u": 18446744073709551616}`, "u", "18446744073709551616"},
				{"protobuf a fraction in an array", Protobuf, protoID, `{"arr": [1, 2.5]}`, "arr[1]", "2.5"},
				{"protobuf beyond int32 in a map", Protobuf, protoID, `{"m": {"a": 2147483648}}`, "m.a", "2147483648"},
				{"jsonschema a fraction for an integer", JSONSchema, jsonID, `{"i": 1.5}`, "i", "want integer"},
			}
			for _, c := range refused {
				t.Run(c.name, func(t *testing.T) {
					b, err := enc.Encode(ctx, c.format, Ref{ID: c.id}, []byte(c.data))
					require.Nil(t, b)
					var me *MismatchError
					require.ErrorAs(t, err, &me, "got %v", err)
					require.Equal(t, c.path, me.Path, "reason: %s", me.Reason)
					require.Contains(t, me.Reason, c.reason)
					require.NotContains(t, me.Reason, "float64", "the number as written, not rounded")
				})
			}
		})
	}
}
