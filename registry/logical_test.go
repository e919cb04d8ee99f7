package registry

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
)

// Every logical type the coordinator reads, where data can hold one: fields, a union's
// branch, an array's items, a map's values, and a decimal fixed named again in a union.
const avroLogicalSchema = `{
  "type": "record", "name": "Logical", "namespace": "lt.v1",
  "fields": [
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}, "default": "\u0000"},
    {"name": "price", "type": {"type": "fixed", "name": "Price", "size": 4, "logicalType": "decimal", "precision": 8, "scale": 3},
      "default": "\u0000\u0000\u0000\u0000"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
    {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}, "default": 0},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}, "default": 0},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}, "default": 0},
    {"name": "tmu", "type": {"type": "long", "logicalType": "time-micros"}, "default": 0},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}, "default": "00000000-0000-0000-0000-000000000000"},
    {"name": "opt", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": null},
    {"name": "optprice", "type": ["null", "Price"], "default": null},
    {"name": "days", "type": {"type": "array", "items": {"type": "int", "logicalType": "date"}}, "default": []},
    {"name": "amounts", "type": {"type": "map", "values": {"type": "bytes", "logicalType": "decimal", "precision": 4}}, "default": {}}
  ]
}`

// The defaults, as Decode gives them back (Avro's JSON).
var logicalDefaults = map[string]string{
	"amount": `"\u0000"`, "price": `"\u0000\u0000\u0000\u0000"`, "ts": `0`, "tsu": `0`, "day": `0`, "tm": `0`, "tmu": `0`,
	"id": `"00000000-0000-0000-0000-000000000000"`, "opt": `null`, "optprice": `null`, "days": `[]`, "amounts": `{}`,
}

// avroBytes is bytes as Avro's JSON writes them: a string of code points, quoted.
func avroBytes(b ...byte) string {
	var s strings.Builder
	for _, c := range b {
		s.WriteRune(rune(c))
	}
	q, _ := json.Marshal(s.String())
	return string(q)
}

func TestAvroLogicalTypes(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 123_000_000, time.UTC)
	ms := strconv.FormatInt(at.UnixMilli(), 10)
	before1970 := time.Date(1969, 12, 31, 23, 59, 59, 999_000_000, time.UTC)
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			a := newAdmin(t, tg.url)
			_, id := a.register("logical", sr.TypeAvro, avroLogicalSchema)
			enc, err := New(Config{URL: tg.url})
			require.NoError(t, err)
			ctx := context.Background()

			for _, c := range []struct {
				name, field, in, back string
			}{
				// decimal(9,2) on bytes: REST Proxy's bytes, or a number kept exactly.
				{"decimal bytes as REST Proxy writes them", "amount", avroBytes(0x04, 0xD2), avroBytes(0x04, 0xD2)},
				{"decimal number", "amount", `12.34`, avroBytes(0x04, 0xD2)},
				{"decimal negative", "amount", `-12.34`, avroBytes(0xFB, 0x2E)},
				{"decimal integer", "amount", `12`, avroBytes(0x04, 0xB0)},
				{"decimal trailing zeros", "amount", `12.340`, avroBytes(0x04, 0xD2)},
				{"decimal exponent", "amount", `1.234e1`, avroBytes(0x04, 0xD2)},
				{"decimal zero", "amount", `0`, avroBytes(0x00)},
				{"decimal sign byte", "amount", `1.28`, avroBytes(0x00, 0x80)},
				{"decimal minus one cent", "amount", `-0.01`, avroBytes(0xFF)},
				{"decimal at the precision", "amount", `9999999.99`, avroBytes(0x3B, 0x9A, 0xC9, 0xFF)},
				// decimal(8,3) on fixed(4): always 4 bytes.
				{"decimal fixed", "price", `1.5`, avroBytes(0, 0, 0x05, 0xDC)},
				{"decimal fixed zero", "price", `0`, avroBytes(0, 0, 0, 0)},
				{"decimal fixed negative", "price", `-1.5`, avroBytes(0xFF, 0xFF, 0xFA, 0x24)},
				{"decimal fixed as REST Proxy writes it", "price", avroBytes(0, 0, 0x05, 0xDC), avroBytes(0, 0, 0x05, 0xDC)},
				{"decimal in a union", "optprice", `{"lt.v1.Price": 1.5}`, `{"lt.v1.Price": ` + avroBytes(0, 0, 0x05, 0xDC) + `}`},
				{"decimal map values, scale 0", "amounts", `{"a": 1, "b": -1, "c": 9999}`, `{"a": ` + avroBytes(1) + `, "b": ` + avroBytes(0xFF) + `, "c": ` + avroBytes(0x27, 0x0F) + `}`},
				// timestamps: epoch numbers, or RFC 3339.
				{"timestamp-millis number", "ts", ms, ms},
				{"timestamp-millis RFC 3339", "ts", `"2026-01-02T03:04:05.123Z"`, ms},
				{"timestamp-millis with an offset", "ts", `"2026-01-02T05:04:05.123+02:00"`, ms},
				{"timestamp-millis before 1970", "ts", `"1969-12-31T23:59:59.999Z"`, strconv.FormatInt(before1970.UnixMilli(), 10)},
				{"timestamp-millis negative number", "ts", `-1`, `-1`},
				{"timestamp-micros RFC 3339", "tsu", `"2026-01-02T03:04:05.123456Z"`, strconv.FormatInt(at.UnixMicro()+456, 10)},
				{"timestamp-micros number", "tsu", `1767323045123456`, `1767323045123456`},
				{"timestamp in a union", "opt", `{"long": "2026-01-02T03:04:05.123Z"}`, `{"long": ` + ms + `}`},
				{"timestamp in a union as a number", "opt", `{"long": ` + ms + `}`, `{"long": ` + ms + `}`},
				// date, times of day.
				{"date", "day", `"2026-01-02"`, `20455`},
				{"date number", "day", `20455`, `20455`},
				{"date before 1970", "day", `"1969-12-31"`, `-1`},
				{"dates in an array", "days", `["1970-01-02", 3]`, `[1, 3]`},
				{"time-millis", "tm", `"13:14:15.123"`, `47655123`},
				{"time-millis whole seconds", "tm", `"00:00:01"`, `1000`},
				{"time-millis number", "tm", `86399999`, `86399999`},
				{"time-micros", "tmu", `"13:14:15.123456"`, `47655123456`},
				{"time-micros number", "tmu", `0`, `0`},
				// uuid: a string, checked.
				{"uuid", "id", `"123e4567-e89b-12d3-a456-426614174000"`, `"123e4567-e89b-12d3-a456-426614174000"`},
				{"uuid upper case, kept", "id", `"123E4567-E89B-12D3-A456-426614174000"`, `"123E4567-E89B-12D3-A456-426614174000"`},
			} {
				t.Run(c.name, func(t *testing.T) {
					b, err := enc.Encode(ctx, Avro, Ref{ID: id}, []byte(`{"`+c.field+`": `+c.in+`}`))
					require.NoError(t, err)
					_, back, err := enc.Decode(ctx, Avro, b)
					require.NoError(t, err)
					want := map[string]string{}
					for k, v := range logicalDefaults {
						want[k] = v
					}
					want[c.field] = c.back
					var parts []string
					for k, v := range want {
						parts = append(parts, strconv.Quote(k)+": "+v)
					}
					requireJSONEq(t, "{"+strings.Join(parts, ", ")+"}", string(back))
				})
			}

			for _, c := range []struct {
				name, field, in, path, says string
			}{
				{"decimal beyond the scale", "amount", `12.345`, "amount", "more fractional digits than the scale"},
				{"decimal beyond the scale, tiny", "amount", `0.001`, "amount", "not rounded"},
				{"decimal beyond the precision", "amount", `12345678.9`, "amount", "precision"},
				{"decimal huge exponent", "amount", `1e999999999`, "amount", "precision"},
				{"decimal bytes beyond the precision", "amount", avroBytes(0x3B, 0x9A, 0xCA, 0x00), "amount", "beyond the precision"},
				{"decimal not bytes", "amount", `"12.34€"`, "amount", "code points 0 to 255"},
				{"decimal fixed beyond the precision", "price", `123456.7`, "price", "precision"},
				{"decimal fixed wrong size", "price", avroBytes(1, 2), "price", ""},
				{"decimal in a map", "amounts", `{"a": 1.5}`, "amounts.a", "fractional"},
				{"decimal in a union", "optprice", `{"lt.v1.Price": 0.0001}`, "optprice.lt.v1.Price", "fractional"},
				{"decimal null", "amount", `null`, "amount", ""},
				{"timestamp not RFC 3339", "ts", `"2026-01-02 03:04:05"`, "ts", "RFC 3339"},
				{"timestamp without offset", "ts", `"2026-01-02T03:04:05"`, "ts", "RFC 3339"},
				{"timestamp-millis finer than a millisecond", "ts", `"2026-01-02T03:04:05.1234Z"`, "ts", "not rounded"},
				{"timestamp-micros finer than a microsecond", "tsu", `"2026-01-02T03:04:05.1234567Z"`, "tsu", "not rounded"},
				{"timestamp fraction", "ts", `1.5`, "ts", "integer"},
				{"timestamp beyond a long", "ts", `12345678901234567890`, "ts", "beyond the range"},
				{"timestamp null", "ts", `null`, "ts", "null"},
				{"timestamp in a union", "opt", `{"long": "yesterday"}`, "opt.long", "RFC 3339"},
				{"date not a date", "day", `"2026-02-30"`, "day", "YYYY-MM-DD"},
				{"date with a time", "day", `"2026-01-02T00:00:00Z"`, "day", "YYYY-MM-DD"},
				{"date beyond an int", "day", `2147483648`, "day", "beyond the range"},
				{"date in an array", "days", `["2026-01-02", "x"]`, "days[1]", "YYYY-MM-DD"},
				{"time-millis hour 24", "tm", `"24:00:00"`, "tm", "HH:MM:SS"},
				{"time-millis one digit hour", "tm", `"1:02:03"`, "tm", "HH:MM:SS"},
				{"time-millis finer than a millisecond", "tm", `"13:14:15.1234"`, "tm", "not rounded"},
				{"time-millis beyond a day", "tm", `86400000`, "tm", "time of day"},
				{"time-millis negative", "tm", `-1`, "tm", "time of day"},
				{"time-micros beyond a day", "tmu", `86400000000`, "tmu", "time of day"},
				{"uuid not a uuid", "id", `"not-a-uuid"`, "id", "not a UUID"},
				{"uuid without hyphens", "id", `"123e4567e89b12d3a456426614174000"`, "id", "not a UUID"},
				{"uuid braces", "id", `"{123e4567-e89b-12d3-a456-426614174000}"`, "id", "not a UUID"},
				{"uuid number", "id", `1`, "id", ""},
			} {
				t.Run("refused "+c.name, func(t *testing.T) {
					b, err := enc.Encode(ctx, Avro, Ref{ID: id}, []byte(`{"`+c.field+`": `+c.in+`}`))
					var me *MismatchError
					require.ErrorAs(t, err, &me, "got %v", err)
					require.Nil(t, b)
					require.Equal(t, c.path, me.Path, "reason: %s", me.Reason)
					require.Contains(t, me.Reason, c.says)
					t.Log(err)
				})
			}
		})
	}
}

// The bytes Confluent's deserializers read: a decimal is the Avro bytes (a length, then the
// unscaled value in big-endian two's complement) or the fixed, a timestamp a zig-zag long.
func TestAvroLogicalWire(t *testing.T) {
	const schema = `{"type": "record", "name": "W", "fields": [
	  {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 2}},
	  {"name": "f", "type": {"type": "fixed", "name": "F", "size": 3, "logicalType": "decimal", "precision": 6, "scale": 1}},
	  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
	  {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
	  {"name": "day", "type": {"type": "int", "logicalType": "date"}}]}`
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			a := newAdmin(t, tg.url)
			_, id := a.register("wire", sr.TypeAvro, schema)
			enc, err := New(Config{URL: tg.url})
			require.NoError(t, err)
			at := time.Date(2026, 1, 2, 3, 4, 5, 123_456_000, time.UTC)
			for _, c := range []struct {
				name, data string
				payload    []byte
			}{
				{"convenient forms", `{"d": -12345678901234567.89, "f": -0.5, "ts": "2026-01-02T03:04:05.123Z", "tsu": "2026-01-02T03:04:05.123456Z", "day": "1970-01-03"}`,
					wire(t, []byte{0xEE, 0xDD, 0xEF, 0x0B, 0x82, 0x16, 0x7E, 0xEB} /* -1234567890123456789, as Java's BigInteger writes it */, []byte{0xFF, 0xFF, 0xFB}, at.UnixMilli(), at.UnixMicro(), 2)},
				{"REST Proxy's forms", `{"d": ` + avroBytes(0xEE, 0xDD, 0xEF, 0x0B, 0x82, 0x16, 0x7E, 0xEB) + `, "f": ` + avroBytes(0xFF, 0xFF, 0xFB) +
					`, "ts": ` + strconv.FormatInt(at.UnixMilli(), 10) + `, "tsu": ` + strconv.FormatInt(at.UnixMicro(), 10) + `, "day": 2}`,
					wire(t, []byte{0xEE, 0xDD, 0xEF, 0x0B, 0x82, 0x16, 0x7E, 0xEB}, []byte{0xFF, 0xFF, 0xFB}, at.UnixMilli(), at.UnixMicro(), 2)},
			} {
				t.Run(c.name, func(t *testing.T) {
					b, err := enc.Encode(context.Background(), Avro, Ref{ID: id}, []byte(c.data))
					require.NoError(t, err)
					require.Equal(t, c.payload, b[5:])
				})
			}
		})
	}
}

// wire is the Avro binary of record W: bytes d, fixed f, longs ts and tsu, int day.
func wire(t *testing.T, d, f []byte, ts, tsu int64, day int32) []byte {
	t.Helper()
	out := binary.AppendVarint(nil, int64(len(d))) // Avro's zig-zag varint is encoding/binary's
	out = append(out, d...)
	out = append(out, f...)
	out = binary.AppendVarint(out, ts)
	out = binary.AppendVarint(out, tsu)
	return binary.AppendVarint(out, int64(day))
}

// Enums, fixed, maps and unions nested in arrays and maps: Avro's JSON as REST Proxy writes it.
func TestAvroComplexTypes(t *testing.T) {
	const schema = `{"type": "record", "name": "C", "namespace": "c.v1", "fields": [
	  {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
	  {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 2}},
	  {"name": "tags", "type": {"type": "map", "values": ["null", "string", {"type": "array", "items": ["null", "long"]}]}},
	  {"name": "either", "type": ["null", "Color", "Hash", {"type": "record", "name": "Inner", "fields": [
	    {"name": "deep", "type": ["null", {"type": "map", "values": ["null", "Color"]}]}]}]}]}`
	const data = `{"color": "GREEN", "hash": "\u0001\u00ff",
	  "tags": {"a": null, "b": {"string": "x"}, "c": {"array": [null, {"long": 7}]}},
	  "either": {"c.v1.Inner": {"deep": {"map": {"k": {"c.v1.Color": "RED"}, "n": null}}}}}`
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			a := newAdmin(t, tg.url)
			_, id := a.register("complex", sr.TypeAvro, schema)
			enc, err := New(Config{URL: tg.url})
			require.NoError(t, err)
			ctx := context.Background()
			b, err := enc.Encode(ctx, Avro, Ref{ID: id}, []byte(data))
			require.NoError(t, err)
			_, back, err := enc.Decode(ctx, Avro, b)
			require.NoError(t, err)
			requireJSONEq(t, data, string(back))
			for _, c := range []struct{ data, path string }{
				{strings.Replace(data, `"GREEN"`, `"BLUE"`, 1), "color"},
				{strings.Replace(data, `{"long": 7}`, `{"long": 7.5}`, 1), "tags.c.array[1].long"},
				{strings.Replace(data, `"RED"`, `"BLUE"`, 1), "either.deep.k"},
				{strings.Replace(data, `"\u0001\u00ff"`, `"\u0001\u0100"`, 1), "hash"},
				{strings.Replace(data, `"\u0001\u00ff"`, `"\u0001é\u00ff"`, 1), "hash"},
			} {
				_, err := enc.Encode(ctx, Avro, Ref{ID: id}, []byte(c.data))
				var me *MismatchError
				require.ErrorAs(t, err, &me, "got %v", err)
				require.Equal(t, c.path, me.Path, "reason: %s", me.Reason)
			}
		})
	}
}

// Bytes are code points 0 to 255 however the JSON writes them: a character as itself, or
// escaped. goavro alone would take é as its two UTF-8 bytes, and \u20ac as 0xAC.
func TestAvroBytesCodePoints(t *testing.T) {
	fake := targets(t)[0]
	a := newAdmin(t, fake.url)
	_, id := a.register("bytes", sr.TypeAvro, `{"type": "record", "name": "B", "fields": [
	  {"name": "b", "type": "bytes"}, {"name": "f", "type": {"type": "fixed", "name": "F", "size": 2}}]}`)
	enc, err := New(Config{URL: fake.url})
	require.NoError(t, err)
	ctx := context.Background()
	b, err := enc.Encode(ctx, Avro, Ref{ID: id}, []byte(`{"b": "é\u00ffA\n", "f": "ÿ\u0000"}`))
	require.NoError(t, err)
	require.Equal(t, []byte{8, 0xE9, 0xFF, 'A', '\n', 0xFF, 0x00}, b[5:])
	_, back, err := enc.Decode(ctx, Avro, b)
	require.NoError(t, err)
	requireJSONEq(t, `{"b": "\u00e9\u00ffA\n", "f": "\u00ff\u0000"}`, string(back))
	for _, data := range []string{`{"b": "\u20ac", "f": "ab"}`, `{"b": "€", "f": "ab"}`} {
		_, err = enc.Encode(ctx, Avro, Ref{ID: id}, []byte(data))
		var me *MismatchError
		require.ErrorAs(t, err, &me, "%s: got %v", data, err)
		require.Equal(t, "b", me.Path)
	}
}

// Two decimals, the second without a scale (0): goavro's own decimal codec panics on it
// (it reads the scale of the second as a float64 without looking); the underlying bytes
// goavro is given compile.
func TestAvroDecimalWithoutScale(t *testing.T) {
	fake := targets(t)[0]
	a := newAdmin(t, fake.url)
	_, id := a.register("decimals", sr.TypeAvro, `{"type": "record", "name": "R", "fields": [
	  {"name": "a", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}},
	  {"name": "b", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4}}]}`)
	enc, err := New(Config{URL: fake.url})
	require.NoError(t, err)
	b, err := enc.Encode(context.Background(), Avro, Ref{ID: id}, []byte(`{"a": 1.5, "b": -2}`))
	require.NoError(t, err)
	// a: 150 = 0x96 needs a sign byte (two bytes, length 4 zig-zagged); b: -2 is 0xfe.
	require.Equal(t, []byte{4, 0x00, 0x96, 2, 0xFE}, b[5:])
}
