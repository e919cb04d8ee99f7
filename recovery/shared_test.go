package recovery

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/logtest"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// liveSet is the Coordinator of these tests: the gids it says are in flight.
type liveSet struct{ m sync.Map }

func (l *liveSet) InFlight(gid string) bool            { _, ok := l.m.Load(gid); return ok }
func (*liveSet) TakeQuarantined(string) (string, bool) { return "", false }

type sharedEnv struct {
	l      *Loop
	log    *txlog.Log
	sql    *sqltxn.Databases
	admin  *pgx.Conn
	schema string
	epoch  int64
	live   *liveSet
}

// newSharedEnv is a loop over a fresh schema of the real PostgreSQL, as log and as the default
// database, with prefix p.
func newSharedEnv(t *testing.T) *sharedEnv {
	t.Helper()
	ctx := context.Background()
	le := logtest.New(t, sqltxn.Options{})
	schema, admin, pool, log, sql := le.Schema, le.Admin, le.Pool, le.Log, le.SQL
	_, err := admin.Exec(ctx, "CREATE TABLE "+schema+".orders (id text PRIMARY KEY)")
	require.NoError(t, err)
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	live := &liveSet{}
	l := New(Config{Instance: "a", GIDPrefix: schema, MarkerAge: time.Millisecond}, nil, log, sql, nil, live)
	return &sharedEnv{l: l, log: log, sql: sql, admin: admin, schema: schema, epoch: epoch, live: live}
}

// prepare runs n requests' inserts in one shared transaction and returns its gid and the
// requests' rows, begun in the log (active, their own gids).
func (e *sharedEnv) prepare(t *testing.T, name string, n int) (string, []*txntype.Transaction) {
	t.Helper()
	ctx := context.Background()
	g := e.schema + "_+a+" + name + "@default"
	var members [][]txntype.Statement
	var ts []*txntype.Transaction
	for i := range n {
		id := fmt.Sprintf("%s-%d", name, i)
		members = append(members, []txntype.Statement{{Database: "default", Statement: "INSERT INTO orders VALUES ($1)", Args: []any{id}}})
		gid := e.schema + "_" + id
		tr, created, err := e.log.Begin(ctx, &txntype.Transaction{ID: id, GID: gid, Instance: "a", State: txntype.StateActive,
			Owner: "a", OwnerEpoch: e.epoch, Digest: []byte{1}, SQLGIDs: []txntype.SQLGID{{Database: "default", GID: gid + "@default"}}})
		require.NoError(t, err)
		require.True(t, created)
		ts = append(ts, tr)
	}
	run := e.sql.RunShared(ctx, "default", members, g, nil)
	require.NoError(t, run.Err)
	return g, ts
}

// logPrepared is the batch's prepared write: every row prepared naming g, g registered.
func (e *sharedEnv) logPrepared(t *testing.T, g string, ts []*txntype.Transaction) error {
	t.Helper()
	shared := txntype.SharedGID{Database: "default", GID: g}
	for i, tr := range ts {
		tr.Kafka = &txntype.KafkaState{KafkaIDs: txntype.KafkaIDs{TransactionalID: "tx", ProducerID: 1, ProducerEpoch: 1},
			Records: []txntype.RecordOffset{{Topic: "t", Offset: int64(i)}}}
		tr.SQLGIDs = []txntype.SQLGID{{Database: "default", GID: g}}
		shared.Members = append(shared.Members, tr.GID)
	}
	return e.log.PreparedBatch(context.Background(), ts, []txntype.SharedGID{shared})
}

func (e *sharedEnv) prepared(t *testing.T, g string) bool {
	t.Helper()
	var n int
	require.NoError(t, e.admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1", g).Scan(&n))
	return n == 1
}

func (e *sharedEnv) ids(t *testing.T) []string {
	t.Helper()
	rows, err := e.admin.Query(context.Background(), "SELECT id FROM "+e.schema+".orders ORDER BY id")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// S3: a shared transaction no registration names is rolled back only after a tombstone, which
// then refuses its batch's late prepared write; never while its batch is in flight here.
func TestSharedOrphanTombstone(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	ctx := context.Background()
	g, ts := e.prepare(t, "orphan", 2)

	e.l.cfg.Instance = "b"
	require.NoError(t, e.l.orphans(ctx, &Stats{}))
	assert.True(t, e.prepared(t, g), "another instance's, young: left alone")
	e.l.cfg.Instance = "a"

	e.live.m.Store(globalGID(g), struct{}{})
	require.NoError(t, e.l.orphans(ctx, &Stats{}))
	assert.True(t, e.prepared(t, g), "in flight here: left alone")
	regs, err := e.log.SharedGIDs(ctx, []string{g})
	require.NoError(t, err)
	assert.Empty(t, regs, "in flight here: no tombstone either")

	e.live.m.Delete(globalGID(g))
	st := &Stats{}
	require.NoError(t, e.l.orphans(ctx, st))
	assert.False(t, e.prepared(t, g), "not in flight, no registration: rolled back")
	assert.Equal(t, 1, st.Orphans)
	require.ErrorIs(t, e.logPrepared(t, g, ts), txntype.ErrMovedOn, "the tombstone refuses the batch's late prepared write")
	assert.Empty(t, e.ids(t))
}

// A registered shared transaction follows its members: left alone while any member is not
// final, committed once every member is committed; its marker is kept until then too (S4).
func TestSharedRegisteredFollowsMembers(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	ctx := context.Background()
	g, ts := e.prepare(t, "reg", 2)
	require.NoError(t, e.logPrepared(t, g, ts))

	require.NoError(t, e.l.orphans(ctx, &Stats{}))
	assert.True(t, e.prepared(t, g), "members prepared: their resolution decides, not the sweep")

	// The batch committed the shared transaction and logged one member committed; the other
	// member's final write is still to come.
	require.NoError(t, e.sql.CommitPrepared(ctx, "default", g))
	done, err := e.log.CommittedBatch(ctx, ts[:1], time.Time{})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, done)
	time.Sleep(5 * time.Millisecond) // past MarkerAge
	st := &Stats{}
	require.NoError(t, e.l.sweepMarkers(ctx, st))
	assert.Zero(t, st.Markers, "a member is not final: the shared marker stays")
	require.NoError(t, e.sql.CommitPrepared(ctx, "default", g), "the last member's idempotent commit still finds the marker")

	_, err = e.log.CommittedBatch(ctx, ts[1:], time.Time{})
	require.NoError(t, err)
	require.NoError(t, e.l.sweepMarkers(ctx, st))
	assert.Equal(t, 1, st.Markers, "every member final: the marker goes")
	regs, err := e.log.SharedGIDs(ctx, []string{g})
	require.NoError(t, err)
	assert.Empty(t, regs, "and the registration with it")
	assert.Equal(t, []string{"reg-0", "reg-1"}, e.ids(t))
}

// The sweep finishes a registered shared transaction whose members are all final: committed
// when they committed (their phase 2 ended before COMMIT PREPARED answered, say).
func TestSharedLeftoverCommitted(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	ctx := context.Background()
	g, ts := e.prepare(t, "left", 3)
	require.NoError(t, e.logPrepared(t, g, ts))
	done, err := e.log.CommittedBatch(ctx, ts, time.Time{})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true}, done)
	require.NoError(t, e.l.orphans(ctx, &Stats{}))
	assert.False(t, e.prepared(t, g))
	assert.Equal(t, []string{"left-0", "left-1", "left-2"}, e.ids(t), "committed, as its members")
}

// The model's finding S-F6: a committed row names the shared transaction as where its work
// is; a stray prepared gid of its own is a second copy and is rolled back, never committed.
func TestStrayOwnGIDOfSharedRowRolledBack(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	e.l.orphanAge = 0
	ctx := context.Background()
	g, ts := e.prepare(t, "stray", 2)
	require.NoError(t, e.logPrepared(t, g, ts))
	require.NoError(t, e.sql.CommitPrepared(ctx, "default", g))
	_, err := e.log.CommittedBatch(ctx, ts, time.Time{})
	require.NoError(t, err)
	own := ts[0].GID + "@default"
	_, err = e.sql.Run(ctx, "default", []txntype.Statement{{Database: "default", Statement: "INSERT INTO orders VALUES ('copy')"}}, own, false, nil)
	require.NoError(t, err)
	require.True(t, e.prepared(t, own))
	require.NoError(t, e.l.orphans(ctx, &Stats{}))
	assert.False(t, e.prepared(t, own))
	assert.Equal(t, []string{"stray-0", "stray-1"}, e.ids(t), "the stray copy was rolled back")
}

// A registered shared transaction whose registration cannot be read (a cut connection, here a
// registry that is not there) is left alone: it has no log row of its own, and the plain orphan
// rule would roll it back while its members are logged prepared.
func TestSharedGIDUnreadRegistryLeftAlone(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	ctx := context.Background()
	g, ts := e.prepare(t, "unread", 2)
	require.NoError(t, e.logPrepared(t, g, ts))

	registry := e.schema + ".coordinator_shared_gids"
	_, err := e.admin.Exec(ctx, "ALTER TABLE "+registry+" RENAME TO coordinator_shared_gids_away")
	require.NoError(t, err)
	st := &Stats{}
	err = e.l.orphans(ctx, st)
	_, rerr := e.admin.Exec(ctx, "ALTER TABLE "+e.schema+".coordinator_shared_gids_away RENAME TO coordinator_shared_gids")
	require.NoError(t, rerr)
	require.Error(t, err, "the registry could not be read")
	assert.True(t, e.prepared(t, g), "its members are prepared: not an orphan")
	assert.Zero(t, st.Orphans)

	require.NoError(t, e.l.orphans(ctx, &Stats{}))
	assert.True(t, e.prepared(t, g), "read again: the members decide")
}
