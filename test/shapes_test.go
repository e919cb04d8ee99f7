package test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/devstack"
	"github.com/kpgtx/coordinator/service"
)

func TestTwoDatabases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{secondDB: true})
	req := map[string]any{
		"id": "two-db",
		"sql": []any{
			map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, $2)", "args": []any{"two-db", 3}},
			map[string]any{"database": "other", "statement": "INSERT INTO orders (id, total) VALUES ($1, $2)", "args": []any{"two-db", 4}},
		},
		"kafka": []any{map[string]any{"topic": e.topic, "key": "two-db", "value": "v"}},
	}
	r := e.post(req)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	assert.Equal(t, 1, countRows(t, e.db, "two-db"))
	assert.Equal(t, 1, countRows(t, e.db2, "two-db"))
	gids := r.get("sql_gids").([]any)
	assert.Len(t, gids, 2, "one prepared transaction per database")

	// A failure on the second database rolls back the first one and Kafka.
	req["id"] = "two-db-fail"
	req["sql"] = []any{
		map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{"two-db-fail"}},
		map[string]any{"database": "other", "statement": "INSERT INTO orders (id, total) VALUES ($1, NULL)", "args": []any{"two-db-fail"}},
	}
	req["kafka"] = []any{map[string]any{"topic": e.topic, "key": "two-db-fail", "value": "v"}}
	r = e.post(req)
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Raw)
	assert.Equal(t, "23502", r.str("error", "sqlstate"), "not-null violation")
	assert.Equal(t, "sql:other", r.str("error", "participant"))
	assert.Equal(t, 0, countRows(t, e.db2, "two-db-fail"))
	e.assertNothingOf("two-db-fail")

	// Two databases without Kafka: the decision is the durable committing row.
	req["id"] = "two-db-sql-only"
	req["sql"] = []any{
		map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{"two-db-sql-only"}},
		map[string]any{"database": "other", "statement": "INSERT INTO orders (id, total) VALUES ($1, 2)", "args": []any{"two-db-sql-only"}},
	}
	delete(req, "kafka")
	r = e.post(req)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	assert.Equal(t, 1, countRows(t, e.db, "two-db-sql-only"))
	assert.Equal(t, 1, countRows(t, e.db2, "two-db-sql-only"))
	assertEvents(t, e, "two-db-sql-only", "active", "committing", "committed")
	assert.Empty(t, e.preparedLeft())
}

// assertEvents checks the audit trail of a transaction, as GET shows it. A commit's final write
// may follow its answer (coord/finals.go); a GET on the instance that answered waits for it.
func assertEvents(t *testing.T, e *env, id string, states ...string) {
	t.Helper()
	r := e.do(http.MethodGet, "/v1/transactions/"+id, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	events, ok := r.get("events").([]any)
	require.True(t, ok, "events: %s", r.Raw)
	var got []string
	for _, ev := range events {
		got = append(got, fmt.Sprint(ev.(map[string]any)["state"]))
	}
	assert.Equal(t, states, got)
}

func TestShortestPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})

	// One database, no Kafka: one-phase commit, no prepared transaction, RETURNING rows.
	r := e.post(map[string]any{"id": "sql-only", "sql": []any{
		map[string]any{"statement": "INSERT INTO orders (id, total, note) VALUES ($1, $2, $3) RETURNING id, total, note", "args": []any{"sql-only", "12.50", nil}},
		map[string]any{"statement": "UPDATE orders SET note = $1 WHERE id = $2", "args": []any{"n", "sql-only"}},
	}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	sql := r.get("sql").([]any)
	require.Len(t, sql, 2)
	first := sql[0].(map[string]any)
	assert.Equal(t, "1", fmt.Sprint(first["rows_affected"]))
	rows := first["rows"].([]any)
	require.Len(t, rows, 1)
	assert.Equal(t, "sql-only", rows[0].(map[string]any)["id"])
	assert.Equal(t, "12.50", fmt.Sprint(rows[0].(map[string]any)["total"]))
	assert.Nil(t, sql[1].(map[string]any)["rows"], "no RETURNING, no rows")
	assert.Len(t, r.get("sql_gids"), 1, "one phase: the marker gid")
	assert.Nil(t, r.get("kafka"))
	assertEvents(t, e, "sql-only", "active", "committed")

	// Kafka only: prepared is still logged before EndTxn (I2).
	r = e.post(map[string]any{"id": "kafka-only", "kafka": []any{
		map[string]any{"topic": e.topic, "key": "kafka-only", "value": nil},
		map[string]any{"topic": e.topic, "partition": 2, "key": nil, "value": "x"},
	}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	recs := r.get("kafka", "records").([]any)
	require.Len(t, recs, 2)
	assert.Equal(t, "2", fmt.Sprint(recs[1].(map[string]any)["partition"]))
	got := e.committedRecords(e.topic)
	for _, rec := range recs {
		m := rec.(map[string]any)
		assert.Contains(t, got, fmt.Sprintf("%v/%v", m["partition"], m["offset"]))
	}
	assertEvents(t, e, "kafka-only", "active", "prepared", "committed")
	assertEvents(t, e, "sql-only", "active", "committed")

	// Listing by state, paged.
	l := e.do(http.MethodGet, "/v1/transactions?state=committed&limit=1", nil)
	require.Equal(t, http.StatusOK, l.Status)
	require.Len(t, l.get("transactions").([]any), 1)
	next := l.str("next")
	require.NotEmpty(t, next)
	l2 := e.do(http.MethodGet, "/v1/transactions?state=committed&limit=1&after="+next, nil)
	require.Equal(t, http.StatusOK, l2.Status)
	require.Len(t, l2.get("transactions").([]any), 1)
	assert.NotEqual(t, l.get("transactions").([]any)[0].(map[string]any)["id"], l2.get("transactions").([]any)[0].(map[string]any)["id"])
	assert.Empty(t, l2.str("next"))
	l3 := e.do(http.MethodGet, "/v1/transactions?state=aborted", nil)
	assert.Empty(t, l3.get("transactions").([]any))
}

// TestKafkaDownIs503 stops the Kafka cluster under a running coordinator: the request fails
// with 503 (safe to retry) and leaves nothing prepared.
func TestKafkaDownIs503(t *testing.T) {
	t.Parallel()
	k, err := devstack.StartKafka(context.Background())
	require.NoError(t, err)
	t.Cleanup(k.Stop)
	e := newEnv(t, envOpts{configure: func(c *service.Config) {
		c.Brokers = k.Brokers()
		c.DefaultTimeout = 3 * time.Second
	}})
	e.brokers = k.Brokers()
	e.createTopic("down", 1)
	k.Stop()

	r := e.post(map[string]any{"id": "down-1",
		"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('down-1', 1)"}},
		"kafka": []any{map[string]any{"topic": "down", "value": "v"}}})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Raw)
	assert.Equal(t, "retriable", r.str("error", "class"))
	assert.Equal(t, 0, countRows(t, e.db, "down-1"))
	assert.Empty(t, e.preparedLeft())
}
