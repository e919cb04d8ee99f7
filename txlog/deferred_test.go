package txlog_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// S8 against PostgreSQL: the prepared write inserts the rows of members that joined with no
// row, next to the anchor's update, all or nothing.
func TestPreparedBatchDeferredRows(t *testing.T) {
	t.Parallel()
	l, pool := newLog(t)
	ctx := context.Background()
	ea, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	ids := txntype.KafkaIDs{TransactionalID: "tx-d", ProducerID: 43, ProducerEpoch: 2}
	kafka := func(i int) *txntype.KafkaState {
		return &txntype.KafkaState{KafkaIDs: ids, PreparedState: ids.PreparedState(),
			Records: []txntype.RecordOffset{{Topic: "t", Partition: 0, Offset: int64(200 + i)}}}
	}
	shared := func(name string, ts []*txntype.Transaction) txntype.SharedGID {
		g := txntype.SharedGID{Database: "db", GID: "p_+a+" + name + "@db"}
		for _, tr := range ts {
			g.Members = append(g.Members, tr.GID)
		}
		return g
	}
	// batch: an anchor logged by Begin, then n members with no row.
	batchIn := func(t *testing.T, l *txlog.Log, prefix string, n int, epoch int64) []*txntype.Transaction {
		t.Helper()
		anchor, created, err := l.Begin(ctx, row(prefix+"anchor", epoch))
		require.NoError(t, err)
		require.True(t, created)
		anchor.Kafka = kafka(0)
		ts := []*txntype.Transaction{anchor}
		for i := range n {
			d := row(fmt.Sprintf("%s%d", prefix, i), epoch)
			d.RowDeferred, d.Kafka = true, kafka(i+1)
			d.SQL = []txntype.SQLResult{{RowsAffected: int64(i + 1)}}
			ts = append(ts, d)
		}
		return ts
	}
	batch := func(t *testing.T, prefix string, n int, epoch int64) []*txntype.Transaction {
		t.Helper()
		return batchIn(t, l, prefix, n, epoch)
	}
	absent := func(t *testing.T, tr *txntype.Transaction) {
		t.Helper()
		_, err := l.Get(ctx, tr.ID)
		require.ErrorIs(t, err, txntype.ErrNotFound, "%s: no row", tr.ID)
	}

	t.Run("inserted prepared with the batch's ids", func(t *testing.T) {
		ts := batch(t, "ins", 2, ea)
		require.NoError(t, l.PreparedBatch(ctx, ts, []txntype.SharedGID{shared("ins", ts)}))
		for i, tr := range ts {
			assert.Equal(t, txntype.StatePrepared, tr.State)
			assert.False(t, tr.RowDeferred, "the caller's copy has its row now")
			require.NotNil(t, tr.PreparedAt)
			got, err := l.Get(ctx, tr.ID)
			require.NoError(t, err)
			assert.Equal(t, txntype.StatePrepared, got.State)
			assert.Equal(t, ids, got.Kafka.KafkaIDs)
			assert.Equal(t, int64(200+i), got.Kafka.Records[0].Offset)
			assert.Equal(t, tr.Digest, got.Digest)
			assert.Equal(t, "a", got.Owner)
			assert.Equal(t, ea, got.OwnerEpoch)
			assert.True(t, got.CreatedAt.Equal(tr.CreatedAt), "created_at %v, the caller's %v", got.CreatedAt, tr.CreatedAt)
		}
		got, err := l.Get(ctx, ts[2].ID)
		require.NoError(t, err)
		require.Len(t, got.SQL, 1)
		assert.Equal(t, int64(2), got.SQL[0].RowsAffected)
		// The request id is taken: a Begin of it finds the prepared row.
		stored, created, err := l.Begin(ctx, row("ins1", ea))
		require.NoError(t, err)
		assert.False(t, created)
		assert.Equal(t, txntype.StatePrepared, stored.State)
	})

	t.Run("a request id logged already refuses the whole write", func(t *testing.T) {
		ts := batch(t, "dup", 2, ea)
		_, created, err := l.Begin(ctx, row("dup1", ea)) // another run of the id, logged meanwhile
		require.NoError(t, err)
		require.True(t, created)
		err = l.PreparedBatch(ctx, ts, []txntype.SharedGID{shared("dup", ts)})
		require.ErrorIs(t, err, txntype.ErrMovedOn)
		got, err := l.Get(ctx, ts[0].ID)
		require.NoError(t, err)
		assert.Equal(t, txntype.StateActive, got.State, "the anchor is unchanged")
		absent(t, ts[1])
		got, err = l.Get(ctx, "dup1")
		require.NoError(t, err)
		assert.Equal(t, txntype.StateActive, got.State, "the other run's row is unchanged")
		assert.True(t, ts[1].RowDeferred, "the caller's copies are unchanged")
		regs, err := l.SharedGIDs(ctx, []string{"p_+a+dup@db"})
		require.NoError(t, err)
		assert.Empty(t, regs, "no registration")
	})

	t.Run("a late Begin of a deferred member keeps a late write from landing", func(t *testing.T) {
		ts := batch(t, "late", 1, ea)
		_, created, err := l.Begin(ctx, row("late0", ea))
		require.NoError(t, err)
		require.True(t, created)
		require.ErrorIs(t, l.PreparedBatch(ctx, ts, []txntype.SharedGID{shared("late", ts)}), txntype.ErrMovedOn)
	})

	t.Run("the tombstone rule: a late write after the tombstone went finds its anchor moved on", func(t *testing.T) {
		// A log of its own: the tombstone waits for every older active row, the other cases' too.
		l, pool := newLog(t)
		ea, err := txlog.BumpEpoch(ctx, pool, "a")
		require.NoError(t, err)
		ts := batchIn(t, l, "tomb", 1, ea)
		g := shared("tomb", ts)
		_, err = l.TombstoneShared(ctx, g.GID)
		require.NoError(t, err)
		require.ErrorIs(t, l.PreparedBatch(ctx, ts, []txntype.SharedGID{g}), txntype.ErrMovedOn, "the tombstone refuses it")
		n, err := l.DeleteShared(ctx, []string{g.GID}, 0)
		require.NoError(t, err)
		assert.Zero(t, n, "kept while the anchor, older than it, is active")
		anchor := *ts[0]
		require.NoError(t, l.Transition(ctx, &anchor, txntype.StateAborted))
		n, err = l.DeleteShared(ctx, []string{g.GID}, 0)
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "gone once no row older than it is active")
		require.ErrorIs(t, l.PreparedBatch(ctx, ts, []txntype.SharedGID{g}), txntype.ErrMovedOn, "the anchor refuses it")
		_, err = l.Get(ctx, ts[1].ID)
		require.ErrorIs(t, err, txntype.ErrNotFound, "no row")
	})

	t.Run("no anchor: not sent", func(t *testing.T) {
		ts := batch(t, "noanchor", 2, ea)[1:]
		err := l.PreparedBatch(ctx, ts, []txntype.SharedGID{shared("noanchor", ts)})
		require.Error(t, err)
		assert.NotErrorIs(t, err, txntype.ErrMovedOn)
		for _, tr := range ts {
			absent(t, tr)
		}
	})

	t.Run("epoch moved: nothing inserted", func(t *testing.T) {
		l2, pool2 := newLog(t)
		e1, err := txlog.BumpEpoch(ctx, pool2, "a")
		require.NoError(t, err)
		anchor, _, err := l2.Begin(ctx, row("fenced-anchor", e1))
		require.NoError(t, err)
		anchor.Kafka = kafka(0)
		d := row("fenced-deferred", e1)
		d.RowDeferred, d.Kafka = true, kafka(1)
		_, err = txlog.BumpEpoch(ctx, pool2, "a")
		require.NoError(t, err)
		require.ErrorIs(t, l2.PreparedBatch(ctx, []*txntype.Transaction{anchor, d}, nil), txntype.ErrMovedOn)
		_, err = l2.Get(ctx, d.ID)
		require.ErrorIs(t, err, txntype.ErrNotFound)
	})
}
