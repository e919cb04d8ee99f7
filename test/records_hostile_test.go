package test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/service"
)

// Hostile record parts (P1, P2): each is refused, never a 5xx, and leaves nothing behind.
func TestRecordsHostileInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.MaxBodyBytes = 256 << 10 }})
	deep := strings.Repeat(`[`, 200) + strings.Repeat(`]`, 200)
	rec := func(part string) string {
		return `{"id":"%s","sql":[{"statement":"INSERT INTO orders (id, total) VALUES ('%s', 1) RETURNING id"}],"kafka":[{"topic":"` + e.topic + `",` + part + `}]}`
	}
	tests := []struct {
		name   string
		part   string
		status int
		field  string
	}{
		{"data nested too deep", `"value":{"type":"json","data":` + deep + `}`, 400, ""},
		{"duplicate key in data", `"value":{"type":"json","data":{"a":1,"a":2}}`, 400, `kafka[0].value.data["a"]`},
		{"duplicate type", `"value":{"type":"json","type":"binary","data":"AA=="}`, 400, "kafka[0].value.type"},
		{"type not a string", `"value":{"type":7,"data":1}`, 400, "kafka[0].value.type"},
		{"schema id beyond int32", `"value":{"type":"avro","data":{},"schema_id":4294967297}`, 400, "kafka[0].value.schema_id"},
		{"schema id zero", `"value":{"type":"avro","data":{},"schema_id":0}`, 400, "kafka[0].value.schema_id"},
		{"statement index huge", `"value":{"type":"json","from":"sql[999999999].rows[0]"}`, 400, "kafka[0].value.from"},
		{"row index with a sign", `"value":{"type":"json","from":"sql[0].rows[-1]"}`, 400, "kafka[0].value.from"},
		{"row index with a leading zero", `"value":{"type":"json","from":"sql[0].rows[01]"}`, 400, "kafka[0].value.from"},
		{"column with a quote, unquoted", `"value":{"type":"json","from":"sql[0].rows[0].a\"b"}`, 400, "kafka[0].value.from"},
		{"reference with trailing text", `"value":{"type":"json","from":"sql[0].rows[0].id.more"}`, 400, "kafka[0].value.from"},
		{"quoted column that is not there", `"value":{"type":"json","from":"sql[0].rows[0][\"id\\\" OR 1=1\"]"}`, 409, ""},
		{"header list entry with all three", `"headers":[{"name":"h","value":"a","value_b64":"AA==","from":"sql[0].rows[0].id"}]`, 400, "kafka[0].headers[0]"},
		{"header list entry not an object", `"headers":["h"]`, 400, "kafka[0].headers[0]"},
		{"header value a number", `"headers":{"h":1}`, 400, `kafka[0].headers["h"]`},
		{"duplicate header name in the object form", `"headers":{"h":"1","h":"2"}`, 400, `kafka[0].headers["h"]`},
		{"timestamp an object", `"timestamp":{"ms":1}`, 400, "kafka[0].timestamp"},
		{"timestamp beyond 9999", `"timestamp":253402300800000`, 400, "kafka[0].timestamp"},
		{"timestamp before 1970", `"timestamp":"1969-12-31T23:59:59Z"`, 400, "kafka[0].timestamp"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("hr-%d", i)
			r := e.post(fmt.Sprintf(rec(tt.part), id, id))
			require.Equal(t, tt.status, r.Status, "%s", r.Raw)
			if tt.field != "" {
				assert.Equal(t, tt.field, r.str("error", "field"), "%s", r.Raw)
			}
			assert.Equal(t, 0, countRows(t, e.db, id), "nothing of it committed")
			assert.Zero(t, e.committedWithKey(id))
		})
	}
	// Results larger than the request's decoded cap (a body cannot be: base64 and JSON text only
	// grow what they carry): aborted, nothing committed.
	big := e.post(map[string]any{"id": "hr-big",
		"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total, note) VALUES ('hr-big', 1, repeat('n', 300000)) RETURNING note"}},
		"kafka": []any{map[string]any{"topic": e.topic, "key": "hr-big", "value": map[string]any{"type": "string", "from": "sql[0].rows[0].note"}}}})
	require.Equal(t, 409, big.Status, "%s", big.Raw)
	assert.Contains(t, big.str("error", "message"), "COORDINATOR_MAX_BODY_BYTES")
	assert.Equal(t, 0, countRows(t, e.db, "hr-big"))
	assert.Empty(t, e.preparedLeft())
}
