package sqlpolicy

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refused lists every form that must not run, with a word the refusal must contain. The
// first group is the bypass forms found by hand against the old keyword check.
var refused = []struct{ stmt, what string }{
	{"COMMIT--x", "COMMIT"},
	{"COMMIT/**/", "COMMIT"},
	{"END--x", "COMMIT"}, // END is COMMIT in the grammar
	{"ROLLBACK--x", "ROLLBACK"},
	{"ABORT/**/", "ROLLBACK"},
	{"\fCOMMIT", "COMMIT"},
	{"\f\vROLLBACK", "ROLLBACK"},
	{"PREPARE--x\nTRANSACTION 'g'", "PREPARE TRANSACTION"},
	{"/* a /* nested */ comment */ COMMIT", "COMMIT"},
	{"commit and chain", "COMMIT"},
	{"BEGIN", "BEGIN"},
	{"START TRANSACTION", "START TRANSACTION"},
	{"SAVEPOINT s", "SAVEPOINT"},
	{"RELEASE SAVEPOINT s", "RELEASE"},
	{"ROLLBACK TO SAVEPOINT s", "ROLLBACK TO"},
	{"COMMIT PREPARED 'other'", "COMMIT PREPARED"},
	{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE READ ONLY", "READ ONLY"},
	{"SET TRANSACTION READ ONLY, DEFERRABLE", "READ ONLY"},
	{"ROLLBACK PREPARED 'other'", "ROLLBACK PREPARED"},
	{"SET statement_timeout = 1", "SET without LOCAL"},
	{"set SESSION statement_timeout to 1", "SET without LOCAL"},
	{"SET default_transaction_read_only = on", "SET without LOCAL"},
	{"SET search_path = evil", "SET without LOCAL"},
	{"SET ROLE nobody", "SET role"},
	{"SET LOCAL ROLE nobody", "SET role"},
	{"SET SESSION AUTHORIZATION nobody", "session_authorization"},
	{"SET LOCAL session_replication_role = replica", "session_replication_role"},
	{"SET session_replication_role = replica", "session_replication_role"},
	{"RESET ROLE", "role"},
	{"RESET statement_timeout", "RESET"},
	{"RESET ALL", "RESET"},
	{"DISCARD ALL", "DISCARD"},
	{"DISCARD TEMP", "DISCARD"},
	{"LISTEN ch", "LISTEN"},
	{"UNLISTEN *", "UNLISTEN"},
	{"PREPARE q AS SELECT 1", "PREPARE"},
	{"DEALLOCATE ALL", "DEALLOCATE"},
	{"LOAD 'auto_explain'", "LOAD"},
	{"DECLARE c CURSOR WITH HOLD FOR SELECT 1", "WITH HOLD"},
	{"CREATE TEMP TABLE t (x int)", "temporary"},
	{"CREATE TEMPORARY TABLE t (x int) ON COMMIT DROP", "temporary"},
	{"CREATE TABLE pg_temp.t (x int)", "temporary"},
	{"SELECT 1 INTO TEMP t", "temporary"},
	{"CREATE TEMP VIEW v AS SELECT 1", "temporary"},
	{"CREATE TEMP SEQUENCE s", "temporary"},
	{"SELECT set_config('statement_timeout', '1', false)", "is_local"},
	{"SELECT pg_catalog.set_config('statement_timeout', '1', false)", "is_local"},
	{"SELECT set_config('role', 'nobody', true)", "role"},
	{"SELECT set_config('session_replication_role', 'replica', true)", "session_replication_role"},
	{"SELECT set_config('kpgtx.xid', '', true)", "kpgtx.xid"},
	{"SELECT set_config('KPGTX.xid', '', true)", "KPGTX.xid"},
	{"SET LOCAL kpgtx.xid = ''", "kpgtx.xid"},
	{"SELECT set_config(current_user, '1', true)", "computed"},
	{"SELECT set_config('a.b', '1', 1 = 1)", "is_local"},
	{"SELECT pg_advisory_lock(1)", "pg_advisory_lock"},
	{"SELECT x FROM t WHERE pg_try_advisory_lock(x)", "pg_try_advisory_lock"},
	{"SELECT pg_terminate_backend(42)", "pg_terminate_backend"},
	{"ALTER ROLE CURRENT_USER SET statement_timeout = 1", "ALTER ROLE"},
	{"ALTER DATABASE d SET statement_timeout = 1", "ALTER DATABASE"},
	{"ALTER SYSTEM SET work_mem = '1MB'", "ALTER SYSTEM"},
	{"DELETE FROM coordinator_markers", "coordinator_markers"},
	{"SELECT * FROM public.Coordinator_Transactions", "coordinator_transactions"},
	{"UPDATE orders SET x = 1 WHERE id IN (SELECT gid FROM coordinator_events)", "coordinator_events"},
	{"WITH d AS (DELETE FROM coordinator_instances RETURNING 1) SELECT 1", "coordinator_instances"},
	{"INSERT INTO t VALUES (1); COMMIT", "2 statements"},
	{"SELECT 1; SELECT 2", "2 statements"},
	{";", "empty"},
	{"-- only a comment", "empty"},
	{"SELECT 1\x00; COMMIT", "NUL"},
	{"COMMIT\x00", "NUL"},
	{"SELEC 1", "parser"},
	{"SELECT 'unterminated", "parser"},
}

func TestCheckRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range refused {
		t.Run(tc.stmt, func(t *testing.T) {
			t.Parallel()
			err := Check(tc.stmt, Options{})
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrRefused))
			assert.Contains(t, err.Error(), tc.what)
		})
	}
}

func TestCheckAllows(t *testing.T) {
	t.Parallel()
	for _, stmt := range []string{
		"INSERT INTO orders(id, total) VALUES ($1, $2)",
		"insert into orders values ($1) returning *",
		"UPDATE orders SET total = total + 1 WHERE id = $1",
		"DELETE FROM orders WHERE id = $1",
		"SELECT * FROM orders FOR UPDATE",
		"SELECT 'COMMIT', $1::text AS \"ROLLBACK\" -- COMMIT",
		"/* COMMIT */ INSERT INTO t VALUES (1)",
		"INSERT INTO t VALUES (1);",
		"SET LOCAL statement_timeout = 5000",
		"SET LOCAL search_path = app",
		"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
		"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ WRITE",
		"SET TRANSACTION READ ONLY",
		"SET CONSTRAINTS ALL DEFERRED",
		"SELECT set_config('app.user', $1, true)",
		"SELECT pg_advisory_xact_lock(1)",
		"DECLARE c CURSOR FOR SELECT 1",
		"CREATE TABLE app_t (x int)",
		"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET x = s.x",
		"DO $$BEGIN PERFORM 1; END$$",
		"CALL app_proc(1)",
		"SELECT coordinator_x FROM t", // a column, not a table
		"COPY t FROM STDIN",
	} {
		t.Run(stmt, func(t *testing.T) {
			t.Parallel()
			assert.NoError(t, Check(stmt, Options{}))
		})
	}
}

func TestConfinedRefusesDynamicSQL(t *testing.T) {
	t.Parallel()
	for _, stmt := range []string{"DO $$BEGIN EXECUTE 'SET LOCAL ROLE NONE'; END$$", "CALL app_proc(1)"} {
		require.NoError(t, Check(stmt, Options{}), "allowed without a statement role")
		err := Check(stmt, Options{Confined: true})
		require.ErrorIs(t, err, ErrRefused)
		assert.Contains(t, err.Error(), "statement role")
	}
}

func TestCacheKeepsAnswers(t *testing.T) {
	t.Parallel()
	stmt := "COMMIT /* cached " + strings.Repeat("x", 10) + " */"
	first := Check(stmt, Options{})
	require.Error(t, first)
	assert.Equal(t, first, Check(stmt, Options{}), "the second answer comes from the cache")
}

func BenchmarkCheck(b *testing.B) {
	const stmt = "INSERT INTO orders(id, total) VALUES ($1, $2)"
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			_ = Check(stmt, Options{})
		}
	})
	b.Run("parse", func(b *testing.B) {
		for b.Loop() {
			_ = check(stmt, Options{})
		}
	})
}

// SetsIsolation picks the SET TRANSACTION forms PostgreSQL takes only before the first query.
func TestSetsIsolation(t *testing.T) {
	t.Parallel()
	for stmt, want := range map[string]bool{
		"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE":               true,
		"set transaction isolation level read committed, read write": true,
		"SET TRANSACTION DEFERRABLE":                                 true,
		"SET TRANSACTION NOT DEFERRABLE":                             true,
		"SET TRANSACTION READ ONLY":                                  false,
		"SET TRANSACTION READ WRITE":                                 false,
		"SET LOCAL transaction_isolation = 'serializable'":           true,
		"SET LOCAL transaction_deferrable = on":                      true,
		"SET LOCAL transaction_read_only = on":                       false,
		"SET TRANSACTION SNAPSHOT '00000003-0000001B-1'":             false,
		"SELECT 1": false,
		"not sql":  false,
	} {
		assert.Equal(t, want, SetsIsolation(stmt), stmt)
	}
}
