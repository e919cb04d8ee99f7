package txlog_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// ClaimMany (C1) against PostgreSQL: each row is its own compare-and-set on what the resolver
// read; the rows claimed come back as they are now, with a claim event each; a row that moved
// on, or was read with another owner, is left out; a claimer whose epoch moved on claims
// nothing; a final row is refused before anything is written.
func TestClaimMany(t *testing.T) {
	t.Parallel()
	l, pool := newLog(t)
	ctx := context.Background()
	ea, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	er, err := txlog.BumpEpoch(ctx, pool, "r")
	require.NoError(t, err)
	by := txntype.Fence{Instance: "r", Epoch: er}

	prepared := func(id string) *txntype.Transaction {
		t.Helper()
		tx, created, err := l.Begin(ctx, row(id, ea))
		require.NoError(t, err)
		require.True(t, created)
		tx.Kafka = &txntype.KafkaState{KafkaIDs: txntype.KafkaIDs{TransactionalID: "tid-" + id, ProducerID: 7, ProducerEpoch: 3}}
		require.NoError(t, l.Prepared(ctx, tx))
		return tx
	}
	a, b, moved, other := prepared("m1"), prepared("m2"), prepared("m3"), prepared("m4")
	// m3 moves on after it was read (its request committed it); m4 was read with a stale owner.
	m3 := *moved
	require.NoError(t, l.Transition(ctx, &m3, txntype.StateCommitted))
	stale := *other
	stale.OwnerEpoch = ea - 1

	claimed, err := l.ClaimMany(ctx, []*txntype.Transaction{a, b, moved, &stale}, by)
	require.NoError(t, err)
	got := map[string]*txntype.Transaction{}
	for _, c := range claimed {
		got[c.GID] = c
	}
	require.Len(t, got, 2, "only the rows still as they were read")
	for _, gid := range []string{a.GID, b.GID} {
		c := got[gid]
		require.NotNil(t, c, gid)
		assert.Equal(t, txntype.StatePrepared, c.State, "a prepared row keeps its state")
		assert.Equal(t, "r", c.Owner)
		assert.Equal(t, er, c.OwnerEpoch)
		require.NotNil(t, c.Kafka, "read back with its Kafka ids")
		assert.Equal(t, "tid-"+c.ID, c.Kafka.TransactionalID)
		assert.Equal(t, int64(7), c.Kafka.ProducerID)
		assert.Equal(t, []txntype.SQLGID{{Database: "default", GID: gid + "@default"}}, c.SQLGIDs)
		evs, err := l.Events(ctx, gid)
		require.NoError(t, err)
		var detail map[string]any
		require.NoError(t, json.Unmarshal(evs[len(evs)-1].Detail, &detail))
		assert.Equal(t, "r", detail["claimed_by"], "the claim's event names the claimer")
		assert.Equal(t, "a", detail["previous_owner"])
		assert.Equal(t, "prepared", detail["previous_state"])
	}
	st, err := l.GetGID(ctx, other.GID)
	require.NoError(t, err)
	assert.Equal(t, "a", st.Owner, "a row read with another owner is not claimed")

	// The claimed rows' writer is fenced: its final write fails.
	done, err := l.CommittedBatch(ctx, []*txntype.Transaction{a}, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, done, "the live writer's write after the claim changes nothing")
	done, err = l.CommittedBatch(ctx, []*txntype.Transaction{got[a.GID]}, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, []bool{true}, done, "the claimer's does")

	// A claimer whose epoch moved on claims nothing.
	_, err = txlog.BumpEpoch(ctx, pool, "r")
	require.NoError(t, err)
	claimed, err = l.ClaimMany(ctx, []*txntype.Transaction{got[b.GID]}, by)
	require.NoError(t, err)
	assert.Empty(t, claimed, "a fenced claimer claims nothing")

	// A final row is refused before anything is written.
	_, err = l.ClaimMany(ctx, []*txntype.Transaction{&m3}, by)
	require.Error(t, err)
}
