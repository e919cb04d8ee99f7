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
