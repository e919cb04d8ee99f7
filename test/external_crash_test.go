package test

// A transaction its caller decides, killed at every fault point of its prepare and of its
// decision (SIGKILL, COORDINATOR_FAULT): the caller resends to a live instance, and both sides
// end as the answers say, with nothing left prepared or open.

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExternalKilled(t *testing.T) {
	t.Parallel()
	for _, point := range txntype.ExternalFaultPoints {
		for _, action := range []string{"commit", "rollback"} {
			t.Run(string(point)+"/"+action, func(t *testing.T) {
				t.Parallel()
				e := newStore(t, envOpts{})
				id := "xk-" + action
				body := e.externalBody(id, 0)
				var live *node
				var state string
				if point == txntype.FaultAfterLogWaiting {
					// Killed after the waiting write, before the answer: the caller resends the
					// same request to the restarted instance and gets its prepared answer.
					n := e.startNode(t, "a", "COORDINATOR_FAULT="+string(point))
					_, err := sendTo(n.base, http.MethodPost, "/v1/transactions", body)
					require.Error(t, err, "the process died before answering")
					n.waitExit(30 * time.Second)
					live = e.startNode(t, "a")
					p := e.doAt(live.base, http.MethodPost, "/v1/transactions", body)
					require.Equal(t, http.StatusOK, p.Status, "%s", p.Raw)
					require.Equal(t, true, p.get("waiting"), "%s", p.Raw)
					state = p.str("prepared_state")
				} else {
					// Prepared on a; the decision goes to b, which dies at the point; the caller
					// resends it to a.
					live = e.startNode(t, "a")
					p := e.doAt(live.base, http.MethodPost, "/v1/transactions", body)
					require.Equal(t, http.StatusOK, p.Status, "%s", p.Raw)
					state = p.str("prepared_state")
					b := e.startNode(t, "b", "COORDINATOR_FAULT="+string(point))
					_, err := sendTo(b.base, http.MethodPost, "/v1/transactions/"+id+"/"+action, decisionBody(action, state))
					require.Error(t, err, "b died taking the decision")
					b.waitExit(30 * time.Second)
				}
				r := e.doAt(live.base, http.MethodPost, "/v1/transactions/"+id+"/"+action, decisionBody(action, state))
				final := r.str("state")
				if r.Status == http.StatusAccepted {
					require.Eventually(t, func() bool {
						final = e.doAt(live.base, http.MethodGet, "/v1/transactions/"+id, nil).str("state")
						return final == "committed" || final == "aborted"
					}, 60*time.Second, 100*time.Millisecond)
				} else {
					require.Equal(t, http.StatusOK, r.Status, "%s resent: %s", action, r.Raw)
				}
				want := map[string]string{"commit": "committed", "rollback": "aborted"}[action]
				assert.Equal(t, want, final)
				e.waitResolved(t, 60*time.Second)
				rows, recs := countRows(t, e.db, id), e.committedWithKey(id)
				if want == "committed" {
					assert.Equal(t, 1, rows, "committed: its row")
					assert.Equal(t, 1, recs, "committed: its record")
				} else {
					assert.Zero(t, rows, "aborted: no row")
					assert.Zero(t, recs, "aborted: no record")
				}
				assert.Empty(t, e.preparedLeft(), "nothing left prepared")
			})
		}
	}
}

// decisionBody is the body of a commit (with the prepared_state) or of a rollback.
func decisionBody(action, state string) any {
	if action == "commit" {
		return map[string]any{"prepared_state": state}
	}
	return nil
}

// TestExternalWaitsThroughRestart: a waiting transaction outlives its instance's crash (the row,
// its prepared gid and its open Kafka transaction wait), and is decided after the restart.
func TestExternalWaitsThroughRestart(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{})
	n := e.startNode(t, "a")
	states := map[string]string{}
	for i := range 2 {
		id := fmt.Sprintf("xr-%d", i)
		p := e.doAt(n.base, http.MethodPost, "/v1/transactions", e.externalBody(id, 0))
		require.Equal(t, http.StatusOK, p.Status, "%s", p.Raw)
		states[id] = p.str("prepared_state")
	}
	n.kill()
	n2 := e.startNode(t, "a")
	for id, action := range map[string]string{"xr-0": "commit", "xr-1": "rollback"} {
		r := e.doAt(n2.base, http.MethodPost, "/v1/transactions/"+id+"/"+action, decisionBody(action, states[id]))
		require.Equal(t, http.StatusOK, r.Status, "%s after the restart: %s", action, r.Raw)
	}
	assert.Equal(t, 1, countRows(t, e.db, "xr-0"))
	assert.Equal(t, 1, e.committedWithKey("xr-0"))
	assert.Zero(t, countRows(t, e.db, "xr-1"))
	assert.Zero(t, e.committedWithKey("xr-1"))
	assert.Empty(t, e.preparedLeft())
}
