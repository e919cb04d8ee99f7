package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/pgtest"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
)

// liveEnv is a log on a fresh schema of the real PostgreSQL.
func liveEnv(t *testing.T) (log *txlog.Log, dsn, schema string, admin *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	schema, dsn, admin = pgtest.Schema(t)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	log = txlog.New(pool, txlog.Options{})
	t.Cleanup(log.Close)
	require.NoError(t, txlog.Migrate(ctx, log, "up"))
	return log, dsn, schema, admin
}

// The heartbeat does not wait for the pass: a pass that runs for longer than the lease (here
// held on a lock of the log's table) leaves the heartbeat younger than the lease.
func TestHeartbeatBesideALongPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log, dsn, schema, admin := liveEnv(t)
	require.NoError(t, log.RegisterInstance(ctx, "a", "p", 1))
	o, err := Claim(ctx, dsn, "a", time.Second)
	require.NoError(t, err)
	sql, err := sqltxn.Open(ctx, map[string]string{"default": dsn}, sqltxn.Options{})
	require.NoError(t, err)
	t.Cleanup(sql.Close)
	const interval, lease = 100 * time.Millisecond, time.Second

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "LOCK TABLE "+schema+".coordinator_transactions IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	own := NewOwnership(dsn, "a", o)
	t.Cleanup(func() { own.Close(context.Background()) })
	l := New(Config{Instance: "a", DSN: dsn, GIDPrefix: schema, Interval: interval, Lease: lease}, own, log, sql, nil, &liveSet{})
	runCtx, stop := context.WithCancel(ctx)
	l.Start(runCtx)
	t.Cleanup(func() { stop(); _ = tx.Rollback(ctx); l.Wait() })

	time.Sleep(2*lease + interval) // the first pass waits on the lock all along
	require.Equal(t, int64(1), l.Passes(), "the first pass is still running")
	require.Zero(t, l.Failures())
	all, err := log.Instances(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Less(t, all[0].Silent, lease, "a live instance's heartbeat is kept while its pass runs longer than the lease")
	assert.True(t, all[0].Locked)
}

// Liveness is the instance's lock (I8), not its heartbeat's age: an instance holding its lock
// is alive however old its heartbeat, one whose lock is free is not however fresh its heartbeat.
func TestInstancesTellLivenessByLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log, dsn, schema, admin := liveEnv(t)
	for _, id := range []string{"held-old", "free-fresh"} {
		require.NoError(t, log.RegisterInstance(ctx, id, "p", 1))
	}
	_, err := admin.Exec(ctx, "UPDATE "+schema+".coordinator_instances SET heartbeat_at = now() - interval '1 hour' WHERE instance_id = 'held-old'")
	require.NoError(t, err)
	o, err := Claim(ctx, dsn, "held-old", time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { o.Close(context.Background()) })

	all, err := log.Instances(ctx, "")
	require.NoError(t, err)
	got := map[string]bool{}
	for _, in := range all {
		got[in.ID] = in.Locked
	}
	assert.Equal(t, map[string]bool{"held-old": true, "free-fresh": false}, got)
}
