package txlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// A transaction's history, path by path: the steps of the normal path (active, prepared,
// committed) are read from the row's stamps and not stored; every other step is stored, with its
// detail, and appears once, in order. Rows written before migration 000006 keep their stored
// history whole, without a derived copy.
func TestEventsDerivedFromStamps(t *testing.T) {
	t.Parallel()
	l, pool := newLog(t)
	ctx := context.Background()
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	ids := txntype.KafkaIDs{TransactionalID: "tx-ev", ProducerID: 9, ProducerEpoch: 2}
	withKafka := func(tr *txntype.Transaction) *txntype.Transaction {
		tr.Kafka = &txntype.KafkaState{KafkaIDs: ids, PreparedState: ids.PreparedState()}
		return tr
	}
	begin := func(t *testing.T, id string) *txntype.Transaction {
		t.Helper()
		live, created, err := l.Begin(ctx, row(id, epoch))
		require.NoError(t, err)
		require.True(t, created)
		return withKafka(live)
	}
	abort := func(t *testing.T, tr *txntype.Transaction, class txntype.Class) {
		t.Helper()
		tr.Error = &txntype.ErrorDetail{Participant: "kafka", Class: class, Message: "the broker aborted it"}
		require.NoError(t, l.Transition(ctx, tr, txntype.StateAborted))
	}

	cases := []struct {
		name   string
		run    func(t *testing.T, id string)
		want   []txntype.State
		stored int // rows in coordinator_events
		detail []bool
	}{
		{"two phases, one by one", func(t *testing.T, id string) {
			tr := begin(t, id)
			require.NoError(t, l.Prepared(ctx, tr))
			require.NoError(t, l.Committed(ctx, tr, tr.UpdatedAt.Add(time.Millisecond).Truncate(time.Microsecond)))
		}, []txntype.State{txntype.StateActive, txntype.StatePrepared, txntype.StateCommitted}, 0, nil},
		{"two phases, batched", func(t *testing.T, id string) {
			tr := begin(t, id)
			require.NoError(t, l.PreparedBatch(ctx, []*txntype.Transaction{tr}, nil))
			done, err := l.CommittedBatch(ctx, []*txntype.Transaction{tr}, time.Time{})
			require.NoError(t, err)
			require.Equal(t, []bool{true}, done)
		}, []txntype.State{txntype.StateActive, txntype.StatePrepared, txntype.StateCommitted}, 0, nil},
		{"one phase", func(t *testing.T, id string) {
			tr := begin(t, id)
			require.NoError(t, l.Committed(ctx, tr, time.Time{}))
		}, []txntype.State{txntype.StateActive, txntype.StateCommitted}, 0, nil},
		{"two databases: committing is stored", func(t *testing.T, id string) {
			tr := begin(t, id)
			require.NoError(t, l.Transition(ctx, tr, txntype.StateCommitting))
			require.NoError(t, l.Committed(ctx, tr, time.Time{}))
		}, []txntype.State{txntype.StateActive, txntype.StateCommitting, txntype.StateCommitted}, 1, nil},
		{"aborted after prepared: the abort and its cause are stored", func(t *testing.T, id string) {
			tr := begin(t, id)
			require.NoError(t, l.Prepared(ctx, tr))
			abort(t, tr, txntype.ClassAbortable)
		}, []txntype.State{txntype.StateActive, txntype.StatePrepared, txntype.StateAborted}, 1, []bool{false, false, true}},
		{"claimed by a resolver", func(t *testing.T, id string) {
			tr := begin(t, id)
			by, err := txlog.BumpEpoch(ctx, pool, "r")
			require.NoError(t, err)
			require.NoError(t, l.Claim(ctx, tr, txntype.Fence{Instance: "r", Epoch: by}, txntype.StateAborting))
		}, []txntype.State{txntype.StateActive, txntype.StateAborting}, 1, []bool{false, true}},
		{"reset for a retry keeps the first attempt's steps", func(t *testing.T, id string) {
			tr := begin(t, id)
			require.NoError(t, l.Prepared(ctx, tr))
			abort(t, tr, txntype.ClassRetriable)
			again, created, err := l.Begin(ctx, row(id, epoch))
			require.NoError(t, err)
			require.True(t, created, "a retriable abort with the same digest runs again")
			assert.Nil(t, again.PreparedAt, "the new attempt is not prepared yet")
			again = withKafka(again)
			require.NoError(t, l.Prepared(ctx, again))
			require.NoError(t, l.Committed(ctx, again, time.Time{}))
		}, []txntype.State{txntype.StateActive, txntype.StatePrepared, txntype.StateAborted, txntype.StateActive,
			txntype.StatePrepared, txntype.StateCommitted}, 3, nil},
		{"an operator's decision is stored once, with its detail", func(t *testing.T, id string) {
			tr := begin(t, id)
			require.NoError(t, l.Prepared(ctx, tr))
			tr.Error = &txntype.ErrorDetail{Participant: "sql:default", Class: txntype.ClassAbortable, Message: "rolled back by hand"}
			require.NoError(t, l.Transition(ctx, tr, txntype.StateHeuristicMixed))
			require.NoError(t, l.Decide(ctx, tr, txntype.StateCommitted, txlog.AdminAction{Action: "resolve", By: "op", Reason: "checked"}))
		}, []txntype.State{txntype.StateActive, txntype.StatePrepared, txntype.StateHeuristicMixed, txntype.StateCommitted}, 2,
			[]bool{false, false, true, true}},
		{"a row from before derived events keeps its stored history", func(t *testing.T, id string) {
			tr := begin(t, id)
			_, err := pool.Exec(ctx, `UPDATE coordinator_transactions SET derived_events = false WHERE gid = $1`, tr.GID)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `INSERT INTO coordinator_events (gid, state, created_at)
SELECT gid, 'active', created_at FROM coordinator_transactions WHERE gid = $1`, tr.GID)
			require.NoError(t, err)
			require.NoError(t, l.Prepared(ctx, tr))
			require.NoError(t, l.Committed(ctx, tr, time.Time{}))
		}, []txntype.State{txntype.StateActive, txntype.StatePrepared, txntype.StateCommitted}, 3, nil},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := "ev" + string(rune('a'+i))
			c.run(t, id)
			got, err := l.Get(ctx, id)
			require.NoError(t, err)
			events, err := l.Events(ctx, got.GID)
			require.NoError(t, err)
			states := make([]txntype.State, len(events))
			for j, e := range events {
				states[j] = e.State
				if j > 0 {
					assert.False(t, e.CreatedAt.Before(events[j-1].CreatedAt), "oldest first: %v", events)
				}
				if c.detail != nil {
					assert.Equal(t, c.detail[j], e.Detail != nil, "event %d (%s): detail", j, e.State)
				}
			}
			assert.Equal(t, c.want, states)
			assert.Equal(t, got.CreatedAt, events[0].CreatedAt, "the history starts at the row's creation")
			last := events[len(events)-1]
			if last.State == txntype.StateCommitted {
				require.NotNil(t, got.FinishedAt)
				assert.Equal(t, *got.FinishedAt, last.CreatedAt, "committed at the row's finished_at")
			}
			var stored int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM coordinator_events WHERE gid = $1`, got.GID).Scan(&stored))
			assert.Equal(t, c.stored, stored, "events stored")
		})
	}
}
