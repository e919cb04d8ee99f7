package txlog_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// A lock on the log held by a prepared transaction (what a client's statement inside its
// request leaves behind when PREPARE TRANSACTION keeps its locks): the log's writes wait at most
// the lock timeout, and their error proves nothing was written (txntype.ErrLogRefused), so that
// the request may abort, which releases the lock. Once it is gone, the same writes go through.
func TestWritesBlockedByAPreparedLockAreRefused(t *testing.T) {
	t.Parallel()
	for _, lock := range []struct{ name, sql string }{
		{"row lock", "SELECT 1 FROM coordinator_transactions WHERE gid = $1 FOR UPDATE"},
		{"table lock", "LOCK TABLE coordinator_transactions IN SHARE MODE"},
		{"events table lock", "LOCK TABLE coordinator_events IN SHARE MODE"},
	} {
		for _, grouped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/group commit %t", lock.name, grouped), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				l, pool := newLogWith(t, txlog.Options{GroupCommit: grouped})
				id := "locked" + fmt.Sprint(time.Now().UnixNano())
				r := row(id, 0)
				epoch, err := txlog.BumpEpoch(ctx, pool, "a")
				require.NoError(t, err)
				r.OwnerEpoch = epoch
				_, created, err := l.Begin(ctx, r)
				require.NoError(t, err)
				require.True(t, created)
				mate := row(id+"-mate", epoch)
				_, _, err = l.Begin(ctx, mate)
				require.NoError(t, err)

				gid := "lock-" + id
				var args []any
				if strings.Contains(lock.sql, "$1") {
					args = append(args, r.GID)
				}
				holdPrepared(t, pool, gid, lock.sql, args...)
				ks := &txntype.KafkaState{KafkaIDs: txntype.KafkaIDs{TransactionalID: "tid", ProducerID: 7, ProducerEpoch: 1}}
				r.Kafka, mate.Kafka = ks, ks

				err = l.Prepared(ctx, r)
				require.ErrorIs(t, err, txntype.ErrLogRefused, "%v", err)
				assert.Equal(t, txntype.StateActive, r.State, "a refused write changes nothing")
				err = l.PreparedBatch(ctx, []*txntype.Transaction{r, mate}, nil)
				require.ErrorIs(t, err, txntype.ErrLogRefused, "%v", err)

				_, err = pool.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'")
				require.NoError(t, err)
				stored, err := l.Get(ctx, id)
				require.NoError(t, err)
				assert.Equal(t, txntype.StateActive, stored.State, "nothing of the refused writes was written")
				require.NoError(t, l.PreparedBatch(ctx, []*txntype.Transaction{r, mate}, nil))
				require.NoError(t, l.Transition(ctx, r, txntype.StateCommitted))
			})
		}
	}
}

// holdPrepared runs stmt (with args) in a transaction and prepares it as gid; the test's end
// rolls it back if it is still there.
func holdPrepared(t *testing.T, pool *pgxpool.Pool, gid, stmt string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, stmt, args...)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'") })
}

// One write of a group commit waits on a row a prepared transaction keeps locked: it alone is
// refused after the lock timeout; the writes it shared a flush with are sent again without it
// and commit.
func TestGroupCommitIsolatesALockedWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	obs := &countingObserver{}
	l, pool := newLogWith(t, txlog.Options{GroupCommit: true, Observer: obs})
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	const n, locked = 41, 20
	rows := make([]*txntype.Transaction, n)
	for i := range n {
		r, _, err := l.Begin(ctx, row(fmt.Sprintf("iso-%d", i), epoch))
		require.NoError(t, err)
		rows[i] = r
	}
	holdPrepared(t, pool, "iso-lock", "SELECT 1 FROM coordinator_transactions WHERE gid = $1 FOR UPDATE", rows[locked].GID)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = l.Transition(ctx, rows[i], txntype.StateAborted) })
	}
	wg.Wait()
	for i := range n {
		got, err := l.Get(ctx, rows[i].ID)
		require.NoError(t, err)
		if i == locked {
			assert.ErrorIs(t, errs[i], txntype.ErrLogRefused, "the locked write")
			assert.Equal(t, txntype.StateActive, got.State)
			continue
		}
		assert.NoError(t, errs[i], "write %d travelled with the locked one", i)
		assert.Equal(t, txntype.StateAborted, got.State, "write %d", i)
	}
	assert.Greater(t, obs.largest.Load(), int64(1), "the writes shared flushes")
}
