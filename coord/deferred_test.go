package coord_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txntype"
)

// deferring runs a batch whose members after the leader join with no row (S8), with faults
// (nil: none).
func deferring(faults func(*world) func(int, string) mode) func(*world) func(int, string) mode {
	return func(w *world) func(int, string) mode {
		w.deferRows = true
		if faults == nil {
			return nil
		}
		return faults(w)
	}
}

// S8: the members that joined while the slot was taken log no row before the prepared write,
// which inserts theirs next to the leader's update: one Begin for the batch.
func TestDeferredRowsOneBegin(t *testing.T) {
	t.Parallel()
	r := runBatchWith(t, true, deferring(nil))
	for id, st := range r.check(t) {
		assert.Equal(t, txntype.StateCommitted, st, id)
		assert.NoError(t, r.answers[id], id)
	}
	assert.Equal(t, 1, count(r.w.ops, "log.begin"), "only the leader logged its row first")
	assert.Equal(t, 1, count(r.w.ops, "log.prepared_batch"))
	assert.Equal(t, 1, count(r.w.ops, "sql.run_shared"))
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	assert.Equal(t, map[string]bool{"r1": true, "r2": true}, r.w.deferred)
	require.Len(t, r.w.shared, 1)
	for _, ms := range r.w.shared {
		assert.ElementsMatch(t, []string{"p_r0", "p_r1", "p_r2"}, ms)
	}
}

// S8 at every step: a fault before or after each step's effect, with a member failing or not;
// every request is atomic, its work committed at most once, its answer true, no participant
// got a deferred member's own work before its row, and no write carried deferred rows alone.
func TestDeferredRowsFaultAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"log.begin", "log.existing", "sql.run_shared", "sql.run", "kafka.acquire", "kafka.begin",
		"kafka.add", "kafka.flush", "log.prepared_batch", "log.prepared", "kafka.commit", "kafka.endtxn",
		"sql.commit_prepared_many", "log.committed_batch", "sql.commit_prepared", "log.committed",
		"sql.rollback_prepared", "kafka.abort", "log.aborted"} {
		for _, m := range []mode{failBefore, failAfter} {
			for k := range 2 {
				t.Run(fmt.Sprintf("%s/%d/mode %d", op, k, m), func(t *testing.T) {
					t.Parallel()
					runBatchWith(t, true, deferring(nth(op, k, m))).check(t)
				})
			}
			for _, failing := range []string{"r0", "r2"} {
				t.Run(fmt.Sprintf("%s/mode %d/%s fails", op, m, failing), func(t *testing.T) {
					t.Parallel()
					runBatchWith(t, true, deferring(nth(op, 0, m)), failing).check(t)
				})
			}
		}
	}
}

// S8: the leader's statement fails and it is left out: no member left has a row older than the
// shared transaction, so no prepared write is sent; the shared transaction is rolled back, and
// the deferred members log their rows and run alone.
func TestDeferredRowsNoAnchor(t *testing.T) {
	t.Parallel()
	r := runBatchWith(t, true, deferring(nil), "r0")
	states := r.check(t)
	assert.Equal(t, txntype.StateAborted, states["r0"])
	for _, id := range []string{"r1", "r2"} {
		assert.Equal(t, txntype.StateCommitted, states[id], id)
		assert.NoError(t, r.answers[id], id)
	}
	assert.Zero(t, count(r.w.ops, "log.prepared_batch"), "no prepared write without an anchor")
	assert.Equal(t, 3, count(r.w.ops, "sql.run"), "each member ran alone")
}

// S8: a deferred member alone on its database in its batch would prepare its own gid, which no
// row names yet: it runs alone instead, its row first, and commits; the others share.
func TestDeferredRowsAloneOnItsDatabase(t *testing.T) {
	t.Parallel()
	other := func(w *world) func(int, string) mode {
		w.otherDB = map[string]bool{"r2": true}
		return nil
	}
	r := runBatchWith(t, true, deferring(other))
	for id, st := range r.check(t) {
		assert.Equal(t, txntype.StateCommitted, st, id)
		assert.NoError(t, r.answers[id], id)
	}
	assert.Equal(t, 1, count(r.w.ops, "sql.run"), "r2 ran alone")
	assert.Equal(t, 2, count(r.w.ops, "log.begin"), "the leader's Begin and r2's late one")
}

// S8: a resolver claims the anchor right before the prepared write: the write is refused as a
// whole, nothing commits, and each deferred member logs its row and is aborted.
func TestDeferredRowsPreparedWriteRefused(t *testing.T) {
	t.Parallel()
	r := runBatchWith(t, true, deferring(claimBeforePreparedWrite(t, "p_r0")))
	states := r.check(t)
	for id, st := range states {
		assert.Equal(t, txntype.StateAborted, st, id)
	}
	for _, id := range []string{"r1", "r2"} {
		require.Contains(t, states, id, "%s: its row was logged", id)
		assert.Error(t, r.answers[id], id)
		assert.NotErrorIs(t, r.answers[id], txntype.ErrInDoubt, id)
	}
	assert.Zero(t, count(r.w.ops, "kafka.commit"), "no EndTxn(commit) after a refused prepared write")
}
