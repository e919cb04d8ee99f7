package test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// C1 through a restart: requests killed right after their prepared write leave their pool ids
// quarantined; the restarted instance's startup pass resolves the rows by the page, commits both
// sides, and only then gives every id back to the pool (I1).
func TestRestartResolvesByThePage(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{})
	ids := []string{"pg-1", "pg-2", "pg-3"}
	ctx := context.Background()
	for _, id := range ids {
		e.killedAt(t, "after_log_prepared", id)
		e.postponeRecovery(t) // the next kill's startup pass leaves it alone
	}
	for _, id := range ids {
		var state string
		require.NoError(t, e.db.QueryRow(ctx,
			`SELECT state FROM coordinator_transactions WHERE request_id = $1`, id).Scan(&state))
		assert.Equal(t, "prepared", state, "%s: left prepared by the kill", id)
	}
	_, err := e.db.Exec(ctx, `UPDATE coordinator_transactions SET next_attempt_at = now() WHERE state = 'prepared'`)
	require.NoError(t, err)
	n := e.startNode(t, "a")
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if call(t, http.MethodGet, n.base+"/v1/transactions/"+id, "").str("state") != "committed" {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "the restart's recovery commits every prepared row")
	require.Eventually(t, func() bool {
		return call(t, http.MethodGet, n.base+"/v1/status", "").str("pools", "kafka", "quarantined") == "0"
	}, 30*time.Second, 50*time.Millisecond, "every id is back in the pool")
	want := map[string]sent{}
	for _, id := range ids {
		want[id] = sent{kind: "order"}
	}
	committed, aborted := e.verify(t, n.base, want)
	assert.Equal(t, len(ids), committed)
	assert.Zero(t, aborted)
}
