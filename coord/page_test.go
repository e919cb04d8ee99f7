package coord_test

import (
	"fmt"
	"testing"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
)

// C1 against the fake world: a batch whose decision never reached Kafka leaves its members
// prepared (EndTxn(commit) by the batch and by each request's retry failed), and recovery takes
// them by the page.

// lostDecision: neither the batch's EndTxn nor the retries by ids reach Kafka.
func lostDecision(*world) func(int, string) mode {
	return func(_ int, op string) mode {
		if op == "kafka.commit" || op == "kafka.endtxn" {
			return failBefore
		}
		return pass
	}
}

// One claim, one EndTxn for the shared Kafka transaction, one round trip of COMMIT PREPARED and
// one final write for every member: nothing is done member by member.
func TestResolvePageDecidesOnce(t *testing.T) {
	t.Parallel()
	for _, shareSQL := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared sql %t", shareSQL), func(t *testing.T) {
			t.Parallel()
			r := runBatchOnly(t, shareSQL, txntype.AnswerCommitted, lostDecision)
			r.w.mu.Lock()
			before := len(r.w.ops)
			r.w.mu.Unlock()
			r.recover(nil)
			states := r.check(t)
			for i := range members {
				id := fmt.Sprintf("r%d", i)
				assert.ErrorIs(t, r.answers[id], txntype.ErrInDoubt, id)
				assert.Equal(t, txntype.StateCommitted, states[id], id)
			}
			r.w.mu.Lock()
			ops := r.w.ops[before:]
			r.w.mu.Unlock()
			assert.Equal(t, 1, count(ops, "log.claim"), "one claim for the page; calls %v", ops)
			assert.Equal(t, 1, count(ops, "kafka.endtxn"), "one EndTxn for the Kafka transaction; calls %v", ops)
			gids := members // the fake counts each gid of the round trip
			if shareSQL {
				gids = 1
			}
			assert.Equal(t, gids, count(ops, "sql.commit_prepared_many"), "each gid once, in one round trip; calls %v", ops)
			assert.Equal(t, 1, count(ops, "log.committed_batch"), "one final write; calls %v", ops)
			assert.Zero(t, count(ops, "sql.commit_prepared")+count(ops, "log.committed"), "nothing alone; calls %v", ops)
		})
	}
}

// Every call of the page fails in turn, before or after its effect (or is refused by the log's
// server); the passes after it run without faults. Every member ends committed on both sides,
// its SQL work committed once and its record once (check), whatever the page got through.
func TestResolvePageFaultAtEveryCall(t *testing.T) {
	t.Parallel()
	for _, shareSQL := range []bool{false, true} {
		for _, op := range []string{"log.claim", "kafka.endtxn", "sql.commit_prepared_many", "log.committed_batch",
			"sql.commit_prepared", "log.committed"} {
			for _, m := range []mode{failBefore, failAfter, refused, raceResolve} {
				for k := range 2 {
					t.Run(fmt.Sprintf("shared sql %t/%s/%d/mode %d", shareSQL, op, k, m), func(t *testing.T) {
						t.Parallel()
						r := runBatchOnly(t, shareSQL, txntype.AnswerCommitted, lostDecision)
						r.recover(nth(op, k, m))
						for id, st := range r.check(t) {
							assert.Equal(t, txntype.StateCommitted, st, "%s: prepared, and Kafka's decision is commit", id)
						}
					})
				}
			}
		}
	}
}

// Kafka aborted the batch's transaction (its timeout) before recovery: the page's EndTxn is
// answered aborted, every member goes the one-row way and ends aborted on both sides, each
// gid rolled back, with every fault of the first pass.
func TestResolvePageKafkaAborted(t *testing.T) {
	t.Parallel()
	for _, shareSQL := range []bool{false, true} {
		for _, op := range []string{"", "log.claim", "kafka.endtxn", "sql.rollback_prepared", "log.aborted"} {
			for _, m := range []mode{failBefore, failAfter} {
				t.Run(fmt.Sprintf("shared sql %t/%s/mode %d", shareSQL, op, m), func(t *testing.T) {
					t.Parallel()
					r := runBatchOnly(t, shareSQL, txntype.AnswerCommitted, lostDecision)
					r.w.mu.Lock()
					for pid, st := range r.w.kafkaTxns {
						if st == "open" {
							r.w.kafkaTxns[pid] = "aborted" // the broker's transaction timeout
						}
					}
					r.w.mu.Unlock()
					r.recover(nth(op, 0, m))
					for id, st := range r.check(t) {
						assert.Equal(t, txntype.StateAborted, st, "%s: Kafka aborted its transaction", id)
					}
				})
			}
		}
	}
}
