package test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSameIDWhileRowInsertHeld: a second POST of an id whose first run is still logging its
// row (the row's insert waits on a lock held on the log's table, so the row is not there yet)
// is never answered 404 not_found: the id is in flight. With a budget shorter than the first
// run's it is answered in doubt (202); with a longer one it waits and answers the first run's
// outcome.
func TestSameIDWhileRowInsertHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	id := "held-" + randHex(4)
	body := e.orderBody(id, "order")
	short := strings.Replace(body, "{", `{"timeout_ms":300,`, 1)

	// A lock on the log's table that the row's insert waits for (below the log's lock
	// timeout, txlog.LockTimeout).
	tx, err := e.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "LOCK TABLE coordinator_transactions IN SHARE MODE")
	require.NoError(t, err)
	var holder int
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holder))

	first := make(chan response, 1)
	go func() { first <- e.postQuiet(body) }()
	waitInsertBlocked(t, e, holder)

	held := e.post(short)
	assert.NotEqual(t, http.StatusNotFound, held.Status, "an id in flight is never not found: %s", held.Raw)
	assert.Equal(t, http.StatusAccepted, held.Status, "its outcome is not known yet: %s", held.Raw)
	assert.Equal(t, id, held.str("id"), "a 202 carries the transaction: %s", held.Raw)
	assert.Equal(t, "active", held.str("state"), "%s", held.Raw)

	g := e.do(http.MethodGet, "/v1/transactions/"+id, nil)
	assert.Equal(t, http.StatusOK, g.Status, "GET of an id in flight is never not found: %s", g.Raw)
	assert.Equal(t, "active", g.str("state"), "%s", g.Raw)

	waiting := make(chan response, 1)
	go func() { waiting <- e.postQuiet(body) }()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, tx.Rollback(ctx)) // the insert goes on

	r1 := <-first
	require.Equal(t, http.StatusOK, r1.Status, "%s", r1.Raw)
	r2 := <-waiting
	assert.Equal(t, http.StatusOK, r2.Status, "the waiting request answers the first run's outcome: %s", r2.Raw)
	assert.Equal(t, "committed", r2.str("state"))
	assert.Equal(t, 1, countRows(t, e.db, id), "committed once")
}

// waitInsertBlocked waits until a row's insert waits for the lock that backend holder holds.
func waitInsertBlocked(t *testing.T, e *env, holder int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		require.NoError(t, e.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '%INSERT INTO coordinator_transactions%'`, holder).Scan(&n))
		if n > 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "no row's insert waited for the lock")
		time.Sleep(10 * time.Millisecond)
	}
}
