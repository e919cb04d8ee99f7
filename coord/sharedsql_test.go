package coord_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// Shared SQL transactions against the fake world (sharedsql.go): the batch's members run their
// statements in one PostgreSQL transaction, one marker, one PREPARE and one COMMIT PREPARED.
// batchRun.check asserts, besides atomicity and the answers, that every request's SQL work
// committed exactly once when its row says committed (in the shared transaction or in its own
// re-run, never both) and never otherwise.

func TestSharedSQLOneTransaction(t *testing.T) {
	t.Parallel()
	r := runBatchWith(t, true, nil)
	states := r.check(t)
	for id, st := range states {
		assert.Equal(t, txntype.StateCommitted, st, id)
		assert.NoError(t, r.answers[id], id)
	}
	assert.Equal(t, 1, count(r.w.ops, "sql.run_shared"), "one SQL round trip for the batch")
	assert.Zero(t, count(r.w.ops, "sql.run"), "no member ran its SQL alone")
	assert.Equal(t, 1, count(r.w.ops, "sql.commit_prepared_many"), "one COMMIT PREPARED for the batch")
	assert.Equal(t, 1, count(r.w.ops, "kafka.commit"), "one EndTxn for the batch")
	rows, _, _, _ := r.w.snapshot()
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	assert.Equal(t, len(rows), r.w.joinedBegins, "they joined while the slot was taken: every Begin may wait for company")
	require.Len(t, r.w.shared, 1, "S2: the prepared write registered the shared gid")
	for g, ms := range r.w.shared {
		assert.True(t, txntype.IsSharedGID("p", g), g)
		assert.ElementsMatch(t, []string{"p_r0", "p_r1", "p_r2"}, ms)
		for _, row := range rows {
			assert.Equal(t, []txntype.SQLGID{{Database: txntype.DefaultDatabase, GID: g}}, row.SQLGIDs,
				"%s: the log names the shared gid as where its work is", row.GID)
		}
	}
}

// S1 and S5: a member whose statement fails is rolled back to its savepoint and runs alone,
// where it fails again and is aborted; its record never rides with the others, who commit.
func TestSharedSQLMemberFails(t *testing.T) {
	t.Parallel()
	r := runBatchWith(t, true, nil, "r1")
	states := r.check(t)
	assert.Equal(t, txntype.StateAborted, states["r1"])
	assert.ErrorIs(t, r.answers["r1"], txntype.ErrAborted)
	for _, id := range []string{"r0", "r2"} {
		assert.Equal(t, txntype.StateCommitted, states[id], id)
		assert.NoError(t, r.answers[id], id)
	}
	assert.Equal(t, 1, count(r.w.ops, "sql.run"), "the failed member ran once more, alone")
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	for pid, vs := range r.w.kafkaRecs {
		if r.w.kafkaTxns[pid] == "committed" {
			assert.NotContains(t, vs, "r1", "the failed request's record committed in transaction %d", pid)
		}
	}
}

// A fault at each step of a batch that shares its SQL transaction, before or after the
// step's effect: every request is atomic, its SQL work committed at most once, its answer true.
func TestSharedSQLFaultAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"log.begin", "sql.run_shared", "sql.run", "kafka.acquire", "kafka.begin", "kafka.add", "kafka.flush",
		"log.prepared_batch", "kafka.commit", "kafka.endtxn", "sql.commit_prepared_many", "log.committed_batch",
		"sql.commit_prepared", "log.committed", "sql.rollback_prepared", "kafka.abort", "log.aborted"} {
		for _, m := range []mode{failBefore, failAfter} {
			for k := range 2 {
				t.Run(fmt.Sprintf("%s/%d/mode %d", op, k, m), func(t *testing.T) {
					t.Parallel()
					runBatchWith(t, true, nth(op, k, m)).check(t)
				})
			}
			t.Run(fmt.Sprintf("%s/mode %d/a member fails", op, m), func(t *testing.T) {
				t.Parallel()
				runBatchWith(t, true, nth(op, 0, m), "r2").check(t)
			})
		}
	}
}

// S3: the sweep's tombstone for a shared gid lands before the batch's prepared write: the write
// is refused as a whole, nothing commits, and the shared transaction is rolled back.
func TestSharedSQLTombstoneRefusesPreparedWrite(t *testing.T) {
	t.Parallel()
	var once sync.Once
	tomb := func(w *world) func(int, string) mode {
		return func(_ int, op string) mode {
			if op == "log.prepared_batch" {
				once.Do(func() {
					w.mu.Lock()
					defer w.mu.Unlock()
					for g := range w.sqlState {
						if txntype.IsSharedGID("p", g) {
							w.shared[g] = nil
						}
					}
				})
			}
			return pass
		}
	}
	r := runBatchWith(t, true, tomb)
	states := r.check(t)
	for id, st := range states {
		assert.Equal(t, txntype.StateAborted, st, "%s: nothing commits after a tombstone", id)
		assert.Error(t, r.answers[id], id)
	}
	assert.Zero(t, count(r.w.ops, "kafka.commit"), "no EndTxn(commit) after a refused prepared write")
	_, sqlState, _, _ := r.w.snapshot()
	for g, st := range sqlState {
		if strings.Contains(g, "_+") {
			assert.Equal(t, "rolledback", st, "the leader rolled the shared transaction back")
		}
	}
}

// A resolver claims one member right before the prepared write: refused as a whole, the
// shared transaction is rolled back, and every member answers from its row.
func TestSharedSQLPreparedWriteRefused(t *testing.T) {
	t.Parallel()
	claim := claimBeforePreparedWrite(t, "p_r1")
	r := runBatchWith(t, true, claim)
	states := r.check(t)
	assert.Equal(t, txntype.StateAborted, states["r1"])
	assert.ErrorIs(t, r.answers["r1"], txntype.ErrAborted, "the claimed member answers from its row")
	assert.Zero(t, count(r.w.ops, "kafka.commit"), "no EndTxn(commit) after a refused prepared write")
}

func TestSharedGIDInstance(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ gid, want string }{
		{"p_+node-1.a+0011223344556677@default", "node-1.a"},
		{"p_+node+ff@db_2", "node"},
		{"p_r1@default", ""},
		{"q_+node+ff@default", ""},
		{"p_+ff@default", ""},
	} {
		assert.Equal(t, tt.want, txntype.SharedGIDInstance("p", tt.gid), tt.gid)
	}
}

// S5 and the model's S-F1: the shared PREPARE's answer is lost and the backend was not seen to
// exit, so the PREPARE may land after the leader's ROLLBACK PREPARED found nothing. The members
// are not run again (their work would have two copies); they are aborted, and the transaction,
// when it lands, is named by no row and is rolled back by the sweep.
func TestSharedSQLPrepareMayLand(t *testing.T) {
	t.Parallel()
	landed := func(w *world) func(int, string) mode {
		w.mayLand = true
		var once sync.Once
		return func(_ int, op string) mode {
			if op == "log.aborted" {
				once.Do(w.lands)
			}
			return pass
		}
	}
	r := runBatchWith(t, true, landed)
	states := r.check(t)
	for id, st := range states {
		assert.Equal(t, txntype.StateAborted, st, id)
		assert.ErrorIs(t, r.answers[id], txntype.ErrAborted, id)
		assert.NotErrorIs(t, r.answers[id], txntype.ErrUnavailable, "%s: not \"safe to retry\" while its work may still be prepared", id)
	}
	assert.Zero(t, count(r.w.ops, "sql.run"), "no member ran again alone")
}

// S7: members join their batch while their rows are logged. The leader waits for a slow Begin
// before the batch's SQL and Kafka steps, so that no participant gets work before its row
// exists (batchRun.check), and the slow member still rides.
func TestSharedSQLJoinsWhileLogged(t *testing.T) {
	t.Parallel()
	var once sync.Once
	slow := func(*world) func(int, string) mode {
		return func(_ int, op string) mode {
			if op == "log.begin" {
				once.Do(func() { time.Sleep(100 * time.Millisecond) })
			}
			return pass
		}
	}
	r := runBatchWith(t, true, slow)
	for id, st := range r.check(t) {
		assert.Equal(t, txntype.StateCommitted, st, id)
	}
	assert.Equal(t, 1, count(r.w.ops, "sql.run_shared"), "the slow member rode in the batch")
	assert.Equal(t, 1, count(r.w.ops, "kafka.commit"))
}

// A member whose id has a row already (a request sent again) joined the batch before it knew:
// it is left out untouched and answers from the stored row, while its batch mates commit
// together. S7: its Begin finds the row. S8: it joined with no row, and the leader's read of
// the deferred ids finds it before anything of it runs.
func TestSharedSQLJoinedDuplicateLeftOut(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		faults func(*world) func(int, string) mode
	}{
		{"S7", storedAborted(t, "r1")},
		{"S8", deferring(storedAborted(t, "r1"))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runBatchWith(t, true, tt.faults)
			states := r.check(t)
			assert.Equal(t, txntype.StateAborted, states["r1"])
			assert.ErrorIs(t, r.answers["r1"], txntype.ErrAborted, "r1 answers from its stored row")
			r.w.mu.Lock()
			assert.Empty(t, r.w.sqlWork["p_r1@"+txntype.DefaultDatabase], "nothing of the duplicate ran")
			r.w.mu.Unlock()
			for _, id := range []string{"r0", "r2"} {
				assert.Equal(t, txntype.StateCommitted, states[id], id)
				assert.NoError(t, r.answers[id], id)
			}
			assert.Equal(t, 1, count(r.w.ops, "sql.run_shared"))
		})
	}
}

// storedAborted stores, before the batch runs, an aborted row of an earlier attempt of id with
// the same body: the request is sent again.
func storedAborted(t *testing.T, id string) func(*world) func(int, string) mode {
	t.Helper()
	return func(w *world) func(int, string) mode {
		req := batchRequest(id)
		require.NoError(t, req.Validate(txntype.Limits{}, func(string) bool { return true })) // as Execute sees it
		w.mu.Lock()
		w.rows["p_"+id] = &txntype.Transaction{ID: id, GID: "p_" + id, State: txntype.StateAborted, Owner: "a", OwnerEpoch: 1,
			Digest: req.Digest(), Error: &txntype.ErrorDetail{Class: txntype.ClassAbortable, Message: "an earlier attempt"}}
		w.mu.Unlock()
		return nil
	}
}

// A request that joins a batch while a slot is free runs at once: its Begin is on its path and
// is not marked for the log to hold (coord.JoinedBegin). The same request joining while the slot
// is taken is marked, until its batch is sealed.
func TestJoinedBeginMarkedOnlyWhenTheSlotIsTaken(t *testing.T) {
	t.Parallel()
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprintf("slot taken %v", held), func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			w.pauseAt = -1
			c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", DefaultTimeout: 500 * time.Millisecond,
				FinishTimeout: time.Second, Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}},
				Logger: slog.New(slog.DiscardHandler), Batch: coord.BatchConfig{MaxMembers: 8, Concurrency: 1, ShareSQL: true}},
				fakeLog{w}, fakeKafka{w}, fakeSQL{w})
			c.ShareAlways()
			want := 0
			if held {
				release := c.HoldBatchSlots()
				go func() {
					assert.Eventually(t, func() bool { return c.OpenBatchMembers() == 1 }, 5*time.Second, time.Millisecond)
					release()
				}()
				want = 1
			}
			_, err := c.Execute(context.Background(), batchRequest("r0"))
			require.NoError(t, err)
			require.NoError(t, c.WaitFinals(context.Background()))
			w.mu.Lock()
			defer w.mu.Unlock()
			assert.Equal(t, want, w.joinedBegins)
			// Its batch was sealed once it had the slot: the log holds the Begin no longer.
			for _, sealed := range w.joinedSealed {
				select {
				case <-sealed:
				default:
					t.Error("a joined Begin's batch ran, but its sealed channel is open")
				}
			}
		})
	}
}
