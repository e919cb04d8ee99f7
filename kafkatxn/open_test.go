package kafkatxn

import (
	"context"
	"testing"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenOnPartitions (R2's evidence): a prepared transaction's records are held open on
// their partition, by their producer, from their first offset; once it commits the partition
// reports nothing open; a partition Kafka does not know is not answered, never read as closed.
func TestOpenOnPartitions(t *testing.T) {
	t.Parallel()
	p, _ := kfakePool(t, "orders", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kt, err := p.Acquire(ctx)
	require.NoError(t, err)
	txn := kt.(*Txn)
	p0 := int32(0)
	require.NoError(t, txn.Begin(ctx, []txntype.Record{{Topic: "orders", Partition: &p0, Key: key("a")}}))
	ks, err := txn.Prepare(ctx)
	require.NoError(t, err)
	require.Len(t, ks.Records, 1)

	parts := []TopicPartition{{"orders", 0}, {"orders", 1}, {"orders", 7}, {"gone", 0}}
	open, unasked := p.OpenOnPartitions(ctx, parts)
	require.Contains(t, open, TopicPartition{"orders", 0})
	assert.Equal(t, []OpenOnPartition{{ProducerID: ks.ProducerID, StartOffset: ks.Records[0].Offset}}, open[TopicPartition{"orders", 0}])
	assert.Empty(t, open[TopicPartition{"orders", 1}])
	assert.Contains(t, open, TopicPartition{"orders", 1}, "answered: nothing open")
	for _, tp := range []TopicPartition{{"orders", 7}, {"gone", 0}} {
		assert.NotContains(t, open, tp, "%s: not answered", tp)
		assert.Error(t, unasked[tp], "%s: says why", tp)
	}

	require.NoError(t, txn.Commit(ctx))
	txn.Release(true)
	open, unasked = p.OpenOnPartitions(ctx, parts[:2])
	assert.Empty(t, unasked)
	assert.Empty(t, open[TopicPartition{"orders", 0}], "committed: its marker closed it")
	assert.Contains(t, open, TopicPartition{"orders", 0})
}

// TestRecheckDropsWhatClosed: a scan's finding whose marker arrived since is dropped by Recheck
// (nothing for an operator to repair), one still open is kept.
func TestRecheckDropsWhatClosed(t *testing.T) {
	t.Parallel()
	p, _ := kfakePool(t, "orders", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kt, err := p.Acquire(ctx)
	require.NoError(t, err)
	txn := kt.(*Txn)
	require.NoError(t, txn.Begin(ctx, []txntype.Record{{Topic: "orders", Key: key("a")}}))
	ks, err := txn.Prepare(ctx)
	require.NoError(t, err)
	h := Hanging{TransactionalID: ks.TransactionalID, ProducerID: ks.ProducerID, Topic: "orders", Partition: 0,
		StartOffset: ks.Records[0].Offset}
	p.mu.Lock()
	hh := h
	p.watch.hanging[h.key()] = &hh
	p.mu.Unlock()

	closed, err := p.Recheck(ctx, h)
	require.NoError(t, err)
	assert.False(t, closed, "still open on the partition")
	assert.Len(t, p.HangingTransactions(), 1)

	require.NoError(t, txn.Commit(ctx))
	txn.Release(true)
	closed, err = p.Recheck(ctx, h)
	require.NoError(t, err)
	assert.True(t, closed, "its marker arrived: nothing to repair")
	assert.Empty(t, p.HangingTransactions())
	assert.Zero(t, p.RepairedTotal(), "closed without a repair")
}
