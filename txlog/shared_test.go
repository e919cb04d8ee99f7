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

// The registrations of shared PostgreSQL transactions against PostgreSQL: the prepared write
// registers them with its members, all or nothing (S2); a tombstone refuses a later prepared
// write of the same gid (S3); registrations go only once every member is final.
func TestSharedRegistration(t *testing.T) {
	t.Parallel()
	l, pool := newLog(t)
	ctx := context.Background()
	ea, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	ids := txntype.KafkaIDs{TransactionalID: "tx-1", ProducerID: 42, ProducerEpoch: 7}
	begin := func(t *testing.T, prefix string, n int, g string) ([]*txntype.Transaction, txntype.SharedGID) {
		t.Helper()
		ts := make([]*txntype.Transaction, n)
		shared := txntype.SharedGID{Database: "default", GID: g}
		for i := range ts {
			live, created, err := l.Begin(ctx, row(fmt.Sprintf("%s%d", prefix, i), ea))
			require.NoError(t, err)
			require.True(t, created)
			live.Kafka = &txntype.KafkaState{KafkaIDs: ids, Records: []txntype.RecordOffset{{Topic: "t", Offset: int64(i)}}}
			live.SQLGIDs = []txntype.SQLGID{{Database: "default", GID: g}}
			ts[i] = live
			shared.Members = append(shared.Members, live.GID)
		}
		return ts, shared
	}

	t.Run("registered with the prepared write", func(t *testing.T) {
		ts, g := begin(t, "reg", 3, "p_+aa@default")
		require.NoError(t, l.PreparedBatch(ctx, ts, []txntype.SharedGID{g}))
		regs, err := l.SharedGIDs(ctx, []string{g.GID, "p_+none@default"})
		require.NoError(t, err)
		require.Contains(t, regs, g.GID)
		assert.NotContains(t, regs, "p_+none@default")
		assert.ElementsMatch(t, g.Members, regs[g.GID].Members)
		got, err := l.Get(ctx, ts[1].ID)
		require.NoError(t, err)
		assert.Equal(t, []txntype.SQLGID{{Database: "default", GID: g.GID}}, got.SQLGIDs, "the row names the shared gid")

		again, err := l.TombstoneShared(ctx, g.GID)
		require.NoError(t, err)
		assert.ElementsMatch(t, g.Members, again.Members, "a tombstone never replaces a registration")

		n, err := l.DeleteShared(ctx, []string{g.GID}, time.Hour)
		require.NoError(t, err)
		assert.Zero(t, n, "kept while its members are prepared")
		done, err := l.CommittedBatch(ctx, ts[:2], time.Time{})
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, done)
		n, err = l.DeleteShared(ctx, []string{g.GID}, time.Hour)
		require.NoError(t, err)
		assert.Zero(t, n, "kept while one member is not final")
		_, err = l.CommittedBatch(ctx, ts[2:], time.Time{})
		require.NoError(t, err)
		n, err = l.DeleteShared(ctx, []string{g.GID}, time.Hour)
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "deleted once every member is final")
	})

	t.Run("a tombstone refuses the prepared write as a whole", func(t *testing.T) {
		ts, g := begin(t, "tomb", 2, "p_+bb@default")
		tomb, err := l.TombstoneShared(ctx, g.GID)
		require.NoError(t, err)
		assert.Empty(t, tomb.Members)
		require.ErrorIs(t, l.PreparedBatch(ctx, ts, []txntype.SharedGID{g}), txntype.ErrMovedOn)
		for _, tr := range ts {
			got, err := l.Get(ctx, tr.ID)
			require.NoError(t, err)
			assert.Equal(t, txntype.StateActive, got.State, "nothing of the refused write is left")
		}
		regs, err := l.SharedGIDs(ctx, []string{g.GID})
		require.NoError(t, err)
		assert.Empty(t, regs[g.GID].Members, "the tombstone stays a tombstone")

		n, err := l.DeleteShared(ctx, []string{g.GID}, time.Hour)
		require.NoError(t, err)
		assert.Zero(t, n, "kept while a row older than it is active: a late prepared write could still land")
		for _, tr := range ts {
			require.NoError(t, l.Transition(ctx, tr, txntype.StateAborted))
		}
		n, err = l.DeleteShared(ctx, []string{g.GID}, time.Hour)
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "no active row older than it: no prepared write can land, it goes")
	})

	t.Run("a member moved on: no registration either", func(t *testing.T) {
		ts, g := begin(t, "moved", 2, "p_+cc@default")
		resolver := *ts[0]
		er, err := txlog.BumpEpoch(ctx, pool, "r")
		require.NoError(t, err)
		require.NoError(t, l.Claim(ctx, &resolver, txntype.Fence{Instance: "r", Epoch: er}, txntype.StateAborting))
		require.ErrorIs(t, l.PreparedBatch(ctx, ts, []txntype.SharedGID{g}), txntype.ErrMovedOn)
		regs, err := l.SharedGIDs(ctx, []string{g.GID})
		require.NoError(t, err)
		assert.Empty(t, regs)
	})
}
