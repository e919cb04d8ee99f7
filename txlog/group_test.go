package txlog_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txlog"
)

// countingObserver adds up the writes the group commit reports and the largest batch.
type countingObserver struct {
	writes, batches, largest atomic.Int64
}

func (o *countingObserver) ObserveLogWrite(time.Duration) {}
func (o *countingObserver) ObserveLogBatch(n int, _ time.Duration) {
	o.writes.Add(int64(n))
	o.batches.Add(1)
	for {
		l := o.largest.Load()
		if int64(n) <= l || o.largest.CompareAndSwap(l, int64(n)) {
			return
		}
	}
}

// Group commit against PostgreSQL: a lone write is sent alone (by its caller); concurrent writes
// share batches, and every write keeps its own answer: a compare-and-set that finds its row moved
// on fails alone, the others in its batch commit.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	obs := &countingObserver{}
	l, pool := newLogWith(t, txlog.Options{GroupCommit: true, Observer: obs})
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)

	// Sequential writes: every batch carries one.
	for i := range 5 {
		_, created, err := l.Begin(ctx, row(fmt.Sprintf("seq-%d", i), epoch))
		require.NoError(t, err)
		require.True(t, created)
	}
	assert.EqualValues(t, 5, obs.writes.Load())
	assert.EqualValues(t, 5, obs.batches.Load())

	// Concurrent writes: begins, then prepared writes of which every third is stale.
	const n = 96
	rows := make([]*coord.Transaction, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			t0, created, err := l.Begin(ctx, row(fmt.Sprintf("con-%d", i), epoch))
			if assert.NoError(t, err) && assert.True(t, created) {
				rows[i] = t0
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			tx := *rows[i]
			if i%3 == 0 {
				tx.State = coord.StatePrepared // not what the row holds: the compare-and-set fails
			}
			errs[i] = l.Transition(ctx, &tx, coord.StateAborted)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%3 == 0 {
			assert.ErrorIs(t, err, coord.ErrMovedOn, "write %d", i)
		} else {
			assert.NoError(t, err, "write %d", i)
		}
	}
	for i := range n {
		got, err := l.Get(ctx, rows[i].ID)
		require.NoError(t, err)
		want := coord.StateAborted
		if i%3 == 0 {
			want = coord.StateActive
		}
		assert.Equal(t, want, got.State, "row %d", i)
	}
	assert.EqualValues(t, 5+2*n, obs.writes.Load(), "every write reported once")
	assert.Greater(t, obs.largest.Load(), int64(1), "concurrent writes shared a batch")
}

// A write the server refuses (here an error message with a NUL, which PostgreSQL text cannot
// hold) inside a group commit: the writes it shared a batch with fail with it, none of them
// half-done, and each write's answer matches its row (nil: changed; an error: unchanged).
func TestGroupCommitRefusedWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := newLogWith(t, txlog.Options{GroupCommit: true})
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	const n = 48
	rows := make([]*coord.Transaction, n)
	for i := range n {
		r, _, err := l.Begin(ctx, row(fmt.Sprintf("ref-%d", i), epoch))
		require.NoError(t, err)
		rows[i] = r
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tx := *rows[i]
			tx.Error = &coord.ErrorDetail{Participant: "sql:default", Class: coord.ClassAbortable, Message: "fine"}
			if i%8 == 0 {
				tx.Error.Message = "bad\x00byte"
			}
			errs[i] = l.Transition(ctx, &tx, coord.StateAborted)
		})
	}
	wg.Wait()
	for i := range n {
		got, err := l.Get(ctx, rows[i].ID)
		require.NoError(t, err)
		if i%8 == 0 {
			assert.Error(t, errs[i], "write %d", i)
		}
		if errs[i] == nil {
			assert.Equal(t, coord.StateAborted, got.State, "write %d answered nil", i)
		} else {
			assert.Equal(t, coord.StateActive, got.State, "write %d answered %v, yet its row changed", i, errs[i])
		}
	}
}
