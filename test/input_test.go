package test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/service"
)

func TestIdempotency(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	first := e.post(order(e, "idem-1", 7))
	require.Equal(t, http.StatusOK, first.Status, "%s", first.Raw)

	again := e.post(order(e, "idem-1", 7))
	require.Equal(t, http.StatusOK, again.Status)
	assert.Equal(t, first.get("kafka", "records"), again.get("kafka", "records"), "stored outcome, not a new run")
	assert.Equal(t, 1, countRows(t, e.db, "idem-1"))
	assert.Equal(t, 1, e.committedWithKey("idem-1"), "the record is produced once")

	other := e.post(order(e, "idem-1", 8))
	require.Equal(t, http.StatusUnprocessableEntity, other.Status, "%s", other.Raw)
	assert.Equal(t, "id_conflict", other.str("error", "class"))

	// An aborted outcome is stored too.
	bad := map[string]any{"id": "idem-2", "sql": []any{map[string]any{"statement": "INSERT INTO nope VALUES (1)"}}}
	require.Equal(t, http.StatusConflict, e.post(bad).Status)
	r := e.post(bad)
	require.Equal(t, http.StatusConflict, r.Status)
	assert.Equal(t, "42P01", r.str("error", "sqlstate"))
}

func TestBadInputRunsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{configure: func(c *service.Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxStatements = 3
		c.MaxRecords = 3
	}})
	stmt := func(id string) map[string]any {
		return map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{id}}
	}
	rec := map[string]any{"topic": e.topic, "key": "k", "value": "v"}
	cases := []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"malformed JSON", `{"sql": [`, 400, "body"},
		{"not an object", `[1,2]`, 400, "body"},
		{"empty body", ``, 400, "body"},
		{"trailing data", `{"kafka":[{"topic":"x"}]} {}`, 400, "body"},
		{"unknown field", `{"sql":[],"kafak":[]}`, 400, "kafak"},
		{"unknown nested field", map[string]any{"sql": []any{map[string]any{"statement": "SELECT 1", "db": "x"}}}, 400, "sql[0].db"},
		{"empty request", `{}`, 400, "sql"},
		{"empty lists", `{"sql":[],"kafka":[]}`, 400, "sql"},
		{"bad id", map[string]any{"id": "has space", "sql": []any{stmt("bad-id")}}, 400, "id"},
		{"id too long", map[string]any{"id": strings.Repeat("a", 129), "sql": []any{stmt("long")}}, 400, "id"},
		{"statement not a string", `{"sql":[{"statement":5}]}`, 400, "sql[0].statement"},
		{"empty statement", map[string]any{"sql": []any{map[string]any{"statement": " "}}}, 400, "sql[0].statement"},
		{"transaction control", map[string]any{"sql": []any{stmt("tc"), map[string]any{"statement": "COMMIT"}}}, 400, "sql[1].statement"},
		{"object arg", map[string]any{"sql": []any{map[string]any{"statement": "SELECT $1", "args": []any{map[string]any{"a": 1}}}}}, 400, "sql[0].args[0]"},
		{"unknown database", map[string]any{"sql": []any{map[string]any{"database": "nope", "statement": "SELECT 1"}}}, 400, "sql[0].database"},
		{"value an untyped object", `{"kafka":[{"topic":"t","value":{"a":1}}]}`, 400, "kafka[0].value.a"},
		{"value a number", `{"kafka":[{"topic":"t","value":1}]}`, 400, "kafka[0].value"},
		{"missing topic", map[string]any{"kafka": []any{map[string]any{"value": "v"}}}, 400, "kafka[0].topic"},
		{"negative partition", map[string]any{"kafka": []any{map[string]any{"topic": e.topic, "partition": -1}}}, 400, "kafka[0].partition"},
		{"bad timeout", map[string]any{"sql": []any{stmt("to")}, "timeout_ms": -5}, 400, "timeout_ms"},
		{"timeout over max", map[string]any{"sql": []any{stmt("to2")}, "timeout_ms": 3_600_000}, 400, "timeout_ms"},
		{"too many statements", map[string]any{"sql": []any{stmt("a"), stmt("b"), stmt("c"), stmt("d")}}, 400, "sql"},
		{"too many records", map[string]any{"kafka": []any{rec, rec, rec, rec}}, 400, "kafka"},
		{"oversized body", map[string]any{"sql": []any{stmt("big")}, "kafka": []any{map[string]any{"topic": e.topic, "value": strings.Repeat("x", 100<<10)}}}, 413, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.post(tc.body)
			require.Equal(t, tc.status, r.Status, "%s", r.Raw)
			assert.Equal(t, "invalid_request", r.str("error", "class"))
			assert.Equal(t, tc.field, r.str("error", "field"), "%s", r.Raw)
			assert.NotEmpty(t, r.str("error", "message"))
		})
	}
	// Nothing of any of them ran: no row, no record, no log entry, nothing prepared.
	var rows, logged int
	require.NoError(t, e.db.QueryRow(t.Context(), "SELECT count(*) FROM orders").Scan(&rows))
	require.NoError(t, e.db.QueryRow(t.Context(), "SELECT count(*) FROM coordinator_transactions").Scan(&logged))
	assert.Zero(t, rows)
	assert.Zero(t, logged)
	assert.Empty(t, e.committedRecords(e.topic))
	assert.Empty(t, e.preparedLeft())

	l := e.do(http.MethodGet, "/v1/transactions?state=bogus", nil)
	assert.Equal(t, http.StatusBadRequest, l.Status)
	assert.Equal(t, "state", l.str("error", "field"))
	nf := e.do(http.MethodGet, "/v1/transactions/nope", nil)
	assert.Equal(t, http.StatusNotFound, nf.Status)
	_ = fmt.Sprint
}

// A 409 is final for its id even when the cause was transient (a serialization failure, class
// retriable in KIP-1050 terms): a retry with the same id returns the same 409 and runs nothing,
// so no id is ever answered both 409 and 200. Only a 503 ("safe to retry with the same id") is
// run again.
func TestConflictAnswerIsFinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	_, err := e.db.Exec(t.Context(), "CREATE TABLE flags (x int)")
	require.NoError(t, err)
	body := map[string]any{"id": "ser-1", "sql": []any{
		map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('ser-1', 1)"},
		map[string]any{"statement": `DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM flags) THEN
  RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'could not serialize access'; END IF; END$$`},
	}, "kafka": []any{map[string]any{"topic": e.topic, "key": "ser-1", "value": "v"}}}
	first := e.post(body)
	require.Equal(t, http.StatusConflict, first.Status, "%s", first.Raw)
	assert.Equal(t, "40001", first.str("error", "sqlstate"))
	assert.NotEqual(t, "retriable", first.str("error", "class"), "retriable is the class of a 503")

	// The statement would now succeed; the same id must still answer the stored 409.
	_, err = e.db.Exec(t.Context(), "INSERT INTO flags VALUES (1)")
	require.NoError(t, err)
	again := e.post(body)
	require.Equal(t, http.StatusConflict, again.Status, "%s", again.Raw)
	assert.Zero(t, countRows(t, e.db, "ser-1"))
	assert.Empty(t, e.committedRecords(e.topic))
}
