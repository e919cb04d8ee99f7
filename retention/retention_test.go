package retention_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/logtest"
	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/retention"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// env is a log on a fresh schema of the real PostgreSQL, which is also the default database.
type env struct {
	log    *txlog.Log
	pool   *pgxpool.Pool
	sql    *sqltxn.Databases
	admin  *pgx.Conn
	schema string
	dsn    string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	l := logtest.New(t, sqltxn.Options{MaxConns: 4})
	return &env{log: l.Log, pool: l.Pool, sql: l.SQL, admin: l.Admin, schema: l.Schema, dsn: l.DSN}
}

// gid is the global gid of a test row.
func (e *env) gid(name string) string { return e.schema + "_" + name }

// row inserts a log row of the state, created and last changed age ago, with one event, and
// the SQL gids it names (its own gid on default, unless sqlGIDs says otherwise).
func (e *env) row(t *testing.T, name string, state txntype.State, age time.Duration, sqlGIDs ...string) {
	t.Helper()
	ctx := context.Background()
	g := e.gid(name)
	if len(sqlGIDs) == 0 {
		sqlGIDs = []string{txntype.SQLGIDFor(g, "default")}
	}
	gids := "["
	for i, s := range sqlGIDs {
		if i > 0 {
			gids += ","
		}
		gids += fmt.Sprintf(`{"database":"default","gid":%q}`, s)
	}
	gids += "]"
	_, err := e.pool.Exec(ctx, `INSERT INTO coordinator_transactions
    (gid, request_id, request_digest, instance_id, state, owner_instance, sql_gids, transactional_id, producer_id,
     created_at, updated_at, finished_at)
VALUES ($1, $2, '\x01', 'a', $3, 'a', $4::jsonb, 'tx-'||$2, 7,
     now() - $5 * interval '1 second', now() - $5 * interval '1 second', now() - $5 * interval '1 second')`,
		g, name, string(state), gids, age.Seconds())
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `INSERT INTO coordinator_events (gid, state, created_at) VALUES ($1, 'committing', now())`, g)
	require.NoError(t, err)
}

func (e *env) exists(t *testing.T, name string) (row bool, events int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM coordinator_transactions WHERE gid = $1),
    (SELECT count(*) FROM coordinator_events WHERE gid = $1)`, e.gid(name)).Scan(&row, &events))
	return row, events
}

// instance registers an instance that last beat silent ago and makes it the one that ran the rows.
func (e *env) instance(t *testing.T, id string, silent time.Duration, names ...string) {
	t.Helper()
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, `INSERT INTO coordinator_instances (instance_id, txn_id_prefix, pool_size, heartbeat_at)
VALUES ($1, 'p', 1, now() - $2 * interval '1 second') ON CONFLICT (instance_id) DO NOTHING`, id, silent.Seconds())
	require.NoError(t, err)
	for _, n := range names {
		_, err := e.pool.Exec(ctx, "UPDATE coordinator_transactions SET instance_id = $1 WHERE gid = $2", id, e.gid(n))
		require.NoError(t, err)
	}
}

// prepare leaves a prepared transaction of the gid on the database.
func (e *env) prepare(t *testing.T, gid string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'")
	require.NoError(t, err)
}

// records gives a row records on a partition of topic "t" up to offset max, written by its
// producer (7).
func (e *env) records(t *testing.T, name string, partition int32, max int64) {
	t.Helper()
	_, err := e.pool.Exec(context.Background(), `UPDATE coordinator_transactions SET kafka_records =
    jsonb_build_array(jsonb_build_object('topic', 't', 'partition', $2::int, 'offset', $3::bigint - 1),
                      jsonb_build_object('topic', 't', 'partition', $2::int, 'offset', $3::bigint))
WHERE gid = $1`, e.gid(name), partition, max)
	require.NoError(t, err)
}

// pruned is the retention's mark (R3) for the id and partition of topic "t"; -1: none.
func (e *env) pruned(t *testing.T, transactionalID string, partition int32) int64 {
	t.Helper()
	mark, ok, err := e.log.PrunedMark(context.Background(), transactionalID, "t", partition)
	require.NoError(t, err)
	if !ok {
		return -1
	}
	return mark
}

// kafka answers OpenOnPartitions from its maps: a partition in open answers with its list, one
// in unasked with its error, any other is not answered.
type kafka struct {
	open    map[kafkatxn.TopicPartition][]kafkatxn.OpenOnPartition
	unasked map[kafkatxn.TopicPartition]error
	mu      sync.Mutex
	asked   int
}

func (k *kafka) OpenOnPartitions(_ context.Context, parts []kafkatxn.TopicPartition) (map[kafkatxn.TopicPartition][]kafkatxn.OpenOnPartition, map[kafkatxn.TopicPartition]error) {
	k.mu.Lock()
	k.asked++
	k.mu.Unlock()
	open, unasked := map[kafkatxn.TopicPartition][]kafkatxn.OpenOnPartition{}, map[kafkatxn.TopicPartition]error{}
	for _, tp := range parts {
		if txns, ok := k.open[tp]; ok {
			open[tp] = txns
		} else if err, ok := k.unasked[tp]; ok {
			unasked[tp] = err
		} else {
			open[tp] = nil
		}
	}
	return open, unasked
}

const week = 7 * 24 * time.Hour

// R1 and R2 against PostgreSQL: the expired final rows go with their events, whichever instance
// ran them, leaving their marks (R3); rows in doubt, heuristic, young, recently changed, named by
// a registration, referenced by a marker or a prepared transaction of theirs (their own gid or
// their shared transaction's), or whose records a transaction of their producer holds open or a
// partition could not tell, stay.
func TestRetentionRemovesOnlyUnneededRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	old := week + time.Hour
	shared := e.schema + "_+a+s1@default"
	cases := []struct {
		name  string
		state txntype.State
		age   time.Duration
		setup func(t *testing.T, name string)
		kept  bool
	}{
		{name: "committed", state: txntype.StateCommitted, age: old},
		{name: "aborted", state: txntype.StateAborted, age: old},
		{name: "young", state: txntype.StateCommitted, age: week - time.Hour, kept: true},
		{name: "active", state: txntype.StateActive, age: old, kept: true},
		{name: "aborting", state: txntype.StateAborting, age: old, kept: true},
		{name: "prepared", state: txntype.StatePrepared, age: old, kept: true},
		{name: "committing", state: txntype.StateCommitting, age: old, kept: true},
		{name: "heuristic", state: txntype.StateHeuristic, age: old, kept: true},
		{name: "heuristic_mixed", state: txntype.StateHeuristicMixed, age: old, kept: true},
		{name: "changed recently", state: txntype.StateCommitted, age: old, kept: true, setup: func(t *testing.T, name string) {
			_, err := e.pool.Exec(ctx, "UPDATE coordinator_transactions SET updated_at = now() WHERE gid = $1", e.gid(name))
			require.NoError(t, err)
		}},
		{name: "marker", state: txntype.StateCommitted, age: old, kept: true, setup: func(t *testing.T, name string) {
			_, err := e.pool.Exec(ctx, "INSERT INTO coordinator_markers (gid) VALUES ($1)", txntype.SQLGIDFor(e.gid(name), "default"))
			require.NoError(t, err)
		}},
		{name: "prepared gid", state: txntype.StateCommitted, age: old, kept: true, setup: func(t *testing.T, name string) {
			e.prepare(t, txntype.SQLGIDFor(e.gid(name), "default"))
		}},
		{name: "registered member", state: txntype.StateCommitted, age: old, kept: true, setup: func(t *testing.T, name string) {
			_, err := e.pool.Exec(ctx, "INSERT INTO coordinator_shared_gids (gid, members) VALUES ($1, $2)",
				e.schema+"_+a+reg@default", []string{e.gid(name)})
			require.NoError(t, err)
		}},
		// Any instance's rows: what keeps a row is read from the log and the participants.
		{name: "another instance's", state: txntype.StateCommitted, age: old, setup: func(t *testing.T, name string) {
			e.instance(t, "b", 0, name)
		}},
		{name: "unregistered instance's", state: txntype.StateCommitted, age: old, setup: func(t *testing.T, name string) {
			_, err := e.pool.Exec(ctx, "UPDATE coordinator_transactions SET instance_id = 'gone' WHERE gid = $1", e.gid(name))
			require.NoError(t, err)
		}},
		// R2: rows naming records, each on a partition of its own (see k below).
		{name: "records, nothing open", state: txntype.StateCommitted, age: old, setup: func(t *testing.T, name string) {
			e.records(t, name, 0, 10)
		}},
		{name: "records, open on them", state: txntype.StateCommitted, age: old, kept: true, setup: func(t *testing.T, name string) {
			e.records(t, name, 1, 10)
		}},
		{name: "records, open from the last", state: txntype.StateAborted, age: old, kept: true, setup: func(t *testing.T, name string) {
			e.records(t, name, 2, 10)
		}},
		{name: "records, open after them", state: txntype.StateCommitted, age: old, setup: func(t *testing.T, name string) {
			e.records(t, name, 3, 10)
		}},
		{name: "records, another producer open", state: txntype.StateCommitted, age: old, setup: func(t *testing.T, name string) {
			e.records(t, name, 4, 10)
		}},
		{name: "records, partition not answering", state: txntype.StateCommitted, age: old, kept: true, setup: func(t *testing.T, name string) {
			e.records(t, name, 5, 10)
		}},
	}
	for _, c := range cases {
		e.row(t, c.name, c.state, c.age)
		if c.setup != nil {
			c.setup(t, c.name)
		}
	}
	// Two members of a shared transaction whose marker is still there, without a registration.
	e.row(t, "shared-a", txntype.StateCommitted, old, shared)
	e.row(t, "shared-b", txntype.StateCommitted, old, shared)
	_, err := e.pool.Exec(ctx, "INSERT INTO coordinator_markers (gid) VALUES ($1)", shared)
	require.NoError(t, err)

	tp := func(p int32) kafkatxn.TopicPartition { return kafkatxn.TopicPartition{Topic: "t", Partition: p} }
	k := &kafka{open: map[kafkatxn.TopicPartition][]kafkatxn.OpenOnPartition{
		tp(1): {{ProducerID: 7, StartOffset: 9}},  // a hanging transaction holding the row's records
		tp(2): {{ProducerID: 7, StartOffset: 10}}, // from its last record: still the row's
		tp(3): {{ProducerID: 7, StartOffset: 11}}, // a later transaction of the same id
		tp(4): {{ProducerID: 8, StartOffset: 0}},  // another producer's
	}, unasked: map[kafkatxn.TopicPartition]error{tp(5): errors.New("no leader")}}
	s := retention.New(retention.Config{Retention: week, Batch: 4, Pause: time.Millisecond}, e.log, e.sql, k)
	st, err := s.RunOnce(ctx)
	require.NoError(t, err, "a partition not answering keeps its rows, it does not fail the pass")
	assert.Equal(t, 7, st.Removed, "committed, aborted, other instances' rows, and records nothing holds open")
	assert.Equal(t, 7, st.Events)
	assert.Equal(t, 7, st.Kept, "marker, prepared gid, the shared pair, three for Kafka (young, recent and registered rows are not candidates)")
	assert.Equal(t, 3, st.KeptKafka)
	// R3: the removals left their marks; rows kept left none.
	for p, want := range map[int32]int64{0: 10, 1: -1, 2: -1, 3: 10, 4: 10, 5: -1} {
		assert.Equal(t, want, e.pruned(t, "tx-"+map[int32]string{0: "records, nothing open", 1: "records, open on them",
			2: "records, open from the last", 3: "records, open after them", 4: "records, another producer open",
			5: "records, partition not answering"}[p], p), "mark on t/%d", p)
	}

	for _, c := range cases {
		row, events := e.exists(t, c.name)
		if c.kept {
			assert.True(t, row, "%s: kept", c.name)
			assert.Equal(t, 1, events, "%s: its events kept", c.name)
		} else {
			assert.False(t, row, "%s: removed", c.name)
			assert.Zero(t, events, "%s: its events removed with it", c.name)
		}
	}
	for _, n := range []string{"shared-a", "shared-b"} {
		row, _ := e.exists(t, n)
		assert.True(t, row, "%s: its shared transaction's marker is still there", n)
	}

	// Once the references are gone, the rows go too.
	_, err = e.pool.Exec(ctx, "DELETE FROM coordinator_markers")
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, "DELETE FROM coordinator_shared_gids")
	require.NoError(t, err)
	_, err = e.admin.Exec(ctx, "ROLLBACK PREPARED '"+txntype.SQLGIDFor(e.gid("prepared gid"), "default")+"'")
	require.NoError(t, err)
	// Without Kafka to ask, rows naming records stay.
	s = retention.New(retention.Config{Retention: week, Batch: 4, Pause: time.Millisecond}, e.log, e.sql, nil)
	st, err = s.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, 5, st.Removed, "marker, prepared gid, registered member, the shared pair")
	assert.Equal(t, 3, st.KeptKafka, "no Kafka to ask")
	// Once the partitions answer and nothing holds the records open, they go too.
	k = &kafka{}
	s = retention.New(retention.Config{Retention: week, Batch: 4, Pause: time.Millisecond}, e.log, e.sql, k)
	st, err = s.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, st.Removed)
	assert.Equal(t, int64(10), e.pruned(t, "tx-records, open on them", 1))
	for _, n := range []string{"marker", "prepared gid", "registered member", "shared-a", "shared-b",
		"records, open on them", "records, open from the last", "records, partition not answering"} {
		row, events := e.exists(t, n)
		assert.False(t, row, n)
		assert.Zero(t, events, n)
	}
	for _, n := range []string{"young", "active", "aborting", "prepared", "committing", "heuristic", "heuristic_mixed", "changed recently"} {
		row, _ := e.exists(t, n)
		assert.True(t, row, n)
	}
	size, ok := s.LastSize()
	require.True(t, ok, "a pass samples the log's size")
	assert.Positive(t, size.Bytes)
	assert.False(t, size.OldestFinal.IsZero(), "young and changed recently are final")
}

// A retention of 0 keeps everything; the passes still sample the log's size.
func TestRetentionZeroKeepsEverything(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for i := range 5 {
		e.row(t, fmt.Sprint("r", i), txntype.StateCommitted, 1000*week)
	}
	s := retention.New(retention.Config{Retention: 0}, e.log, e.sql, nil)
	st, err := s.RunOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Removed)
	assert.Zero(t, st.Batches)
	for i := range 5 {
		row, events := e.exists(t, fmt.Sprint("r", i))
		assert.True(t, row)
		assert.Equal(t, 1, events)
	}
	_, ok := s.LastSize()
	assert.True(t, ok)
}

// countingLog records the size of every removal.
type countingLog struct {
	*txlog.Log
	mu      sync.Mutex
	removes []int
}

func (c *countingLog) Remove(ctx context.Context, gids []string, age time.Duration) (int64, int64, error) {
	c.mu.Lock()
	c.removes = append(c.removes, len(gids))
	c.mu.Unlock()
	return c.Log.Remove(ctx, gids, age)
}

// The rate is bounded: no statement removes more than a batch, and a pass goes past rows it
// must keep however many there are at the head (its cursor), reaching every expired row.
func TestRetentionBoundedBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for i := range 12 { // the oldest: kept for their markers
		name := fmt.Sprintf("m%02d", i)
		e.row(t, name, txntype.StateCommitted, 3*week)
		_, err := e.pool.Exec(ctx, "INSERT INTO coordinator_markers (gid) VALUES ($1)", txntype.SQLGIDFor(e.gid(name), "default"))
		require.NoError(t, err)
	}
	for i := range 25 {
		e.row(t, fmt.Sprintf("c%02d", i), txntype.StateCommitted, 2*week)
	}
	for i := range 7 {
		e.row(t, fmt.Sprintf("a%02d", i), txntype.StateAborted, 2*week)
	}
	l := &countingLog{Log: e.log}
	s := retention.New(retention.Config{Retention: week, Batch: 5, Pause: time.Millisecond}, l, e.sql, nil)
	st, err := s.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, 32, st.Removed)
	assert.Equal(t, 12, st.Kept)
	assert.Equal(t, 2+8, st.Batches, "pages of 5: 7 aborted rows, then 37 committed ones")
	for _, n := range l.removes {
		assert.LessOrEqual(t, n, 5, "at most a batch per statement")
	}
	var left int
	require.NoError(t, e.pool.QueryRow(ctx, "SELECT count(*) FROM coordinator_transactions").Scan(&left))
	assert.Equal(t, 12, left)
	assert.Equal(t, int64(32), s.Totals().Removed)
}

// An id reused after its row was removed is a new transaction: Begin creates it afresh, with a
// history of its own.
func TestRetentionReusedIDIsNew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	epoch, err := txlog.BumpEpoch(ctx, e.pool, "a")
	require.NoError(t, err)
	begin := func(digest byte) (*txntype.Transaction, bool) {
		t.Helper()
		tr, created, err := e.log.Begin(ctx, &txntype.Transaction{ID: "reused", GID: e.gid("reused"), Instance: "a",
			State: txntype.StateActive, Owner: "a", OwnerEpoch: epoch, Digest: []byte{digest},
			SQLGIDs: []txntype.SQLGID{{Database: "default", GID: txntype.SQLGIDFor(e.gid("reused"), "default")}}})
		require.NoError(t, err)
		return tr, created
	}
	first, created := begin(1)
	require.True(t, created)
	require.NoError(t, e.log.Transition(ctx, first, txntype.StateCommitting))
	require.NoError(t, e.log.Committed(ctx, first, time.Time{}))
	_, created = begin(2)
	require.False(t, created, "within the retention the id is the same transaction")

	_, err = e.pool.Exec(ctx, `UPDATE coordinator_transactions SET created_at = created_at - interval '8 days',
    updated_at = updated_at - interval '8 days', finished_at = finished_at - interval '8 days'`)
	require.NoError(t, err)
	st, err := retention.New(retention.Config{Retention: week}, e.log, e.sql, nil).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Removed)

	second, created := begin(2)
	assert.True(t, created, "after its removal the id is a new transaction")
	assert.Equal(t, txntype.StateActive, second.State)
	assert.Equal(t, []byte{2}, second.Digest)
	events, err := e.log.Events(ctx, second.GID)
	require.NoError(t, err)
	require.Len(t, events, 1, "the history is the new transaction's only: %v", events)
	assert.Equal(t, txntype.StateActive, events[0].State)
}
