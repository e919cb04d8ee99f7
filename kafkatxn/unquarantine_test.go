package kafkatxn

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnquarantineConcurrent: the members of a shared Kafka transaction are resolved in
// parallel and each asks to return the id; it goes back to the pool exactly once (two clients
// of one id would fence each other, and a full free list would block the caller for good).
func TestUnquarantineConcurrent(t *testing.T) {
	t.Parallel()
	p, _ := kfakePool(t, "orders", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kt, err := p.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, kt.Begin(ctx, []txntype.Record{{Topic: "orders", Key: key("a")}}))
	_, err = kt.Prepare(ctx)
	require.NoError(t, err)
	id := kt.TransactionalID()
	kt.Release(false) // in doubt: quarantined
	require.Contains(t, p.QuarantinedSince(), id)

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { assert.NoError(t, p.Unquarantine(ctx, id)) })
	}
	wg.Wait()
	assert.NotContains(t, p.QuarantinedSince(), id)
	assert.Len(t, p.free, 2, "the pool holds its two ids, each once")
	a, err := p.Acquire(ctx)
	require.NoError(t, err)
	b, err := p.Acquire(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, a.TransactionalID(), b.TransactionalID())
}
