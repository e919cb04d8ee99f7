package sqltxn

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txntype"
)

// sendPgxBatch is what Run sent before it parsed a repeated text once: the statements as one pgx.Batch in
// QueryExecModeExec, every one of them parsed by the server. The baseline of BenchmarkRun and
// the reference of TestStatementsAnswerAsPgxBatch.
func sendPgxBatch(ctx context.Context, conn *pgx.Conn, s *statements) batchResults {
	b := &pgx.Batch{}
	for _, q := range s.items {
		b.Queue(q.sql, q.args...)
	}
	return conn.SendBatch(ctx, b)
}

// testConn is one session of the test schema, in QueryExecModeExec as the participant's pools.
func testConn(t *testing.T) (*pgx.Conn, string) {
	t.Helper()
	schema, dsn, _ := preparedCleanSchema(t)
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(context.Background(), `CREATE TABLE items (id int PRIMARY KEY, price numeric, tags jsonb, ok bool, at timestamptz, note text)`)
	require.NoError(t, err)
	return conn, schema
}

// readAll reads every answer of a round trip as Run does (rows decoded as values), then closes it.
func readAll(t *testing.T, br batchResults, n int) ([][]map[string]any, error) {
	t.Helper()
	var out [][]map[string]any
	for range n {
		res, _, err := readOne(br, "default")
		if err != nil {
			_ = br.Close()
			return out, err
		}
		out = append(out, res.Rows)
	}
	return out, br.Close()
}

// A text sent many times is parsed once, as one named statement, and every use of it is
// answered, with the same values, as when each use is parsed on its own (pgx's batch).
func TestStatementsAnswerAsPgxBatch(t *testing.T) {
	t.Parallel()
	conn, _ := testConn(t)
	ctx := context.Background()
	insert := "INSERT INTO items (id, price, tags, ok, at, note) VALUES ($1, $2, $3, $4, $5, $6) RETURNING *"
	build := func(base int) *statements {
		s := &statements{}
		s.Queue("BEGIN")
		for i := range 3 {
			var note any // NULL, and an empty string first (which is not NULL)
			if i == 0 {
				note = ""
			}
			s.Queue(insert, args([]any{json.Number(fmt.Sprint(base + i)), json.Number("12.50"), `{"a":[1,2]}`, true, "2026-12-05T10:00:00Z", note})...)
			s.Queue("SELECT count(*) AS n, sum(price) AS total FROM items")
		}
		s.Queue("SELECT $1::text AS once", "only once")
		s.Queue("COMMIT")
		return s
	}
	named := build(1)
	got, err := readAll(t, named.send(ctx, conn), len(named.items))
	require.NoError(t, err)
	var prepared []string
	rows, err := conn.Query(ctx, "SELECT statement FROM pg_prepared_statements WHERE name LIKE 'kpgtx_%' ORDER BY name")
	require.NoError(t, err)
	prepared, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{insert, "SELECT count(*) AS n, sum(price) AS total FROM items"}, prepared,
		"each repeated text parsed once, the others unnamed")

	_, err = conn.Exec(ctx, "TRUNCATE items")
	require.NoError(t, err)
	ref := build(1)
	want, err := readAll(t, sendPgxBatch(ctx, conn, ref), len(ref.items))
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// A use of a named statement that fails answers the server's error at that statement; the
// reads after it answer it too, nothing after it ran, and the session is usable again.
func TestStatementsFailureStopsAtItsStatement(t *testing.T) {
	t.Parallel()
	conn, _ := testConn(t)
	ctx := context.Background()
	s := &statements{}
	s.Queue("BEGIN")
	for _, id := range []string{"1", "2", "1", "3"} { // the third use violates the key
		s.Queue("INSERT INTO items (id) VALUES ($1)", id)
	}
	s.Queue("COMMIT")
	br := s.send(ctx, conn)
	for range 3 {
		_, err := br.Exec()
		require.NoError(t, err)
	}
	_, err := br.Exec()
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "23505", pe.Code)
	_, err = br.Exec()
	assert.ErrorIs(t, err, pe, "a read after the failure answers it")
	assert.ErrorIs(t, br.Close(), pe)
	_, err = conn.Exec(ctx, "ROLLBACK")
	require.NoError(t, err)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n))
	assert.Zero(t, n, "nothing of the failed transaction stays")

	// The same names again, in a later round of the session: no name is taken twice.
	again := &statements{round: 1}
	again.Queue("SELECT 1 AS one")
	again.Queue("SELECT 1 AS one")
	rows, err := readAll(t, again.send(ctx, conn), 2)
	require.NoError(t, err)
	assert.EqualValues(t, 1, rows[1][0]["one"])
}

// An empty string is sent as one, not as NULL, also when it is the round trip's only value.
func TestStatementsEmptyValueIsNotNull(t *testing.T) {
	t.Parallel()
	conn, _ := testConn(t)
	s := &statements{}
	s.Queue("SELECT $1::text IS NULL AS null, $1::text AS value", "")
	rows, err := readAll(t, s.send(context.Background(), conn), 1)
	require.NoError(t, err)
	assert.Equal(t, []map[string]any{{"null": false, "value": ""}}, rows[0])
}

// An argument that cannot be encoded sends nothing; every read answers the error.
func TestStatementsEncodeFailureSendsNothing(t *testing.T) {
	t.Parallel()
	conn, _ := testConn(t)
	s := &statements{}
	s.Queue("INSERT INTO items (id) VALUES ($1)", "1")
	s.Queue("INSERT INTO items (id) VALUES ($1)", make(chan int))
	br := s.send(context.Background(), conn)
	_, err := br.Exec()
	require.Error(t, err)
	require.Error(t, br.Close())
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT count(*) FROM items").Scan(&n))
	assert.Zero(t, n)
}

// BenchmarkRun: one database's part of a pipeline batch, 100 inserts of one text with their
// arguments, prepared and committed, sent with each repeated text parsed once (statements)
// against the same statements as one pgx batch (pgx-batch, every statement parsed).
//
//	go test -run '^$' -bench BenchmarkRun ./sqltxn/
func BenchmarkRun(b *testing.B) {
	ctx := context.Background()
	schema, dsn, admin := preparedCleanSchema(b)
	_, err := admin.Exec(ctx, "CREATE TABLE "+schema+".shipments (order_id text NOT NULL, input_partition int NOT NULL, input_offset bigint NOT NULL)")
	require.NoError(b, err)
	d, err := Open(ctx, map[string]string{"default": dsn}, Options{MaxConns: 1})
	require.NoError(b, err)
	b.Cleanup(d.Close)
	work := make([]txntype.Statement, 100)
	for i := range work {
		work[i] = txntype.Statement{Database: "default",
			Statement: "INSERT INTO shipments (order_id, input_partition, input_offset) VALUES ($1, $2, $3)",
			Args:      []any{fmt.Sprintf("o-%06d", i), json.Number("3"), json.Number(fmt.Sprint(1000 + i))}}
	}
	for _, v := range []struct {
		name string
		send func(context.Context, *pgx.Conn, *statements) batchResults
	}{{"statements", sendStatements}, {"pgx-batch", sendPgxBatch}} {
		runs := 0
		b.Run(v.name, func(b *testing.B) {
			runs++ // -count runs it again: gids of its own
			d.send = v.send
			b.Cleanup(func() { d.send = sendStatements })
			for i := 0; b.Loop(); i++ {
				gid := fmt.Sprintf("%s_%s_%d_%d", schema, v.name, runs, i)
				_, err := d.Run(ctx, "default", work, gid, false, nil)
				require.NoError(b, err)
				require.NoError(b, d.CommitPrepared(ctx, "default", gid))
			}
		})
	}
}
