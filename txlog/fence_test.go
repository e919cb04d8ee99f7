package txlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/pgtest"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// newLog migrates a log into a schema of its own on DATABASE_URL.
func newLog(t *testing.T) (*txlog.Log, *pgxpool.Pool) {
	t.Helper()
	return newLogWith(t, txlog.Options{GroupCommit: true})
}

// newLogWith is newLog with the given options.
func newLogWith(t testing.TB, o txlog.Options) (*txlog.Log, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	_, dsn, _ := pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	txlog.ConfigurePool(cfg) // as the service does
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	l := txlog.New(pool, o)
	t.Cleanup(l.Close)
	require.NoError(t, txlog.Migrate(ctx, l, "up"))
	return l, pool
}

func row(id string, epoch int64) *txntype.Transaction {
	return &txntype.Transaction{ID: id, GID: "p_" + id, Instance: "a", State: txntype.StateActive,
		Owner: "a", OwnerEpoch: epoch, Digest: []byte{1},
		SQLGIDs: []txntype.SQLGID{{Database: "default", GID: "p_" + id + "@default"}}}
}

// The log's fencing, against PostgreSQL: a claim takes the row from the live writer, a bumped
// epoch stops every write of the older one, and a stale epoch cannot begin.
func TestFencing(t *testing.T) {
	t.Parallel()
	l, pool := newLog(t)
	ctx := context.Background()
	ea, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	er, err := txlog.BumpEpoch(ctx, pool, "r")
	require.NoError(t, err)

	t.Run("claim before the live writer's prepared", func(t *testing.T) {
		live, created, err := l.Begin(ctx, row("c1", ea))
		require.NoError(t, err)
		require.True(t, created)
		resolver := *live
		require.NoError(t, l.Claim(ctx, &resolver, txntype.Fence{Instance: "r", Epoch: er}, txntype.StateAborting))
		assert.Equal(t, txntype.StateAborting, resolver.State)
		assert.Equal(t, "r", resolver.Owner)
		// The live writer's prepared and final writes now fail, and change nothing.
		require.ErrorIs(t, l.Prepared(ctx, live), txntype.ErrMovedOn)
		require.ErrorIs(t, l.Transition(ctx, live, txntype.StateAborted), txntype.ErrMovedOn)
		// A second resolver that read the row before the claim loses too.
		require.ErrorIs(t, l.Claim(ctx, live, txntype.Fence{Instance: "r", Epoch: er}, txntype.StateAborting), txntype.ErrMovedOn)
		require.NoError(t, l.Transition(ctx, &resolver, txntype.StateAborted))
		got, err := l.Get(ctx, "c1")
		require.NoError(t, err)
		assert.Equal(t, txntype.StateAborted, got.State)
		events, err := l.Events(ctx, got.GID)
		require.NoError(t, err)
		var states []txntype.State
		for _, e := range events {
			states = append(states, e.State)
		}
		assert.Equal(t, []txntype.State{txntype.StateActive, txntype.StateAborting, txntype.StateAborted}, states)
	})

	t.Run("a bumped epoch fences the older one", func(t *testing.T) {
		live, _, err := l.Begin(ctx, row("c2", ea))
		require.NoError(t, err)
		_, err = txlog.BumpEpoch(ctx, pool, "a") // a takeover, or a's own re-claim
		require.NoError(t, err)
		require.ErrorIs(t, l.Prepared(ctx, live), txntype.ErrMovedOn)
		_, _, err = l.Begin(ctx, row("c3", ea))
		require.ErrorIs(t, err, txntype.ErrNotOwner)
		got, err := l.Get(ctx, "c2")
		require.NoError(t, err)
		assert.Equal(t, txntype.StateActive, got.State, "nothing written")
	})
}

// HoldEpoch: a takeover acts for an instance only while its epoch is the one the takeover set,
// and the instance cannot claim its lock again (bump its epoch) while the takeover holds it.
// This is the interleaving the model found (model/README.md, F1): without the hold, a takeover
// whose session was lost would re-initialise the ids of the instance that came back.
func TestHoldEpoch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newLog(t)
	taken, err := txlog.BumpEpoch(ctx, pool, "a") // the takeover's claim
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, txlog.HoldEpoch(ctx, tx, "a", taken))
	var holder int
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holder))
	bumped := make(chan int64, 1)
	go func() {
		e, _ := txlog.BumpEpoch(ctx, pool, "a") // the instance claiming its lock again
		bumped <- e
	}()
	// The instance's claim waits for the hold: poll until a backend is blocked by the holder (not
	// another test's CREATE INDEX CONCURRENTLY, which waits for every older snapshot).
	require.Eventually(t, func() bool {
		var waiting bool
		_ = pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)) AND wait_event IS DISTINCT FROM 'virtualxid')`,
			holder).Scan(&waiting)
		return waiting
	}, 30*time.Second, 20*time.Millisecond)
	select {
	case <-bumped:
		require.FailNow(t, "the instance claimed its lock while the takeover held it")
	default:
	}
	require.NoError(t, tx.Rollback(ctx))
	assert.Equal(t, taken+1, <-bumped, "the claim went through once the hold ended")

	// Now the takeover's epoch is stale: it must not act for the instance any more.
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.ErrorIs(t, txlog.HoldEpoch(ctx, tx, "a", taken), txlog.ErrEpochMoved)
}

// ConfigurePool's session settings replace those the connection string carries: the lock
// timeout, and no JIT compilation (whose cost a growing table's estimates would make every
// sweep pay).
func TestConfigurePoolSessionSettings(t *testing.T) {
	t.Parallel()
	_, dsn, _ := pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["jit"] = "on"
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "1min"
	txlog.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var jit, lock string
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT current_setting('jit'), current_setting('lock_timeout')").Scan(&jit, &lock))
	assert.Equal(t, "off", jit)
	assert.Equal(t, "2s", lock)
}
