package txntype

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRef(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want resultRef
		err  string
	}{
		{"sql[0].rows[0]", resultRef{0, 0, ""}, ""},
		{"sql[1].rows[12].id", resultRef{1, 12, "id"}, ""},
		{`sql[0].rows[0]["a.b \"c\""]`, resultRef{0, 0, `a.b "c"`}, ""},
		{"sql[2].rows[0]", resultRef{}, "names statement 2, but the request has 2"},
		{"sql[0].rows[01]", resultRef{}, "a reference is"},
		{"sql[0].rows[-1]", resultRef{}, "a reference is"},
		{"sql[0].rows[0].a.b", resultRef{}, "a reference is"},
		{"sql[0].rows[0].", resultRef{}, "a reference is"},
		{`sql[0].rows[0][""]`, resultRef{}, "not a JSON string"},
		{"sql[0]", resultRef{}, "a reference is"},
		{"SQL[0].rows[0]", resultRef{}, "a reference is"},
		{"sql[1234567].rows[0]", resultRef{}, "a reference is"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseRef(tt.in, 2)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// WireSize is the size Kafka gives a record batch holding the record alone: the 61-byte batch
// header, then the record's length varint and body (attributes, two deltas, key, value,
// headers).
func TestWireSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rec  Record
		want int
	}{
		// body: attrs 1 + ts delta 1 + offset delta 1 + key -1 (1) + value -1 (1) + 0 headers (1) = 6
		{"nulls", Record{}, 61 + 1 + 6},
		// body: 3 + key (1+1) + value (2+100) + headers 1 = 108 → length varint 2 bytes (zigzag 216)
		{"100-byte value", Record{Key: Text("k"), Value: Bytes(make([]byte, 100))}, 61 + 2 + 108},
		// body: 3 + 1 + 1 + headers: count 1, name (1+1), value (1+2) = 11
		{"a header", Record{Headers: TextHeaders("h", "ab")}, 61 + 1 + 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tt.rec.WireSize()
			require.True(t, ok)
			assert.Equal(t, tt.want, got)
		})
	}
	unresolved := Record{Value: &Payload{Type: TypeJSON, From: "sql[0].rows[0]"}}
	_, ok := unresolved.WireSize()
	assert.False(t, ok, "a part built from a result has no size before it is resolved")
}

func TestPayloadForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     []byte
		field    string
	}{
		{"plain", `"a\u0000b"`, []byte("a\x00b"), ""},
		{"plain ascii", `"abc"`, []byte("abc"), ""},
		{"string", `{"type":"string","data":"é"}`, []byte("é"), ""},
		{"binary", `{"type":"binary","data":"AP8="}`, []byte{0, 0xff}, ""},
		{"binary in capitals", `{"type":"BINARY","data":"AP8="}`, []byte{0, 0xff}, ""},
		{"mixed case", `{"type":"Binary","data":"AP8="}`, nil, "v.type"},
		{"binary empty", `{"type":"binary","data":""}`, []byte{}, ""},
		{"json", `{"type":"json","data":{ "b" : [1, 2], "a":null }}`, []byte(`{"b":[1,2],"a":null}`), ""},
		{"json null", `{"type":"json","data":null}`, []byte(`null`), ""},
		{"json nulls inside", `{"type":"json","data":{"a":null,"b":[null,{"c":null}]}}`, []byte(`{"a":null,"b":[null,{"c":null}]}`), ""},
		{"json numbers as written", `{"type":"json","data":[12345678901234567890, 1.10, 1e400, -0.0, 1E+2]}`, []byte(`[12345678901234567890,1.10,1e400,-0.0,1E+2]`), ""},
		{"binary null", `{"type":"binary","data":null}`, nil, "v.data"},
		{"string null", `{"type":"string","data":null}`, nil, "v.data"},
		{"binary bad", `{"type":"binary","data":"AP8"}`, nil, "v.data"},
		{"binary not a string", `{"type":"binary","data":[1]}`, nil, "v.data"},
		{"unknown type", `{"type":"yaml","data":"x"}`, nil, "v.type"},
		{"no data", `{"type":"string"}`, nil, "v.data"},
		{"schema without a schema", `{"type":"avro","data":{}}`, nil, "v.schema_id"},
		{"message on avro", `{"type":"avro","data":{},"schema_id":1,"message":"m"}`, nil, "v.message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var p Payload
			require.NoError(t, json.Unmarshal([]byte(tt.in), &p))
			err := p.check("v", 1)
			if tt.field != "" {
				var ie *InvalidError
				require.ErrorAs(t, err, &ie)
				assert.Equal(t, tt.field, ie.Field, "%v", err)
				return
			}
			require.NoError(t, err)
			b, ok := p.Resolved()
			require.True(t, ok)
			assert.Equal(t, tt.want, b)
		})
	}
}

func TestTimestampForms(t *testing.T) {
	t.Parallel()
	ok := map[string]int64{
		`0`:                               0,
		`1767323045123`:                   1767323045123,
		`"2026-01-02T03:04:05.123Z"`:      1767323045123,
		`"2026-01-02T04:04:05.123+01:00"`: 1767323045123,
	}
	for in, want := range ok {
		var ts Timestamp
		require.NoError(t, json.Unmarshal([]byte(in), &ts))
		require.NoError(t, ts.parse(), in)
		assert.Equal(t, want, ts.Time().UnixMilli(), in)
	}
	for _, in := range []string{`-1`, `1.5`, `1e3`, `"now"`, `"1969-12-31T23:59:59Z"`, `253402300800000`, `"2026-01-02"`} {
		var ts Timestamp
		require.NoError(t, json.Unmarshal([]byte(in), &ts))
		assert.Error(t, ts.parse(), in)
	}
}
