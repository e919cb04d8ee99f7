package txlog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// A Begin that provably never reached the server says so (txntype.ErrLogUnsent: the request is
// safe to send again), and writes nothing: a budget that ended before it went out, a log whose
// server cannot be reached, a log closed. Alone and under group commit.
func TestBeginUnsent(t *testing.T) {
	t.Parallel()
	for _, grouped := range []bool{false, true} {
		t.Run(fmt.Sprintf("group commit %t", grouped), func(t *testing.T) {
			t.Parallel()
			l, pool := newLogWith(t, txlog.Options{GroupCommit: grouped})
			ctx := context.Background()
			epoch, err := txlog.BumpEpoch(ctx, pool, "a")
			require.NoError(t, err)

			done, cancel := context.WithCancel(ctx)
			cancel()
			_, _, err = l.Begin(done, row("u1", epoch))
			require.ErrorIs(t, err, txntype.ErrLogUnsent, "%v", err)
			_, err = l.Get(ctx, "u1")
			require.ErrorIs(t, err, txntype.ErrNotFound, "nothing was written")

			cfg, err := pgxpool.ParseConfig("postgres://nobody:x@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
			require.NoError(t, err)
			down, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(down.Close)
			unreachable := txlog.New(down, txlog.Options{GroupCommit: grouped})
			t.Cleanup(unreachable.Close)
			_, _, err = unreachable.Begin(ctx, row("u2", epoch))
			require.ErrorIs(t, err, txntype.ErrLogUnsent, "%v", err)

			closed, _ := newLogWith(t, txlog.Options{GroupCommit: grouped})
			closed.Close()
			if grouped {
				_, _, err = closed.Begin(ctx, row("u3", epoch))
				require.ErrorIs(t, err, txntype.ErrLogUnsent, "%v", err)
			}
		})
	}
}

// A Begin whose answer was lost after the insert went out (its backend terminated while the
// insert waited for a lock) is not "unsent", nor "refused": the row may exist, and the
// coordinator must not call the request safe to retry.
func TestBeginAnswerLostIsNotUnsent(t *testing.T) {
	t.Parallel()
	for _, grouped := range []bool{false, true} {
		t.Run(fmt.Sprintf("group commit %t", grouped), func(t *testing.T) {
			t.Parallel()
			l, pool := newLogWith(t, txlog.Options{GroupCommit: grouped})
			ctx := context.Background()
			epoch, err := txlog.BumpEpoch(ctx, pool, "a")
			require.NoError(t, err)

			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, "LOCK TABLE coordinator_transactions IN SHARE MODE")
			require.NoError(t, err)
			var holder int
			require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holder))

			answer := make(chan error, 1)
			go func() {
				_, _, err := l.Begin(ctx, row("lost", epoch))
				answer <- err
			}()
			deadline := time.Now().Add(txlog.LockTimeout / 2)
			for {
				var n int
				// Only a backend waiting for this schema's table: a CREATE INDEX CONCURRENTLY of
				// another test's migration also waits for the holder (for its snapshot, not
				// its lock) and is not ours to terminate.
				require.NoError(t, pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l
					WHERE NOT l.granted AND l.locktype = 'relation'
					  AND l.relation = 'coordinator_transactions'::regclass
					  AND $1 = ANY(pg_blocking_pids(l.pid))`, holder).Scan(&n))
				if n > 0 {
					break
				}
				require.True(t, time.Now().Before(deadline), "the insert never waited for the lock")
				time.Sleep(5 * time.Millisecond)
			}
			err = <-answer
			require.Error(t, err)
			assert.NotErrorIs(t, err, txntype.ErrLogUnsent, "the insert went out: %v", err)
			assert.NotErrorIs(t, err, txntype.ErrLogRefused, "a terminated backend proves nothing: %v", err)
		})
	}
}
