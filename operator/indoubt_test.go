package operator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/logtest"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// nothingInFlight is the coordinator of these tests: no request runs.
type nothingInFlight struct{}

func (nothingInFlight) InFlight(string) bool                  { return false }
func (nothingInFlight) TakeQuarantined(string) (string, bool) { return "", false }

type deskEnv struct {
	d      *Desk
	admin  *pgx.Conn
	log    *txlog.Log
	sql    *sqltxn.Databases
	schema string
	epoch  int64
}

// newDeskEnv is a desk (and its recovery loop) over a fresh schema of the real PostgreSQL, as
// log and as the default database, for instance "a".
func newDeskEnv(t *testing.T) *deskEnv {
	t.Helper()
	ctx := context.Background()
	l := logtest.New(t, sqltxn.Options{})
	schema, admin, pool, log, sql := l.Schema, l.Admin, l.Pool, l.Log, l.SQL
	_, err := admin.Exec(ctx, "CREATE TABLE "+schema+".orders (id text PRIMARY KEY)")
	require.NoError(t, err)
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	loop := recovery.New(recovery.Config{Instance: "a", GIDPrefix: schema, MarkerAge: time.Millisecond}, nil, log, sql, nil, nothingInFlight{})
	d := New(Config{Instance: "a", GIDPrefix: schema, Log: log, SQL: sql, Coord: nothingInFlight{}, Loop: loop})
	return &deskEnv{d: d, admin: admin, log: log, sql: sql, schema: schema, epoch: epoch}
}

// shared runs n requests' inserts in one shared transaction, prepared, and returns its gid and
// the requests' rows, begun in the log (active, their own gids). logged: the batch's prepared
// write is logged too (every row prepared naming the shared gid, the gid registered).
func (e *deskEnv) shared(t *testing.T, name string, n int, logged bool) (string, []*txntype.Transaction) {
	t.Helper()
	ctx := context.Background()
	g := e.schema + "_+a+" + name + "@default"
	var members [][]txntype.Statement
	var ts []*txntype.Transaction
	reg := txntype.SharedGID{Database: "default", GID: g}
	for i := range n {
		id := fmt.Sprintf("%s-%d", name, i)
		members = append(members, []txntype.Statement{{Database: "default", Statement: "INSERT INTO orders VALUES ($1)", Args: []any{id}}})
		gid := e.schema + "_" + id
		tr, created, err := e.log.Begin(ctx, &txntype.Transaction{ID: id, GID: gid, Instance: "a", State: txntype.StateActive,
			Owner: "a", OwnerEpoch: e.epoch, Digest: []byte{1}, SQLGIDs: []txntype.SQLGID{{Database: "default", GID: gid + "@default"}}})
		require.NoError(t, err)
		require.True(t, created)
		tr.Kafka = &txntype.KafkaState{KafkaIDs: txntype.KafkaIDs{TransactionalID: "tx", ProducerID: 1, ProducerEpoch: 1},
			Records: []txntype.RecordOffset{{Topic: "t", Offset: int64(i)}}}
		tr.SQLGIDs = []txntype.SQLGID{{Database: "default", GID: g}}
		reg.Members = append(reg.Members, tr.GID)
		ts = append(ts, tr)
	}
	run := e.sql.RunShared(ctx, "default", members, g, nil)
	require.NoError(t, run.Err)
	if logged {
		require.NoError(t, e.log.PreparedBatch(ctx, ts, []txntype.SharedGID{reg}))
	}
	return g, ts
}

// The in-doubt view: a shared prepared transaction that no row names is an orphan (the sweep
// rolls it back), and one whose members are in doubt is shown under each of them.
func TestSharedInDoubtView(t *testing.T) {
	t.Parallel()
	e := newDeskEnv(t)
	orphan, _ := e.shared(t, "lost", 2, false)
	named, ts := e.shared(t, "named", 2, true)

	v, err := e.d.InDoubt(context.Background())
	require.NoError(t, err)
	byKey := map[string]*InDoubtEntry{}
	for _, en := range v.Entries {
		byKey[en.Key] = en
	}
	o := byKey[globalGID(orphan)]
	require.NotNil(t, o, "the unnamed shared transaction is listed; entries %v", v.Entries)
	assert.Equal(t, IssueOrphan, o.Issue)
	require.Len(t, o.Postgres, 1)
	assert.Equal(t, orphan, o.Postgres[0].GID)
	assert.Nil(t, byKey[globalGID(named)], "a named shared transaction is not an entry of its own")
	for _, tr := range ts {
		en := byKey[tr.GID]
		require.NotNil(t, en, "member %s is listed", tr.GID)
		require.Len(t, en.Postgres, 1, "member %s shows the shared transaction holding its work", tr.GID)
		assert.Equal(t, named, en.Postgres[0].GID)
	}
}
