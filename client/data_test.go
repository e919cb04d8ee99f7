package client

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecordWireForm(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		rec  Record
		want string
	}{
		{"text", Record{Topic: "t", Key: Text("k\x00"), Value: Text("")}, `{"topic":"t","key":"k\u0000","value":""}`},
		{"binary", Record{Topic: "t", Value: Binary([]byte{0, 1, 0xff})}, `{"topic":"t","value":{"type":"binary","data":"AAH/"}}`},
		{"json", Record{Topic: "t", Value: JSON(map[string]any{"total": 10})}, `{"topic":"t","value":{"type":"json","data":{"total":10}}}`},
		{"json null", Record{Topic: "t", Value: JSON(nil)}, `{"topic":"t","value":{"type":"json","data":null}}`},
		{"json nulls inside", Record{Topic: "t", Value: JSON(map[string]any{"a": nil, "b": []any{nil}})},
			`{"topic":"t","value":{"type":"json","data":{"a":null,"b":[null]}}}`},
		{"avro null for a union", Record{Topic: "t", Value: Avro("s", map[string]any{"nickname": nil})},
			`{"topic":"t","value":{"type":"avro","data":{"nickname":null},"subject":"s"}}`},
		{"avro", Record{Topic: "t", Value: Avro("orders-value", map[string]any{"id": "o"})},
			`{"topic":"t","value":{"type":"avro","data":{"id":"o"},"subject":"orders-value"}}`},
		{"protobuf by version", Record{Topic: "t", Value: Schema("protobuf", "s", 3, map[string]any{})},
			`{"topic":"t","value":{"type":"protobuf","data":{},"subject":"s","version":3}}`},
		{"row", Record{Topic: "t", Value: FromResult(0, 0, "")}, `{"topic":"t","value":{"type":"json","from":"sql[0].rows[0]"}}`},
		{"column", Record{Topic: "t", Key: FromResult(1, 2, "id")}, `{"topic":"t","key":{"type":"string","from":"sql[1].rows[2][\"id\"]"}}`},
		{"headers in order", Record{Topic: "t", Headers: []Header{TextHeader("h", "1"), BinaryHeader("h", []byte{0}),
			{Name: "null"}, HeaderFrom("id", 0, 0, "id")}},
			`{"topic":"t","headers":[{"name":"h","value":"1"},{"name":"h","value_b64":"AA=="},{"name":"null","value":null},{"name":"id","from":"sql[0].rows[0][\"id\"]"}]}`},
		{"timestamp", Record{Topic: "t", Timestamp: &at}, `{"topic":"t","timestamp":"2026-01-02T03:04:05Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tt.rec)
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, string(b))
			var back Record
			require.NoError(t, json.Unmarshal(b, &back), "a record reads back")
			again, err := json.Marshal(back)
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, string(again))
		})
	}
}

func TestJSONDataThatCannotMarshal(t *testing.T) {
	t.Parallel()
	_, err := json.Marshal(Record{Topic: "t", Value: JSON(func() {})})
	require.Error(t, err, "the marshalling error surfaces when the request is encoded")
}

// Numbers a Go float64 cannot hold travel as written when given as json.Number or
// json.RawMessage: the client never reads them as numbers.
func TestJSONDataNumbersAsWritten(t *testing.T) {
	t.Parallel()
	const data = `{"n":12345678901234567890,"d":1.10,"e":1e400,"z":-0.0,"x":null}`
	for name, d := range map[string]*Data{
		"raw":        JSON(json.RawMessage(data)),
		"raw schema": JSONSchema("s", json.RawMessage(data)),
		"numbers": JSON(map[string]any{"n": json.Number("12345678901234567890"), "d": json.Number("1.10"),
			"e": json.Number("1e400"), "z": json.Number("-0.0"), "x": nil}),
	} {
		b, err := json.Marshal(Record{Topic: "t", Value: d})
		require.NoError(t, err, name)
		var back struct {
			Value struct {
				Data json.RawMessage `json:"data"`
			} `json:"value"`
		}
		require.NoError(t, json.Unmarshal(b, &back), name)
		if name == "numbers" { // a map's keys are written sorted
			assert.Equal(t, `{"d":1.10,"e":1e400,"n":12345678901234567890,"x":null,"z":-0.0}`, string(back.Value.Data), name)
			continue
		}
		assert.Equal(t, data, string(back.Value.Data), name)
	}
}
