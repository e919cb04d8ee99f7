package sqltxn

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// committedIDs lists the ids in the test schema's orders table.
func committedIDs(t *testing.T, admin *pgx.Conn, schema string) []string {
	t.Helper()
	rows, err := admin.Query(context.Background(), "SELECT id FROM "+schema+".orders ORDER BY id")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

func preparedGIDs(t *testing.T, admin *pgx.Conn, gid string) int {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1", gid).Scan(&n))
	return n
}

// RunShared against PostgreSQL: the members' work in one prepared transaction, a member whose
// statement fails rolled back to its savepoint alone, in one session that is reset, not replaced.
func TestRunSharedLeavesOutAFailingMember(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	before := backendPID(t, d)
	gid := schema + "_+s1@default"
	run := d.RunShared(ctx, "default", [][]txntype.Statement{
		stmts("INSERT INTO orders VALUES ('a')"),
		stmts("INSERT INTO orders VALUES ('b')", "INSERT INTO orders VALUES ('a')"), // duplicate: fails
		stmts("INSERT INTO orders VALUES ('c')", "SELECT count(*) AS n FROM orders"),
		stmts("INSERT INTO orders VALUES ('d') RETURNING id"),
	}, gid, nil)
	require.NoError(t, run.Err)
	assert.Nil(t, run.Excluded[0])
	require.Error(t, run.Excluded[1])
	assert.Equal(t, "23505", txntype.AsFailure(run.Excluded[1]).SQLState, "the member's own error: %v", run.Excluded[1])
	assert.Nil(t, run.Excluded[2])
	assert.Nil(t, run.Excluded[3])
	require.Len(t, run.Results[2], 2)
	assert.EqualValues(t, 2, run.Results[2][1].Rows[0]["n"], "a member sees the work before it, without the rolled-back member's")
	assert.Equal(t, "d", run.Results[3][0].Rows[0]["id"])
	assert.Equal(t, 1, preparedGIDs(t, admin, gid))
	assert.Empty(t, committedIDs(t, admin, schema), "nothing committed before COMMIT PREPARED")

	require.NoError(t, d.CommitPrepared(ctx, "default", gid))
	assert.Equal(t, []string{"a", "c", "d"}, committedIDs(t, admin, schema), "the left-out member's work is gone, all of it")
	require.NoError(t, d.CommitPrepared(ctx, "default", gid), "idempotent: the shared marker proves the commit")
	assert.Equal(t, before, backendPID(t, d), "the session was reset in the round trip, not replaced")
}

// S6: what a member's SET LOCAL or set_config changes ends with the member.
func TestRunSharedSettingsDoNotCrossMembers(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	var path string
	require.NoError(t, admin.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&path))
	gid := schema + "_+s2@default"
	run := d.RunShared(ctx, "default", [][]txntype.Statement{
		stmts("SELECT pg_catalog.set_config('search_path', 'pg_catalog', true)",
			"SELECT pg_catalog.set_config('statement_timeout', '1', true)",
			"SELECT pg_catalog.set_config('application_name', 'member-0', false)"),
		stmts("INSERT INTO orders VALUES ('x')", "SELECT pg_sleep(0.05)",
			"SELECT current_setting('statement_timeout') AS timeout, current_setting('application_name') AS app"),
	}, gid, nil)
	require.NoError(t, run.Err)
	require.Nil(t, run.Excluded[1], "the next member's unqualified table and its sleep are unaffected")
	assert.Equal(t, "0", run.Results[1][2].Rows[0]["timeout"])
	assert.NotEqual(t, "member-0", run.Results[1][2].Rows[0]["app"])
	require.NoError(t, d.CommitPrepared(ctx, "default", gid))
	assert.Equal(t, []string{"x"}, committedIDs(t, admin, schema))
}

// A statement that ends the shared transaction: every member whose work was in it shares the
// breach (its work may be committed), the members after it never ran, nothing is prepared.
func TestRunSharedBreach(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	gid := schema + "_+s3@default"
	run := d.RunShared(ctx, "default", [][]txntype.Statement{
		stmts("INSERT INTO orders VALUES ('a')"),
		stmts("INSERT INTO orders VALUES ('a')"), // fails: left out before the breach
		stmts("INSERT INTO orders VALUES ('b')", "COMMIT"),
		stmts("INSERT INTO orders VALUES ('c')"),
	}, gid, nil)
	require.ErrorIs(t, run.Err, txntype.ErrConfinementBreach)
	assert.ErrorIs(t, run.Excluded[0], txntype.ErrConfinementBreach)
	require.Error(t, run.Excluded[1])
	assert.NotErrorIs(t, run.Excluded[1], txntype.ErrConfinementBreach, "its work was rolled back before the breach")
	assert.ErrorIs(t, run.Excluded[2], txntype.ErrConfinementBreach)
	assert.NoError(t, run.Excluded[3], "never ran")
	assert.Zero(t, preparedGIDs(t, admin, gid))
	assert.Equal(t, []string{"a", "b"}, committedIDs(t, admin, schema), "the evidence: what the COMMIT committed")
}

// The transaction itself fails at PREPARE (a member sent a NOTIFY): nothing is prepared or
// committed, and the session is usable again.
func TestRunSharedPrepareFails(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	gid := schema + "_+s4@default"
	run := d.RunShared(ctx, "default", [][]txntype.Statement{
		stmts("INSERT INTO orders VALUES ('a')"),
		stmts("SELECT pg_notify('kpgtx_test', 'x')"),
	}, gid, nil)
	require.Error(t, run.Err)
	assert.NotErrorIs(t, run.Err, txntype.ErrConfinementBreach)
	assert.Zero(t, preparedGIDs(t, admin, gid))
	assert.Empty(t, committedIDs(t, admin, schema))
	_, err := d.Run(ctx, "default", stmts("INSERT INTO orders VALUES ('z')"), schema+"_z@default", true, nil)
	require.NoError(t, err, "the session is usable after the failure")
	assert.Equal(t, []string{"z"}, committedIDs(t, admin, schema))
}

// A member's deferred constraints are checked at its own end, and the next member starts with
// every constraint immediate: a member that deferred them (inside a function, where the parser
// does not look) cannot make the next one commit what would fail alone, and a member whose own
// deferred constraint fails is left out alone, instead of failing the shared PREPARE for all.
func TestRunSharedConstraintsEndWithTheMember(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	_, err := admin.Exec(ctx, `CREATE TABLE `+schema+`.parents (id int PRIMARY KEY);
CREATE TABLE `+schema+`.now_child (id text PRIMARY KEY, parent int REFERENCES `+schema+`.parents DEFERRABLE INITIALLY IMMEDIATE);
CREATE TABLE `+schema+`.later_child (id text PRIMARY KEY, parent int REFERENCES `+schema+`.parents DEFERRABLE INITIALLY DEFERRED);
CREATE FUNCTION `+schema+`.defer_all() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE 'SET CONSTRAINTS ALL DEFERRED';
  RETURN 1;
END$$`)
	require.NoError(t, err)
	// Alone, the child before its parent fails at once (the constraint is immediate).
	orphanFirst := stmts("INSERT INTO now_child VALUES ('c', 5)", "INSERT INTO parents VALUES (5)")
	_, err = d.Run(ctx, "default", orphanFirst, schema+"_alone@default", true, nil)
	require.Error(t, err)
	assert.Equal(t, "23503", sqlstate(err))

	gid := schema + "_+c1@default"
	run := d.RunShared(ctx, "default", [][]txntype.Statement{
		stmts("SELECT defer_all()"),
		orphanFirst,
		stmts("INSERT INTO orders VALUES ('kept')"),
	}, gid, nil)
	require.NoError(t, run.Err)
	assert.Nil(t, run.Excluded[0])
	require.Error(t, run.Excluded[1], "the neighbour's deferral did not reach it")
	assert.Equal(t, "23503", txntype.AsFailure(run.Excluded[1]).SQLState)
	assert.Nil(t, run.Excluded[2])
	require.NoError(t, d.CommitPrepared(ctx, "default", gid))

	gid = schema + "_+c2@default"
	run = d.RunShared(ctx, "default", [][]txntype.Statement{
		stmts("INSERT INTO later_child VALUES ('l', 7)"), // its own deferred constraint fails
		stmts("INSERT INTO orders VALUES ('kept2')"),
	}, gid, nil)
	require.NoError(t, run.Err, "no member's deferred constraint is left for PREPARE")
	require.Error(t, run.Excluded[0], "its deferred constraint fails at its own end")
	assert.Equal(t, "23503", txntype.AsFailure(run.Excluded[0]).SQLState)
	assert.Nil(t, run.Excluded[1])
	require.NoError(t, d.CommitPrepared(ctx, "default", gid))
	assert.Equal(t, []string{"kept", "kept2"}, committedIDs(t, admin, schema))
}

// Many members with failures next to each other, first and last: each failure takes back its
// own member's work alone, and the members after it see the work of every member before them
// that was kept.
func TestRunSharedManyMembers(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	const n = 64
	fails := map[int]bool{0: true, 5: true, 6: true, 31: true, n - 1: true}
	members := make([][]txntype.Statement, n)
	var want []string
	for i := range n {
		id := fmt.Sprintf("m%02d", i)
		if fails[i] {
			// Its first statement writes, its second fails: the write must go with it.
			members[i] = stmts("INSERT INTO orders VALUES ('"+id+"')", "SELECT 1/0")
			continue
		}
		members[i] = stmts("INSERT INTO orders VALUES ('"+id+"')",
			"SELECT pg_catalog.set_config('application_name', '"+id+"', true)",
			"SELECT count(*) AS n FROM orders")
		want = append(want, id)
	}
	gid := schema + "_+many@default"
	run := d.RunShared(ctx, "default", members, gid, nil)
	require.NoError(t, run.Err)
	kept := 0
	for i := range n {
		if fails[i] {
			require.Error(t, run.Excluded[i], "member %d", i)
			assert.Equal(t, "22012", txntype.AsFailure(run.Excluded[i]).SQLState, "member %d: its own error", i)
			continue
		}
		require.NoError(t, run.Excluded[i], "member %d", i)
		kept++
		assert.EqualValues(t, kept, run.Results[i][2].Rows[0]["n"], "member %d sees the kept members before it and itself", i)
	}
	assert.Equal(t, 1, preparedGIDs(t, admin, gid))
	require.NoError(t, d.CommitPrepared(ctx, "default", gid))
	assert.Equal(t, want, committedIDs(t, admin, schema))
	assertReset(t, d, schema+"_after")
}
