package coord_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// externalCoordinator is a coordinator over w whose transactions may wait bound for their
// callers, max of them at once, waiting counting those already waiting.
func externalCoordinator(w *world, bound time.Duration, max, waiting int) *coord.Coordinator {
	return coord.New(coord.Config{Instance: "a", GIDPrefix: "p", DefaultTimeout: time.Second,
		FinishTimeout: time.Second, Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}},
		External: coord.External{Bound: bound, Max: max, Count: func(context.Context) (int, error) { return waiting, nil }},
		Logger:   slog.New(slog.DiscardHandler)}, fakeLog{w}, fakeKafka{w}, fakeSQL{w})
}

func externalRequest(id string) txntype.Request {
	req := batchRequest(id)
	req.External = true
	return req
}

// TestExternalDecisions (X1-X4): a transaction its caller decides waits prepared on both sides
// after its request, and each decision ends it the same way on both sides.
func TestExternalDecisions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		d     func(state string) txntype.Decision
		sleep time.Duration // before the decision
		want  txntype.State
		why   string
	}{
		{"commit", func(s string) txntype.Decision { return txntype.Decision{Commit: true, PreparedState: s} }, 0, txntype.StateCommitted, ""},
		{"stale prepared_state", func(s string) txntype.Decision { return txntype.Decision{Commit: true, PreparedState: s + "0"} }, 0, txntype.StateAborted, "does not match"},
		{"rollback", func(string) txntype.Decision { return txntype.Decision{Reason: "rolled back by its caller"} }, 0, txntype.StateAborted, "rolled back"},
		{"commit past decide_by", func(s string) txntype.Decision { return txntype.Decision{Commit: true, PreparedState: s} }, 80 * time.Millisecond, txntype.StateAborted, "decide_by"},
		{"deadline", func(string) txntype.Decision { return txntype.Decision{Deadline: true} }, 80 * time.Millisecond, txntype.StateAborted, "decide_by"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			c := externalCoordinator(w, 50*time.Millisecond, 4, 0)
			req := externalRequest("x1")
			req.DecideWithin = 50 * time.Millisecond
			tx, err := c.Execute(context.Background(), req)
			require.NoError(t, err)
			require.Equal(t, txntype.StateWaiting, tx.State, "X1: the answer is the waiting row")
			require.NotNil(t, tx.DecideBy)
			rows, sqlState, _, kafka := w.snapshot()
			require.Equal(t, txntype.StateWaiting, rows[tx.GID].State)
			for _, g := range tx.SQLGIDs {
				assert.Equal(t, "prepared", sqlState[g.GID], "its database holds it prepared")
			}
			assert.Equal(t, "open", kafka[tx.Kafka.ProducerID], "its Kafka transaction stays open")

			time.Sleep(tc.sleep)
			d := tc.d(tx.CallerPreparedState())
			d.By = txntype.Fence{Instance: "a", Epoch: 1}
			rules := coord.Rules{Log: fakeLog{w}, SQL: fakeSQL{w}, Kafka: fakeKafka{w}}
			got, err := rules.DecideWaiting(context.Background(), tx.GID, d)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.State)
			rows, sqlState, _, kafka = w.snapshot()
			assert.Equal(t, tc.want, rows[tx.GID].State)
			sqlSide := map[txntype.State]string{txntype.StateCommitted: "committed", txntype.StateAborted: "rolledback"}[tc.want]
			for _, g := range tx.SQLGIDs {
				assert.Equal(t, sqlSide, sqlState[g.GID], "SQL follows the decision")
			}
			kafkaSide := map[txntype.State]string{txntype.StateCommitted: "committed", txntype.StateAborted: "aborted"}[tc.want]
			assert.Equal(t, kafkaSide, kafka[tx.Kafka.ProducerID], "Kafka follows the decision, by its logged ids")
			if tc.why != "" {
				require.NotNil(t, got.Error)
				assert.Contains(t, got.Error.Message, tc.why)
			}
			// Taken once: any other decision finds the row no longer waiting.
			_, err = rules.DecideWaiting(context.Background(), tx.GID, d)
			assert.ErrorIs(t, err, txntype.ErrMovedOn)
		})
	}
}

// TestExternalDeadlineNotReached: the deadline's claim (X4) is taken only once decide_by is
// reached by the log's clock.
func TestExternalDeadlineNotReached(t *testing.T) {
	t.Parallel()
	w := newWorld()
	c := externalCoordinator(w, time.Minute, 4, 0)
	tx, err := c.Execute(context.Background(), externalRequest("x2"))
	require.NoError(t, err)
	rules := coord.Rules{Log: fakeLog{w}, SQL: fakeSQL{w}, Kafka: fakeKafka{w}}
	_, err = rules.DecideWaiting(context.Background(), tx.GID, txntype.Decision{Deadline: true, By: txntype.Fence{Instance: "a", Epoch: 1}})
	assert.ErrorIs(t, err, txntype.ErrMovedOn)
	rows, _, _, _ := w.snapshot()
	assert.Equal(t, txntype.StateWaiting, rows[tx.GID].State)
}

// TestExternalWaitingWrite: the waiting write (X1) failing is a failed prepared write: refused,
// the request aborts on both sides; lost, it is in doubt and the row may wait.
func TestExternalWaitingWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		m        mode
		sentinel error
		row      txntype.State
	}{
		{"refused", refused, txntype.ErrUnavailable, txntype.StateAborted},
		{"lost", failAfter, txntype.ErrInDoubt, txntype.StateWaiting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			w.at = nth("log.waiting", 0, tc.m)(w)
			c := externalCoordinator(w, time.Minute, 4, 0)
			_, err := c.Execute(context.Background(), externalRequest("x3"))
			require.ErrorIs(t, err, tc.sentinel)
			rows, sqlState, _, kafka := w.snapshot()
			var row *txntype.Transaction
			for _, r := range rows {
				row = r
			}
			require.NotNil(t, row)
			assert.Equal(t, tc.row, row.State)
			if tc.row == txntype.StateAborted {
				for _, g := range row.SQLGIDs {
					assert.NotEqual(t, "prepared", sqlState[g.GID], "nothing left prepared")
				}
				for pid, st := range kafka {
					assert.NotEqual(t, "open", st, "producer %d left open", pid)
				}
			}
		})
	}
}

// TestExternalBound: a request over the waiting bound is refused before anything runs, and
// the bound and the window are checked before that.
func TestExternalBound(t *testing.T) {
	t.Parallel()
	w := newWorld()
	c := externalCoordinator(w, time.Minute, 2, 2)
	_, err := c.Execute(context.Background(), externalRequest("x4"))
	require.ErrorIs(t, err, txntype.ErrUnavailable)
	assert.True(t, errors.Is(err, txntype.ErrWaitingFull), "%v", err)
	assert.Empty(t, w.ops, "nothing ran")

	req := externalRequest("x5")
	req.DecideWithin = time.Minute + time.Millisecond
	_, err = c.Execute(context.Background(), req)
	requireInvalid(t, err, "decide_within_ms")
	// An ordinary request is not counted.
	_, err = c.Execute(context.Background(), batchRequest("x6"))
	require.NoError(t, err)
}
