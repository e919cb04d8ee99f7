package sqltxn

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/pgtest"
	"github.com/kpgtx/coordinator/txntype"
)

// ownTablesDatabases opens the participant on a fresh schema that also holds a stand-in for the
// log's table (as the default database does) with one row, a marker row, and client code that
// writes them without naming them in the statement: a function, a trigger, a deferred trigger.
func ownTablesDatabases(t testing.TB) (*Databases, *pgx.Conn, string) {
	t.Helper()
	ctx := context.Background()
	schema, dsn, admin := preparedCleanSchema(t)
	for _, q := range []string{
		"CREATE TABLE orders (id text PRIMARY KEY)",
		"CREATE TABLE coordinator_transactions (gid text PRIMARY KEY, state text NOT NULL)",
		"INSERT INTO coordinator_transactions VALUES ('other', 'prepared')",
		markerDDL,
		"INSERT INTO coordinator_markers (gid) VALUES ('kept')",
		`CREATE FUNCTION rewrite_log() RETURNS int LANGUAGE plpgsql AS $$
BEGIN UPDATE coordinator_transactions SET state = 'committed'; RETURN 1; END$$`,
		`CREATE FUNCTION forget_markers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN DELETE FROM coordinator_markers; RETURN NEW; END$$`,
		"CREATE TABLE audited (id text PRIMARY KEY)",
		"CREATE TRIGGER forget AFTER INSERT ON audited FOR EACH ROW EXECUTE FUNCTION forget_markers()",
		"CREATE TABLE audited_later (id text PRIMARY KEY)",
		`CREATE CONSTRAINT TRIGGER forget_later AFTER INSERT ON audited_later DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION forget_markers()`,
	} {
		_, err := admin.Exec(ctx, "SET search_path = "+schema+"; "+q)
		require.NoError(t, err, q)
	}
	d, err := Open(ctx, map[string]string{"default": dsn}, Options{MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d, admin, schema
}

// Client code that writes the coordinator's own tables without naming them (a DO block, a
// function, a trigger, a deferred trigger that would have fired at PREPARE) is refused where it
// writes, alone and in a shared transaction, and nothing of its transaction commits: the log
// row and the markers stay as they were. The coordinator's own marker rows are written.
func TestRunClientWritesToOwnTablesRefused(t *testing.T) {
	t.Parallel()
	d, admin, schema := ownTablesDatabases(t)
	ctx := context.Background()
	clientCode := []struct {
		name, stmt string
		deferred   bool // refused at the end of the statements, not at the statement
	}{
		{"DO block deleting the log", "DO $$BEGIN DELETE FROM coordinator_transactions; END$$", false},
		{"function rewriting the log", "SELECT rewrite_log()", false},
		{"DO block forging a marker", "DO $$BEGIN INSERT INTO coordinator_markers (gid) VALUES ('forged'); END$$", false},
		{"DO block emptying the markers", "DO $$BEGIN TRUNCATE coordinator_markers; END$$", false},
		{"trigger deleting the markers", "INSERT INTO audited VALUES ('a')", false},
		{"deferred trigger deleting the markers", "INSERT INTO audited_later VALUES ('a')", true},
	}
	for i, c := range clientCode {
		for _, onePhase := range []bool{true, false} {
			for _, first := range []bool{true, false} {
				id := fmt.Sprintf("r%d%t%t", i, onePhase, first)
				work := "INSERT INTO orders VALUES ('" + id + "')"
				list, at := stmts(work, c.stmt), "statement 1"
				if first {
					list, at = stmts(c.stmt, work), "statement 0"
				}
				if c.deferred {
					at = "statement 1: its deferred constraints or triggers"
				}
				_, err := d.Run(ctx, "default", list, schema+"_"+id+"@default", onePhase, nil)
				require.Error(t, err, "%s (one phase %t, first %t)", c.name, onePhase, first)
				f := txntype.AsFailure(err)
				assert.Equal(t, sqlstateOwnTable, f.SQLState, "%s: %v", c.name, err)
				assert.Contains(t, err.Error(), at, c.name)
				assert.Contains(t, err.Error(), "may not change the coordinator's table", c.name)
				assert.Equal(t, txntype.ClassAbortable, f.Class, c.name)
				assert.NotErrorIs(t, err, txntype.ErrConfinementBreach, c.name)
				assert.NotErrorIs(t, err, txntype.ErrCommitUnknown, "%s: the server refused, so nothing committed", c.name)
			}
		}
	}
	assert.Empty(t, committedIDs(t, admin, schema), "nothing of a refused transaction committed")
	assert.Zero(t, preparedGIDs(t, admin, schema+"%"))
	assertOwnTablesIntact(t, admin, schema)

	// Shared: the member that wrote them is left out; the members before and after it stay.
	gid := schema + "_+own@default"
	run := d.RunShared(ctx, "default", [][]txntype.Statement{
		stmts("INSERT INTO orders VALUES ('s1')"),
		stmts("INSERT INTO orders VALUES ('s2')", "SELECT rewrite_log()"),
		stmts("INSERT INTO orders VALUES ('s3')", "INSERT INTO audited_later VALUES ('s3')"),
		stmts("INSERT INTO orders VALUES ('s4')"),
	}, gid, nil)
	require.NoError(t, run.Err)
	assert.Nil(t, run.Excluded[0])
	require.Error(t, run.Excluded[1])
	assert.Equal(t, sqlstateOwnTable, txntype.AsFailure(run.Excluded[1]).SQLState, "%v", run.Excluded[1])
	require.Error(t, run.Excluded[2], "its deferred trigger runs at the member's end")
	assert.Equal(t, sqlstateOwnTable, txntype.AsFailure(run.Excluded[2]).SQLState, "%v", run.Excluded[2])
	assert.Nil(t, run.Excluded[3])
	require.NoError(t, d.CommitPrepared(ctx, "default", gid))
	assert.ElementsMatch(t, []string{"s1", "s4"}, committedIDs(t, admin, schema))
	assertOwnTablesIntact(t, admin, schema)

	// The client's own tables are not the coordinator's, and reads are not writes: a request
	// that writes its tables and reads the coordinator's, through the same kind of code, commits.
	_, err := d.Run(ctx, "default", stmts("DO $$BEGIN INSERT INTO orders VALUES ('do'); END$$",
		"DO $$BEGIN PERFORM count(*) FROM coordinator_transactions; END$$"), schema+"_do@default", true, nil)
	require.NoError(t, err)
	// The coordinator's own sessions write them as before.
	_, err = admin.Exec(ctx, "UPDATE "+schema+".coordinator_transactions SET state = state")
	require.NoError(t, err)
}

// Opening the participant again finds the tables guarded and changes nothing; a table it cannot
// lock (a prepared transaction holds it) is left for a later start, and the participant opens.
func TestGuardOwnTablesIdempotent(t *testing.T) {
	t.Parallel()
	d, admin, schema := ownTablesDatabases(t)
	ctx := context.Background()
	count := func() int {
		t.Helper()
		var n int
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND t.tgname = $2`, schema, refuseFunction).Scan(&n))
		return n
	}
	require.Equal(t, 2, count(), "the log stand-in and the marker table")
	require.NoError(t, guardOwnTables(ctx, d.dbs["default"].pool, "default", "", d.logger))
	assert.Equal(t, 2, count())

	// A prepared transaction holding the (unguarded) log table: the guard waits for its lock in
	// vain, and the participant opens without it.
	_, err := admin.Exec(ctx, "DROP TRIGGER "+refuseFunction+" ON "+schema+".coordinator_transactions")
	require.NoError(t, err)
	gid := schema + "_holder"
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE "+schema+".coordinator_transactions SET state = state")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'")
	require.NoError(t, err)
	require.NoError(t, guardOwnTables(ctx, d.dbs["default"].pool, "default", "", d.logger))
	assert.Equal(t, 1, count())
	_, err = admin.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'")
	require.NoError(t, err)
	require.NoError(t, guardOwnTables(ctx, d.dbs["default"].pool, "default", "", d.logger))
	assert.Equal(t, 2, count(), "guarded at the next start")
}

// assertOwnTablesIntact checks the stand-in log row and the markers: the one there before, and
// the markers of the transactions that committed.
func assertOwnTablesIntact(t *testing.T, admin *pgx.Conn, schema string) {
	t.Helper()
	var state string
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT state FROM "+schema+".coordinator_transactions WHERE gid = 'other'").Scan(&state))
	assert.Equal(t, "prepared", state, "the log row is untouched")
	rows, err := admin.Query(context.Background(), "SELECT gid FROM "+schema+".coordinator_markers WHERE gid NOT LIKE $1", schema+"%")
	require.NoError(t, err)
	markers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"kept"}, markers, "no marker forged or deleted")
}

// BenchmarkRunOwnTablesGuarded measures what the refusing triggers cost a request alone (one
// statement, prepared and committed), against the same tables without them, in one run:
// go test ./sqltxn -run '^$' -bench RunOwnTablesGuarded -benchtime 3000x
func BenchmarkRunOwnTablesGuarded(b *testing.B) {
	ctx := context.Background()
	d, admin, schema := ownTablesDatabases(b)
	n := 0
	drop := "DROP TRIGGER IF EXISTS " + refuseFunction + " ON " + schema + ".coordinator_markers"
	for _, v := range []struct {
		name    string
		guarded bool
	}{{"unguarded", false}, {"guarded", true}, {"unguarded-again", false}} {
		b.Run(v.name, func(b *testing.B) {
			if v.guarded {
				require.NoError(b, guardOwnTables(ctx, d.dbs["default"].pool, "default", "", d.logger))
			} else {
				_, err := admin.Exec(ctx, drop)
				require.NoError(b, err)
			}
			for range b.N {
				n++
				id := fmt.Sprintf("b%d", n)
				gid := schema + "_" + id + "@default"
				if _, err := d.Run(ctx, "default", stmts("INSERT INTO orders VALUES ('"+id+"')"), gid, false, nil); err != nil {
					b.Fatal(err)
				}
				if err := d.CommitPrepared(ctx, "default", gid); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A coordinator table that another role owns cannot get its trigger: startup warns, names it,
// and goes on, guarding the tables it owns.
func TestGuardOwnTablesNotOwner(t *testing.T) {
	t.Parallel()
	_, admin, schema := ownTablesDatabases(t)
	ctx := context.Background()
	login := schema + "_login"
	_, err := admin.Exec(ctx, "CREATE ROLE "+login+" LOGIN; GRANT USAGE, CREATE ON SCHEMA "+schema+" TO "+login+
		"; DROP TRIGGER "+refuseFunction+" ON "+schema+".coordinator_transactions"+
		"; DROP TRIGGER "+refuseFunction+" ON "+schema+".coordinator_markers"+
		"; ALTER TABLE "+schema+".coordinator_markers OWNER TO "+login)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP OWNED BY "+login+" CASCADE; DROP ROLE "+login) })
	cfg, err := pgxpool.ParseConfig(admin.Config().ConnString())
	require.NoError(t, err)
	cfg.ConnConfig.User = login
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var logged bytes.Buffer
	require.NoError(t, guardOwnTables(ctx, pool, "default", "", slog.New(slog.NewTextHandler(&logged, nil))))
	assert.Contains(t, logged.String(), "table=coordinator_transactions")
	rows, err := admin.Query(ctx, `SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND t.tgname = $2`, schema, refuseFunction)
	require.NoError(t, err)
	guarded, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"coordinator_markers"}, guarded)
}

// The starts of the namespaces in one database guard their tables independently. A start whose
// CREATE TRIGGER waits for its own table (a prepared transaction holds it) keeps its guard lock
// until its lock timeout, and several such starts in a row kept one lock for the database
// longer than the next start's timeout, which then ran unguarded (CI). Here another namespace's
// guard lock is held for as long as the test runs: this namespace's start still guards its table.
func TestGuardOwnTablesNamespacesApart(t *testing.T) {
	t.Parallel()
	dsn, admin := pgtest.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := admin.Exec(ctx, "CREATE TABLE public.coordinator_markers (gid text)")
	require.NoError(t, err)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", guardLockKey("other."+refuseFunction))
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "PREPARE TRANSACTION 'holds-another-namespace'")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "ROLLBACK PREPARED 'holds-another-namespace'") })

	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = "public"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, guardOwnTables(ctx, pool, "default", "", slog.New(slog.DiscardHandler)))
	var guarded bool
	require.NoError(t, admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
		WHERE tgrelid = 'public.coordinator_markers'::regclass AND tgname = $1)`, refuseFunction).Scan(&guarded))
	assert.True(t, guarded, "this namespace's start guarded its table while another's guard lock was held")
}
