package txlog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// PreparedBatch against PostgreSQL: every member prepared with the batch's ids and its own
// offsets in one write, or, when any member moved on or is no longer owned, no row changed.
func TestPreparedBatch(t *testing.T) {
	t.Parallel()
	l, pool := newLog(t)
	ctx := context.Background()
	ea, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	er, err := txlog.BumpEpoch(ctx, pool, "r")
	require.NoError(t, err)
	ids := txntype.KafkaIDs{TransactionalID: "tx-1", ProducerID: 42, ProducerEpoch: 7}

	begin := func(t *testing.T, prefix string, n int, epoch int64) []*txntype.Transaction {
		t.Helper()
		ts := make([]*txntype.Transaction, n)
		for i := range ts {
			live, created, err := l.Begin(ctx, row(fmt.Sprintf("%s%d", prefix, i), epoch))
			require.NoError(t, err)
			require.True(t, created)
			live.Kafka = &txntype.KafkaState{KafkaIDs: ids, PreparedState: ids.PreparedState(),
				Records: []txntype.RecordOffset{{Topic: "t", Partition: 0, Offset: int64(100 + i)}}}
			ts[i] = live
		}
		return ts
	}
	states := func(t *testing.T, ts []*txntype.Transaction) []txntype.State {
		t.Helper()
		var out []txntype.State
		for _, tr := range ts {
			got, err := l.Get(ctx, tr.ID)
			require.NoError(t, err)
			out = append(out, got.State)
		}
		return out
	}

	t.Run("all members", func(t *testing.T) {
		ts := begin(t, "all", 3, ea)
		require.NoError(t, l.PreparedBatch(ctx, ts, nil))
		for i, tr := range ts {
			assert.Equal(t, txntype.StatePrepared, tr.State)
			require.NotNil(t, tr.PreparedAt)
			got, err := l.Get(ctx, tr.ID)
			require.NoError(t, err)
			assert.Equal(t, txntype.StatePrepared, got.State)
			require.NotNil(t, got.Kafka)
			assert.Equal(t, ids, got.Kafka.KafkaIDs, "every member carries the batch's ids")
			assert.Equal(t, []txntype.RecordOffset{{Topic: "t", Partition: 0, Offset: int64(100 + i)}}, got.Kafka.Records,
				"each member keeps its own offsets")
			events, err := l.Events(ctx, tr.GID)
			require.NoError(t, err)
			assert.Equal(t, txntype.StatePrepared, events[len(events)-1].State)
		}
		busy, err := l.TransactionalIDInDoubt(ctx, ids.TransactionalID)
		require.NoError(t, err)
		assert.True(t, busy, "the prepared members hold the shared id")
	})

	t.Run("committed together, each row its own compare-and-set", func(t *testing.T) {
		ts := begin(t, "done", 3, ea)
		require.NoError(t, l.PreparedBatch(ctx, ts, nil))
		resolver := *ts[2]
		require.NoError(t, l.Claim(ctx, &resolver, txntype.Fence{Instance: "r", Epoch: er}, txntype.StatePrepared))
		done, err := l.CommittedBatch(ctx, ts, time.Time{})
		require.NoError(t, err)
		assert.Equal(t, []bool{true, true, false}, done, "the claimed row is left to its resolver")
		assert.Equal(t, []txntype.State{txntype.StateCommitted, txntype.StateCommitted, txntype.StatePrepared}, states(t, ts))
		assert.Equal(t, txntype.StateCommitted, ts[0].State)
		require.NotNil(t, ts[0].FinishedAt)
		events, err := l.Events(ctx, ts[0].GID)
		require.NoError(t, err)
		assert.Equal(t, txntype.StateCommitted, events[len(events)-1].State)
	})

	// The stamp is the time the answers said, which went before the write (coord/finals.go):
	// the stored rows, one and many, carry exactly it.
	t.Run("committed with the answer's stamp", func(t *testing.T) {
		ts := begin(t, "stamped", 3, ea)
		require.NoError(t, l.PreparedBatch(ctx, ts, nil))
		at := ts[0].UpdatedAt.Add(1500 * time.Microsecond).Truncate(time.Microsecond)
		done, err := l.CommittedBatch(ctx, ts[:2], at)
		require.NoError(t, err)
		assert.Equal(t, []bool{true, true}, done)
		single := at.Add(time.Microsecond)
		require.NoError(t, l.Committed(ctx, ts[2], single))
		for i, want := range []time.Time{at, at, single} {
			got, err := l.Get(ctx, ts[i].ID)
			require.NoError(t, err)
			assert.Equal(t, txntype.StateCommitted, got.State)
			assert.True(t, want.Equal(got.UpdatedAt), "updated_at %v, want %v", got.UpdatedAt, want)
			require.NotNil(t, got.FinishedAt)
			assert.True(t, want.Equal(*got.FinishedAt), "finished_at %v, want %v", *got.FinishedAt, want)
			assert.True(t, want.Equal(ts[i].UpdatedAt), "the caller's copy")
		}
	})

	t.Run("one member claimed: nothing changes", func(t *testing.T) {
		ts := begin(t, "claimed", 3, ea)
		resolver := *ts[1]
		require.NoError(t, l.Claim(ctx, &resolver, txntype.Fence{Instance: "r", Epoch: er}, txntype.StateAborting))
		require.ErrorIs(t, l.PreparedBatch(ctx, ts, nil), txntype.ErrMovedOn)
		assert.Equal(t, []txntype.State{txntype.StateActive, txntype.StateAborting, txntype.StateActive}, states(t, ts))
		for _, tr := range ts {
			assert.Equal(t, txntype.StateActive, tr.State, "the caller's copies are unchanged")
		}
	})

	t.Run("epoch moved: nothing changes", func(t *testing.T) {
		l2, pool2 := newLog(t)
		e1, err := txlog.BumpEpoch(ctx, pool2, "a")
		require.NoError(t, err)
		ts := make([]*txntype.Transaction, 2)
		for i := range ts {
			live, _, err := l2.Begin(ctx, row(fmt.Sprintf("fenced%d", i), e1))
			require.NoError(t, err)
			live.Kafka = &txntype.KafkaState{KafkaIDs: ids}
			ts[i] = live
		}
		_, err = txlog.BumpEpoch(ctx, pool2, "a")
		require.NoError(t, err)
		require.ErrorIs(t, l2.PreparedBatch(ctx, ts, nil), txntype.ErrMovedOn)
		for _, tr := range ts {
			got, err := l2.Get(ctx, tr.ID)
			require.NoError(t, err)
			assert.Equal(t, txntype.StateActive, got.State)
		}
	})

	t.Run("a member without the batch's ids is refused before writing", func(t *testing.T) {
		ts := begin(t, "mixed", 2, ea)
		ts[1].Kafka = &txntype.KafkaState{KafkaIDs: txntype.KafkaIDs{TransactionalID: "tx-2", ProducerID: 43}}
		err := l.PreparedBatch(ctx, ts, nil)
		require.Error(t, err)
		assert.NotErrorIs(t, err, txntype.ErrMovedOn)
		assert.Equal(t, []txntype.State{txntype.StateActive, txntype.StateActive}, states(t, ts))
	})
}
