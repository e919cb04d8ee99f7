package kafkatxn

import (
	"context"
	"testing"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParkedDecision: a transaction parked for its caller keeps its id quarantined; a decision
// taken on this pool ends it through the parked producer, which then returns to the pool as is.
func TestParkedDecision(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		commit bool
	}{
		{"commit through the parked producer", true},
		{"abort through the parked producer", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, _ := kfakePool(t, "orders", 1)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			kt, err := p.Acquire(ctx)
			require.NoError(t, err)
			require.NoError(t, kt.Begin(ctx, []txntype.Record{{Topic: "orders", Key: key("a")}}))
			ks, err := kt.Prepare(ctx)
			require.NoError(t, err)
			txn := kt.(*Txn)
			txn.Park()
			require.Contains(t, p.QuarantinedSince(), ks.TransactionalID, "I1: quarantined while it waits")
			parkedPR := txn.p

			require.NoError(t, p.EndTxn(ctx, ks.KafkaIDs, tc.commit))
			require.NoError(t, p.Unquarantine(ctx, ks.TransactionalID))
			assert.NotContains(t, p.QuarantinedSince(), ks.TransactionalID)
			reused := false
			for range len(p.free) {
				pr := <-p.free
				reused = reused || pr == parkedPR
				p.free <- pr
			}
			assert.True(t, reused, "the parked producer serves the next transaction")
			// The id serves another transaction.
			next, err := p.Acquire(ctx)
			require.NoError(t, err)
			require.NoError(t, next.Begin(ctx, []txntype.Record{{Topic: "orders", Key: key("b")}}))
			_, err = next.Prepare(ctx)
			require.NoError(t, err)
			require.NoError(t, next.Commit(ctx))
			next.Release(true)
		})
	}
}

// TestParkedDecidedElsewhere: ended by its ids through another client (a decision taken on
// another instance), the parked producer is stale and is replaced when the id is released.
func TestParkedDecidedElsewhere(t *testing.T) {
	t.Parallel()
	p, _ := kfakePool(t, "orders", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kt, err := p.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, kt.Begin(ctx, []txntype.Record{{Topic: "orders", Key: key("a")}}))
	ks, err := kt.Prepare(ctx)
	require.NoError(t, err)
	txn := kt.(*Txn)
	txn.Park()
	parkedPR := txn.p
	require.NoError(t, p.endTxnOnce(ctx, ks.KafkaIDs, true), "the other instance's raw EndTxn")
	require.NoError(t, p.Unquarantine(ctx, ks.TransactionalID))
	for range len(p.free) {
		pr := <-p.free
		assert.NotSame(t, parkedPR, pr, "a stale parked producer is not reused")
		p.free <- pr
	}
}
