package coord_test

import (
	"context"
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

// chainCoordinator is a coordinator on w whose requests may chain (O4).
func chainCoordinator(w *world) *coord.Coordinator {
	return coord.New(coord.Config{Instance: "a", GIDPrefix: "p", DefaultTimeout: time.Second,
		FinishTimeout: time.Second, Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}},
		Logger: slog.New(slog.DiscardHandler)}, fakeLog{w}, fakeKafka{w}, fakeSQL{w})
}

// chainedBatch is batch number i of one member, naming after as its predecessor ("" for none).
func chainedBatch(i int, after string) txntype.Request {
	id := "b" + string(rune('0'+i))
	req := batchRequest(id)
	req.KafkaOffsets = offsetsOf("g", ptr(int32(1)), "m-1", txntype.PartitionOffset{Topic: "in", Partition: 0, Offset: int64(10 * (i + 1))})
	req.KafkaOffsets.After = after
	return req
}

// TestChainCommitsInOrder (O4b): a chained request commits only if its predecessor committed.
// The predecessor fails at a step the successor can reach only after it under the rule (its
// offsets, its prepared write, its EndTxn), with the successor sent right behind it; the
// successor never commits past a predecessor that did not commit, and says why.
func TestChainCommitsInOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		op     string // the predecessor's first call of op fails (of two ops: every call); "": nothing fails
		m      mode
		before txntype.State // the predecessor's final state
	}{
		{"predecessor commits", "", pass, txntype.StateCommitted},
		{"predecessor's offsets refused", "kafka.offsets", failBefore, txntype.StateAborted},
		{"predecessor's prepared write refused", "log.prepared", refused, txntype.StateAborted},
		{"predecessor's prepared write lost", "log.prepared", failAfter, txntype.StatePrepared},
		{"predecessor's EndTxn unanswered", "kafka.commit kafka.endtxn", failBefore, txntype.StatePrepared},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			w.pauseAt = -1
			fault := func(int, string) mode { return pass }
			switch ops := strings.Fields(tc.op); len(ops) {
			case 1:
				fault = nth(tc.op, 0, tc.m)(w)
			case 2: // every call of either fails: Kafka never answers the commit
				fault = func(_ int, op string) mode {
					if op == ops[0] || op == ops[1] {
						return tc.m
					}
					return pass
				}
			}
			// The successor is sent once the predecessor is on its way (its Begin called).
			begun := make(chan struct{})
			var once sync.Once
			w.at = func(n int, op string) mode {
				if op == "log.begin" {
					once.Do(func() { close(begun) })
				}
				return fault(n, op)
			}
			c := chainCoordinator(w)
			var wg sync.WaitGroup
			var errP, errR error
			wg.Go(func() { _, errP = c.Execute(context.Background(), chainedBatch(0, "")) })
			<-begun
			wg.Go(func() { _, errR = c.Execute(context.Background(), chainedBatch(1, "b0")) })
			wg.Wait()
			require.NoError(t, c.WaitFinals(context.Background()))

			rows, _, _, kafka := w.snapshot()
			assert.Equal(t, tc.before, rows["p_b0"].State, "predecessor: %v", errP)
			r := rows["p_b1"]
			if tc.before == txntype.StateCommitted {
				require.NoError(t, errR)
				assert.Equal(t, txntype.StateCommitted, r.State)
				return
			}
			require.ErrorIs(t, errR, txntype.ErrAborted)
			require.ErrorIs(t, errR, txntype.ErrPredecessorUncommitted)
			assert.Equal(t, txntype.StateAborted, r.State)
			require.NotNil(t, r.Error)
			assert.Equal(t, txntype.ClassAbortable, r.Error.Class)
			assert.Contains(t, r.Error.Message, `"b0"`)
			for pid, oc := range w.kafkaOffsets {
				if oc.After == "b0" {
					assert.NotEqual(t, "committed", kafka[pid], "the successor's offsets ride in no committed transaction")
				}
			}
		})
	}
}

// TestChainStepsFollowThePredecessors (O4a, O4c): while the predecessor's TxnOffsetCommit has
// not been appended, the successor sends none, although its statements run; while the
// predecessor's statements are not prepared, the successor runs none of its own.
func TestChainStepsFollowThePredecessors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		held string // the predecessor is held at its first call of held
		runs func(w *world) bool
	}{
		{"kafka.offsets", func(w *world) bool { return w.sqlState["p_b1@default"] == "prepared" }},
		{"sql.run", func(w *world) bool { // both Kafka transactions begun
			open := 0
			for _, st := range w.kafkaTxns {
				if st == "open" {
					open++
				}
			}
			return open == 2
		}},
	}
	for _, tc := range cases {
		t.Run(tc.held, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			w.pauseAt = -1
			hold := make(chan struct{})
			var mu sync.Mutex
			calls := 0
			w.at = func(_ int, op string) mode {
				if op != tc.held {
					return pass
				}
				mu.Lock()
				calls++
				first := calls == 1
				mu.Unlock()
				if first {
					<-hold
				}
				return pass
			}
			c := chainCoordinator(w)
			var wg sync.WaitGroup
			var errP, errR error
			wg.Go(func() { _, errP = c.Execute(context.Background(), chainedBatch(0, "")) })
			require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return calls == 1 }, time.Second, time.Millisecond)
			wg.Go(func() { _, errR = c.Execute(context.Background(), chainedBatch(1, "b0")) })
			// The successor's other side runs meanwhile.
			require.Eventually(t, func() bool {
				w.mu.Lock()
				defer w.mu.Unlock()
				return tc.runs(w)
			}, time.Second, time.Millisecond)
			time.Sleep(20 * time.Millisecond) // a successor that did not wait would have called by now
			mu.Lock()
			assert.Equal(t, 1, calls, "the successor called %s before its predecessor's returned", tc.held)
			mu.Unlock()
			close(hold)
			wg.Wait()
			require.NoError(t, errP)
			require.NoError(t, errR)
			require.NoError(t, c.WaitFinals(context.Background()))
			rows, _, _, _ := w.snapshot()
			assert.Equal(t, txntype.StateCommitted, rows["p_b0"].State)
			assert.Equal(t, txntype.StateCommitted, rows["p_b1"].State)
		})
	}
}

// TestChainPredecessorFromTheLog: a predecessor not in flight here is judged by its row: only
// a decision to commit (committing, committed) lets the successor commit; a prepared row (its
// Kafka transaction may still time out), an abort, an active row another instance runs and a
// request never logged abort it.
func TestChainPredecessorFromTheLog(t *testing.T) {
	t.Parallel()
	cases := []struct {
		stored txntype.State // "": no row
		commit bool
	}{
		{txntype.StateCommitted, true},
		{txntype.StateCommitting, true},
		{txntype.StatePrepared, false},
		{txntype.StateAborted, false},
		{txntype.StateActive, false},
		{"", false},
	}
	for _, tc := range cases {
		name := string(tc.stored)
		if name == "" {
			name = "not logged"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			w.pauseAt = -1
			if tc.stored != "" {
				w.rows["p_b0"] = &txntype.Transaction{ID: "b0", GID: "p_b0", State: tc.stored, Owner: "r", OwnerEpoch: 1}
			}
			c := chainCoordinator(w)
			_, err := c.Execute(context.Background(), chainedBatch(1, "b0"))
			require.NoError(t, c.WaitFinals(context.Background()))
			rows, _, _, _ := w.snapshot()
			if tc.commit {
				require.NoError(t, err)
				assert.Equal(t, txntype.StateCommitted, rows["p_b1"].State)
				return
			}
			require.ErrorIs(t, err, txntype.ErrPredecessorUncommitted)
			assert.Equal(t, txntype.StateAborted, rows["p_b1"].State)
			want := "it is " + string(tc.stored)
			if tc.stored == "" {
				want = "it is not logged"
			}
			assert.True(t, strings.Contains(err.Error(), want), "%v", err)
		})
	}
}

// TestChainAfterValidated: after must be a request id, and not the request's own.
func TestChainAfterValidated(t *testing.T) {
	t.Parallel()
	for name, after := range map[string]string{"itself": "b1", "not an id": "b 0", "too long": strings.Repeat("x", 129)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := chainedBatch(1, after)
			requireInvalid(t, r.Validate(txntype.Limits{}, func(string) bool { return true }), "kafka_offsets.after")
		})
	}
}
