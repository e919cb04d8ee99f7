package sqltxn

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/pgtest"
	"github.com/kpgtx/coordinator/txntype"
)

// testDatabases opens the participant on a fresh schema of the real PostgreSQL (DATABASE_URL),
// with one connection, so that every Run reuses the same session unless it was discarded.
func testDatabases(t *testing.T, o Options) (*Databases, *pgx.Conn, string) {
	t.Helper()
	ctx := context.Background()
	schema, dsn, admin := preparedCleanSchema(t)
	_, err := admin.Exec(ctx, "CREATE TABLE "+schema+".orders (id text PRIMARY KEY)")
	require.NoError(t, err)
	if o.MaxConns == 0 {
		o.MaxConns = 1
	}
	d, err := Open(ctx, map[string]string{"default": dsn}, o)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d, admin, schema
}

// preparedCleanSchema is pgtest.Schema, with every prepared transaction of the schema's gids
// rolled back at the end.
func preparedCleanSchema(t testing.TB) (string, string, *pgx.Conn) {
	t.Helper()
	schema, dsn, admin := pgtest.Schema(t)
	t.Cleanup(func() {
		ctx := context.Background()
		rows, _ := admin.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1", schema+"%")
		gids, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, g := range gids {
			_, _ = admin.Exec(ctx, "ROLLBACK PREPARED "+quoteGID(g))
		}
	})
	return schema, dsn, admin
}

func stmts(sqls ...string) []txntype.Statement {
	out := make([]txntype.Statement, len(sqls))
	for i, s := range sqls {
		out[i] = txntype.Statement{Database: "default", Statement: s}
	}
	return out
}

// The guard after every client statement catches a statement that ended the transaction, even
// when validation let it through: the marker row and PREPARE never run outside it, the outcome
// is a confinement breach with the statement's index, and the session is discarded.
func TestRunGuardCatchesLeftTransaction(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		stmt      string
		committed bool // the insert before it is committed (the evidence an operator gets)
	}{
		{"commit", "COMMIT", true},
		{"end with comment", "END--x", true},
		{"commit and chain", "COMMIT AND CHAIN", true},
		{"rollback", "ROLLBACK", false},
		{"abort", "ABORT/**/", false},
		{"prepare under a foreign gid", "PREPARE TRANSACTION 'foreign-guard-test'", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, admin, schema := testDatabases(t, Options{})
			ctx := context.Background()
			before := backendPID(t, d)
			gid := schema + "_g@default"
			// In the middle, its own guard catches it; last, the marker insert's condition does.
			middle := stmts("INSERT INTO orders VALUES ('a')", tt.stmt, "INSERT INTO orders VALUES ('b')")
			last := stmts("INSERT INTO orders VALUES ('a')", tt.stmt)
			for _, run := range []struct {
				stmts    []txntype.Statement
				onePhase bool
			}{{middle, false}, {middle, true}, {last, false}, {last, true}} {
				_, err := d.Run(ctx, "default", run.stmts, gid, run.onePhase, nil)
				require.ErrorIs(t, err, txntype.ErrConfinementBreach)
				assert.Contains(t, err.Error(), "statement 1")
				var markers, prepared, b int
				require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".coordinator_markers").Scan(&markers))
				require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1", gid).Scan(&prepared))
				require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".orders WHERE id = 'b'").Scan(&b))
				assert.Zero(t, markers, "no marker row outside the transaction")
				assert.Zero(t, prepared, "nothing prepared under the coordinator's gid")
				assert.Zero(t, b, "nothing after the statement ran")
				_, _ = admin.Exec(ctx, "ROLLBACK PREPARED 'foreign-guard-test'")
				_, _ = admin.Exec(ctx, "DELETE FROM "+schema+".orders")
			}
			assert.NotEqual(t, before, backendPID(t, d), "the session was discarded")
		})
	}
}

// A statement role: client statements run as it; the marker row is still written.
func TestRunAsStatementRole(t *testing.T) {
	t.Parallel()
	d0, admin, schema := testDatabases(t, Options{})
	dsn := d0.dbs["default"].pool.Config().ConnString()
	d0.Close()
	ctx := context.Background()
	role := schema + "_client"
	d := withStatementRole(t, admin, dsn, schema, role)

	res, err := d.Run(ctx, "default", stmts("INSERT INTO orders VALUES ('r') RETURNING current_user AS who"), schema+"_r@default", true, nil)
	require.NoError(t, err)
	assert.Equal(t, role, res[0].Rows[0]["who"])
	_, err = d.Run(ctx, "default", stmts("DELETE FROM coordinator_markers"), schema+"_d@default", true, nil)
	require.Error(t, err)
	assert.Equal(t, "42501", sqlstate(err), "the role has no rights on the coordinator's tables")

	// Shared: every member runs as the role, a member's failure leaves it out, and the shared
	// marker is written with the login's role.
	gid := schema + "_+s@default"
	run := d.RunShared(ctx, "default", [][]txntype.Statement{
		stmts("INSERT INTO orders VALUES ('s1') RETURNING current_user AS who"),
		stmts("DELETE FROM coordinator_markers"),
		stmts("INSERT INTO orders VALUES ('s2') RETURNING current_user AS who"),
	}, gid, nil)
	require.NoError(t, run.Err)
	assert.Equal(t, role, run.Results[0][0].Rows[0]["who"])
	assert.Equal(t, "42501", txntype.AsFailure(run.Excluded[1]).SQLState)
	assert.Equal(t, role, run.Results[2][0].Rows[0]["who"], "the role is set again after a member left out")
	require.NoError(t, d.CommitPrepared(ctx, "default", gid))

	// A role that could write the marker table is refused at startup.
	_, err = admin.Exec(ctx, "GRANT DELETE ON "+schema+".coordinator_markers TO "+role)
	require.NoError(t, err)
	_, err = Open(ctx, map[string]string{"default": dsn}, Options{StatementRole: role})
	require.ErrorIs(t, err, ErrStatementRole)
	_, err = Open(ctx, map[string]string{"default": dsn}, Options{StatementRole: schema + "_nobody"})
	require.ErrorIs(t, err, ErrStatementRole)
}

// Session state a client statement leaves behind (through a function, which validation cannot
// see into) never reaches the next request on the same connection.
func TestRunResetsSession(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	_, err := admin.Exec(ctx, `CREATE FUNCTION `+schema+`.poison(listen boolean) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('statement_timeout', '123s', false);
  PERFORM set_config('default_transaction_read_only', 'on', false);
  PERFORM pg_advisory_lock(4242);
  IF listen THEN
    EXECUTE 'LISTEN leak'; -- PREPARE TRANSACTION refuses a transaction that listened
  END IF;
  RETURN 1;
END$$`)
	require.NoError(t, err)
	// Reset in the same round trip as COMMIT, and as PREPARE TRANSACTION: the session is reset,
	// not replaced.
	before := backendPID(t, d)
	defer func() { assert.Equal(t, before, backendPID(t, d), "the same session, reset") }()
	for _, onePhase := range []bool{true, false} {
		_, err = d.Run(ctx, "default", stmts(fmt.Sprintf("SELECT poison(%t)", onePhase)), fmt.Sprintf("%s_p%t@default", schema, onePhase), onePhase, nil)
		require.NoError(t, err)
		assertReset(t, d, fmt.Sprintf("%s_%t", schema, onePhase))
	}
}

// A client's SET LOCAL (here through set_config(…, true)) ends with its statements: the
// coordinator's marker row, PREPARE and one-phase COMMIT run with the session's own settings. A
// deferred trigger on the marker table runs inside PREPARE or COMMIT: it records the settings
// that statement sees, and sleeps past the client's 1 ms statement_timeout.
func TestRunClientSettingsEndWithItsStatements(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	_, err := admin.Exec(ctx, `CREATE TABLE `+schema+`.seen (gid text, sync text, timeout text, lock text);
CREATE FUNCTION `+schema+`.record_settings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO `+schema+`.seen VALUES (NEW.gid, current_setting('synchronous_commit'),
    current_setting('statement_timeout'), current_setting('lock_timeout'));
  PERFORM pg_sleep(0.02);
  RETURN NULL;
END$$;
CREATE CONSTRAINT TRIGGER record_settings AFTER INSERT ON `+schema+`.coordinator_markers
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+schema+`.record_settings()`)
	require.NoError(t, err)
	// The timeout last: no statement of the client's own runs under it.
	client := stmts("INSERT INTO orders VALUES ('x' || pg_catalog.txid_current())",
		"SELECT pg_catalog.set_config('synchronous_commit', 'off', true)",
		"SELECT pg_catalog.set_config('lock_timeout', '1', true)",
		"SELECT pg_catalog.set_config('statement_timeout', '1', true)")
	var want [3]string
	require.NoError(t, admin.QueryRow(ctx, `SELECT current_setting('synchronous_commit'),
  current_setting('statement_timeout'), current_setting('lock_timeout')`).Scan(&want[0], &want[1], &want[2]))
	require.NotEqual(t, "off", want[0], "the test's PostgreSQL must commit synchronously")
	for _, onePhase := range []bool{true, false} {
		gid := fmt.Sprintf("%s_s%t@default", schema, onePhase)
		_, err := d.Run(ctx, "default", client, gid, onePhase, nil)
		require.NoError(t, err, "one phase: %t", onePhase)
		if !onePhase {
			require.NoError(t, d.CommitPrepared(ctx, "default", gid))
		}
		var got [3]string
		require.NoError(t, admin.QueryRow(ctx, "SELECT sync, timeout, lock FROM "+schema+".seen WHERE gid = $1", gid).
			Scan(&got[0], &got[1], &got[2]))
		assert.Equal(t, want, got, "one phase: %t: the settings PREPARE or COMMIT ran with", onePhase)
	}
}

// A statement that makes the transaction read-only (validation refuses the visible forms; a
// function can still do it) is refused by its guard, with a clear error, alone (both phases) and
// in a shared transaction, where it alone is left out and the next member's writes commit:
// the coordinator's marker row must be written in the transaction.
func TestRunClientReadOnlyRefused(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	for i, ro := range []string{"SELECT pg_catalog.set_config('transaction_read_only', 'on', true)", "SET TRANSACTION READ ONLY"} {
		for _, onePhase := range []bool{true, false} {
			id := fmt.Sprintf("ro%d%t", i, onePhase)
			_, err := d.Run(ctx, "default", stmts("INSERT INTO orders VALUES ('"+id+"')", ro), schema+"_"+id+"@default", onePhase, nil)
			require.ErrorIs(t, err, errReadOnly, "%s, one phase: %t", ro, onePhase)
			assert.Contains(t, err.Error(), "statement 1")
			assert.Equal(t, txntype.ClassAbortable, txntype.AsFailure(err).Class)
			assert.NotErrorIs(t, err, txntype.ErrConfinementBreach)
			assert.NotErrorIs(t, err, txntype.ErrCommitUnknown, "the server refused: a one-phase COMMIT did not happen")
		}
	}
	gid := schema + "_+ro@default"
	run := d.RunShared(ctx, "default", [][]txntype.Statement{
		stmts("INSERT INTO orders VALUES ('s1')", "SELECT pg_catalog.set_config('transaction_read_only', 'on', true)"),
		stmts("INSERT INTO orders VALUES ('s2')"),
	}, gid, nil)
	require.NoError(t, run.Err)
	require.ErrorIs(t, run.Excluded[0], errReadOnly)
	require.Nil(t, run.Excluded[1], "the next member writes")
	require.NoError(t, d.CommitPrepared(ctx, "default", gid))
	assert.Equal(t, []string{"s2"}, committedIDs(t, admin, schema))
}

// A request may choose its transaction's isolation level: the leading SET TRANSACTION runs
// before the coordinator's first query, which PostgreSQL requires, and the statements after it
// see that level; alone it holds too, and with a statement role.
func TestRunIsolationLevel(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	check := func(t *testing.T, d *Databases, id string) {
		t.Helper()
		for _, onePhase := range []bool{true, false} {
			gid := fmt.Sprintf("%s_%s%t@default", schema, id, onePhase)
			res, err := d.Run(ctx, "default", stmts("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
				"SET LOCAL transaction_deferrable = on",
				fmt.Sprintf("INSERT INTO orders VALUES ('%s%t')", id, onePhase),
				"SELECT current_setting('transaction_isolation') AS iso"), gid, onePhase, nil)
			require.NoError(t, err, "one phase: %t", onePhase)
			require.Len(t, res, 4, "a result for every statement, in order")
			assert.Equal(t, "serializable", res[3].Rows[0]["iso"])
			if !onePhase {
				require.NoError(t, d.CommitPrepared(ctx, "default", gid))
			}
			_, err = d.Run(ctx, "default", stmts("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"), gid+"only", onePhase, nil)
			require.NoError(t, err, "a request of isolation levels only")
			if !onePhase {
				require.NoError(t, d.CommitPrepared(ctx, "default", gid+"only"))
			}
		}
	}
	check(t, d, "i")

	check(t, withStatementRole(t, admin, d.dbs["default"].pool.Config().ConnString(), schema, schema+"_iso"), "r")
	assert.ElementsMatch(t, []string{"itrue", "ifalse", "rtrue", "rfalse"}, committedIDs(t, admin, schema))
}

// withStatementRole opens the participant on dsn with a fresh statement role that may read and
// insert into schema's orders table.
func withStatementRole(t *testing.T, admin *pgx.Conn, dsn, schema, role string) *Databases {
	t.Helper()
	ctx := context.Background()
	_, err := admin.Exec(ctx, "CREATE ROLE "+role+" NOLOGIN; GRANT USAGE ON SCHEMA "+schema+" TO "+role+
		"; GRANT SELECT, INSERT ON "+schema+".orders TO "+role)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	d, err := Open(ctx, map[string]string{"default": dsn}, Options{MaxConns: 1, StatementRole: role})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// assertReset checks that the next request on the (one) connection sees no session state left.
func assertReset(t *testing.T, d *Databases, gidPrefix string) {
	t.Helper()
	ctx := context.Background()
	for i := range 3 {
		res, err := d.Run(ctx, "default", stmts(`SELECT current_setting('statement_timeout') AS st,
  current_setting('default_transaction_read_only') AS ro,
  (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS locks,
  (SELECT count(*) FROM pg_listening_channels()) AS listens`), fmt.Sprintf("%s_c%d@default", gidPrefix, i), true, nil)
		require.NoError(t, err)
		row := res[0].Rows[0]
		assert.Equal(t, "0", row["st"])
		assert.Equal(t, "off", row["ro"])
		assert.EqualValues(t, 0, row["locks"])
		assert.EqualValues(t, 0, row["listens"])
	}
}

// A failing statement's session is reset too (after its ROLLBACK, off the request's path).
func TestRunResetsSessionAfterFailure(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	_, err := admin.Exec(ctx, `CREATE FUNCTION `+schema+`.poison_fail() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('statement_timeout', '123s', false);
  PERFORM pg_advisory_lock(4243);
  RETURN 1 / 0;
END$$`)
	require.NoError(t, err)
	_, err = d.Run(ctx, "default", stmts("SELECT poison_fail()"), schema+"_f@default", false, nil)
	require.Error(t, err)
	assert.Equal(t, "22012", sqlstate(err))
	assertReset(t, d, schema)
}

func backendPID(t *testing.T, d *Databases) uint32 {
	t.Helper()
	pool, err := d.Pool("default")
	require.NoError(t, err)
	c, err := pool.Acquire(context.Background())
	require.NoError(t, err)
	defer c.Release()
	return c.Conn().PgConn().PID()
}
