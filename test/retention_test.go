package test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/service"
)

// Through the coordinator (R1): within the retention a reused id is the same transaction (a
// different body is refused); once its row aged past the retention, lost its marker and was
// removed, the same id is a new transaction that runs and commits on both sides, with a
// history of its own. GET answers for the new one.
func TestRetentionReusedIDIsANewTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.MarkerAge = time.Second }})
	ctx := context.Background()
	first := order(e, "reuse-1", 10)
	r := e.post(first)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	e.settled()

	again := order(e, "reuse-1", 20)
	again["sql"] = []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, $2)", "args": []any{"reuse-1-again", 20}}}
	r = e.post(again)
	require.NotEqual(t, http.StatusOK, r.Status, "within the retention another body under the same id is refused: %s", r.Raw)

	// The marker sweep (COORDINATOR_MARKER_AGE) deletes the marker first: until then the row stays.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, e.db.QueryRow(ctx, "SELECT count(*) FROM coordinator_markers").Scan(&n))
		return n == 0
	}, time.Minute, 100*time.Millisecond, "the marker sweep")
	_, err := e.db.Exec(ctx, `UPDATE coordinator_transactions SET created_at = created_at - interval '8 days',
    updated_at = updated_at - interval '8 days', finished_at = finished_at - interval '8 days'`)
	require.NoError(t, err)
	_, err = e.svc.Retention.RunOnce(ctx)
	require.NoError(t, err)
	g := e.do(http.MethodGet, "/v1/transactions/reuse-1", nil)
	require.Equal(t, http.StatusNotFound, g.Status, "removed: %s", g.Raw)

	r = e.post(again)
	require.Equal(t, http.StatusOK, r.Status, "after its removal the id is a new transaction: %s", r.Raw)
	assert.Equal(t, "committed", r.str("state"))
	assert.Equal(t, 1, countRows(t, e.db, "reuse-1"), "the first transaction's work stays")
	assert.Equal(t, 1, countRows(t, e.db, "reuse-1-again"), "the new one's work")
	g = e.do(http.MethodGet, "/v1/transactions/reuse-1", nil)
	require.Equal(t, http.StatusOK, g.Status)
	assert.Equal(t, "committed", g.str("state"))
	var events int
	require.NoError(t, e.db.QueryRow(ctx, "SELECT count(*) FROM coordinator_events WHERE gid = $1", e.svc.Coord.GID("reuse-1")).Scan(&events))
	assert.Zero(t, events, "the removed transaction's history went with it (the new one's normal path stores none)")
}
