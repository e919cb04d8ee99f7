package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/service"
)

// hostileStatements end, prepare or split the coordinator's transaction, or change the pooled
// session beyond it, or reach the coordinator's own tables. Each must be refused before
// anything runs: a 400 naming the statement, no row, no record, no log row, nothing prepared.
var hostileStatements = []string{
	// Transaction control with a comment glued to the keyword, or odd white space.
	"COMMIT--x", "COMMIT/**/", "END--x", "ROLLBACK--x", "ABORT/**/", "\fCOMMIT", "\vROLLBACK",
	"PREPARE--x\nTRANSACTION 'foreign-gid'", "/* a /* nested */ one */COMMIT", "commit and chain",
	"SAVEPOINT s", "ROLLBACK TO SAVEPOINT s", "RELEASE s", "BEGIN", "START TRANSACTION",
	"COMMIT PREPARED 'x'", "ROLLBACK PREPARED 'x'",
	// Session state beyond the transaction.
	"SET statement_timeout = 1", "SET ROLE nobody", "SET LOCAL ROLE nobody",
	"SET session_replication_role = replica", "SET LOCAL session_replication_role = replica",
	"SET default_transaction_read_only = on", "SET SESSION AUTHORIZATION DEFAULT", "RESET ALL",
	"DISCARD ALL", "LISTEN ch", "PREPARE q AS SELECT 1", "CREATE TEMP TABLE tmp (x int)",
	"DECLARE c CURSOR WITH HOLD FOR SELECT 1", "SELECT set_config('statement_timeout', '1', false)",
	"SELECT pg_advisory_lock(7)", "ALTER ROLE CURRENT_USER SET statement_timeout = 1",
	// The coordinator's mark of its transaction, which its guards and its tables' triggers read.
	"SELECT set_config('kpgtx.xid', '', true)", "SET LOCAL kpgtx.xid = ''",
	// An isolation level after a query (PostgreSQL takes it only before the first), or with a
	// read-only mode that would stay for the coordinator's marker row.
	"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE READ ONLY",
	// The coordinator's own tables.
	"DELETE FROM coordinator_markers", "UPDATE coordinator_transactions SET state = 'committed'",
	"INSERT INTO coordinator_events (gid) VALUES ('x')",
	// Several statements in one entry.
	"SELECT 1; COMMIT",
	// NUL.
	"SELECT 1\x00",
	// Text the parser cannot read: what cannot be classified does not run.
	"SELEC 1", "SELECT 'unterminated",
}

// insertThen is a request that inserts the order id, then runs stmt; with a record when
// withKafka.
func (e *env) insertThen(id, stmt string, withKafka bool) map[string]any {
	body := map[string]any{"id": id, "sql": []any{
		map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{id}},
		map[string]any{"statement": stmt},
	}}
	if withKafka {
		body["kafka"] = []any{map[string]any{"topic": e.topic, "key": id, "value": "v"}}
	}
	return body
}

func TestHostileStatementsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	for i, stmt := range hostileStatements {
		id := fmt.Sprintf("hostile-%d", i)
		for _, withKafka := range []bool{false, true} {
			r := e.post(e.insertThen(id, stmt, withKafka))
			require.Equal(t, http.StatusBadRequest, r.Status, "%q: %s", stmt, r.Raw)
			assert.Equal(t, "sql[1].statement", r.str("error", "field"), "%q", stmt)
			assert.NotEmpty(t, r.str("error", "message"))
		}
	}
	// Nothing of any of them ran.
	var rows, logged int
	require.NoError(t, e.db.QueryRow(t.Context(), "SELECT count(*) FROM orders").Scan(&rows))
	require.NoError(t, e.db.QueryRow(t.Context(), "SELECT count(*) FROM coordinator_transactions").Scan(&logged))
	assert.Zero(t, rows)
	assert.Zero(t, logged)
	assert.Empty(t, e.committedRecords(e.topic))
	assert.Empty(t, e.preparedLeft())
	var foreign int
	require.NoError(t, e.db.QueryRow(t.Context(), "SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'foreign-gid'").Scan(&foreign))
	assert.Zero(t, foreign)

	// The pool is healthy: an ordinary request still commits on both sides.
	ok := e.post(map[string]any{"id": "after", "sql": []any{
		map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('after', 1)"},
	}, "kafka": []any{map[string]any{"topic": e.topic, "key": "after", "value": "v"}}})
	require.Equal(t, http.StatusOK, ok.Status, "%s", ok.Raw)
	assert.Equal(t, 1, countRows(t, e.db, "after"))
	assert.Len(t, e.committedRecords(e.topic), 1)
}

// Session state that validation cannot see (set inside a function the client calls) never
// reaches later requests on the same pooled connection: every connection is reset before reuse.
func TestSessionStateDoesNotLeak(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.MaxConns = 1 }})
	_, err := e.db.Exec(context.Background(), `CREATE FUNCTION poison() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('statement_timeout', '77s', false);
  PERFORM set_config('default_transaction_read_only', 'on', false);
  PERFORM set_config('search_path', 'pg_catalog', false);
  PERFORM pg_advisory_lock(hashtext(current_schema()));
  RETURN 1;
END$$`)
	require.NoError(t, err)
	r := e.post(map[string]any{"id": "poison", "sql": []any{map[string]any{"statement": "SELECT poison()"}}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	probe := `SELECT current_setting('statement_timeout') AS st, current_setting('default_transaction_read_only') AS ro,
  (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS locks`
	for i := range 5 {
		id := fmt.Sprintf("probe-%d", i)
		body := map[string]any{"id": id, "sql": []any{
			map[string]any{"statement": probe},
			map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{id}},
		}}
		if i%2 == 1 {
			body["kafka"] = []any{map[string]any{"topic": e.topic, "key": id, "value": "v"}}
		}
		r := e.post(body)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
		row := r.get("sql")
		require.NotNil(t, row, "%s", r.Raw)
		first := row.([]any)[0].(map[string]any)["rows"].([]any)[0].(map[string]any)
		assert.Equal(t, "0", first["st"], "statement_timeout reset")
		assert.Equal(t, "off", first["ro"], "read-only reset")
		assert.Equal(t, "0", fmt.Sprint(first["locks"]), "advisory locks released")
		assert.Equal(t, 1, countRows(t, e.db, id), "the insert went to the test schema: search_path reset")
	}
}

// RETURNING values that JSON cannot carry exactly are stored and answered losslessly as
// strings; the transaction, its GET and the list page holding it all answer 200.
func TestReturningValuesBeyondJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	r := e.post(map[string]any{"id": "big", "sql": []any{map[string]any{"statement": `SELECT
  ('1' || repeat('0', 400))::numeric AS huge, 'NaN'::numeric AS nan, 'Infinity'::float8 AS inf,
  9007199254740993::bigint AS big, 12345678901234567891.5::numeric AS precise, 10.25::numeric AS plain`}},
		"kafka": []any{map[string]any{"topic": e.topic, "key": "big", "value": "v"}}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	check := func(r response) {
		t.Helper()
		row := r.get("sql").([]any)[0].(map[string]any)["rows"].([]any)[0].(map[string]any)
		assert.Equal(t, "1"+strings.Repeat("0", 400), row["huge"])
		assert.Equal(t, "NaN", row["nan"])
		assert.Equal(t, "Infinity", row["inf"])
		assert.Equal(t, "9007199254740993", row["big"])
		assert.Equal(t, "12345678901234567891.5", row["precise"])
		assert.Equal(t, "10.25", fmt.Sprint(row["plain"]), "a number JSON carries stays a number")
	}
	check(r)
	g := e.do(http.MethodGet, "/v1/transactions/big", nil)
	require.Equal(t, http.StatusOK, g.Status, "%s", g.Raw)
	check(g)
	l := e.do(http.MethodGet, "/v1/transactions?limit=10", nil)
	require.Equal(t, http.StatusOK, l.Status, "%s", l.Raw)
}

// Client code that writes the coordinator's own tables without naming them (a DO block, a
// function it calls) passes validation, which sees only the statement, but not the guards: the
// request is refused with a 409 saying why, nothing of it commits on either side, and the log
// rows and markers of the other transactions stay as they were.
func TestClientCodeCannotReachOwnTables(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	r := e.post(order(e, "before", 1))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	// Its committed row may follow the answer (coord/finals.go); a GET here waits for it.
	require.Equal(t, "committed", e.do(http.MethodGet, "/v1/transactions/before", nil).str("state"))
	_, err := e.db.Exec(ctx, `CREATE FUNCTION scrub() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM coordinator_transactions;
  DELETE FROM coordinator_markers;
  RETURN 1;
END$$`)
	require.NoError(t, err)
	logState := func() string {
		t.Helper()
		var s string
		require.NoError(t, e.db.QueryRow(ctx, `SELECT string_agg(request_id || '=' || state, ',' ORDER BY request_id)
FROM coordinator_transactions WHERE request_id NOT LIKE 'reach-%'`).Scan(&s))
		return s
	}
	logged := logState()
	for i, stmt := range []string{
		"DO $$BEGIN DELETE FROM coordinator_transactions; END$$",
		"DO $$BEGIN UPDATE coordinator_transactions SET state = 'aborted'; END$$",
		"DO $$BEGIN INSERT INTO coordinator_markers (gid) SELECT gid || '-forged' FROM coordinator_transactions; END$$",
		"DO $$BEGIN TRUNCATE coordinator_markers; END$$",
		"SELECT scrub()",
	} {
		for _, withKafka := range []bool{false, true} {
			id := fmt.Sprintf("reach-%d-%t", i, withKafka)
			r := e.post(e.insertThen(id, stmt, withKafka))
			require.Equal(t, http.StatusConflict, r.Status, "%q: %s", stmt, r.Raw)
			assert.Equal(t, "aborted", r.str("state"), "%q", stmt)
			assert.Equal(t, "KP001", r.str("error", "sqlstate"), "%q: %s", stmt, r.Raw)
			assert.Contains(t, r.str("error", "message"), "may not change the coordinator's table", "%q", stmt)
			e.assertNothingOf(id)
		}
	}
	assert.Equal(t, logged, logState(), "the other transactions' log rows are untouched")
	var markers int
	require.NoError(t, e.db.QueryRow(ctx, "SELECT count(*) FROM coordinator_markers WHERE gid LIKE '%-forged'").Scan(&markers))
	assert.Zero(t, markers, "no marker forged")
	got := e.do(http.MethodGet, "/v1/transactions/before", nil)
	require.Equal(t, http.StatusOK, got.Status, "%s", got.Raw)
	assert.Equal(t, "committed", got.str("state"))

	ok := e.post(order(e, "after", 1))
	require.Equal(t, http.StatusOK, ok.Status, "%s", ok.Raw)
}

// A client statement that locks the coordinator's log (rows or tables) from code the parser
// never sees: PREPARE TRANSACTION keeps the lock, so the request's own decision write would
// wait for its own prepared transaction, and every log write behind it. The log's lock timeout
// ends the wait, the refusal proves nothing was logged, and the request aborts at once: 503,
// both sides rolled back, the lock released. Neighbours sent alongside stay atomic, and the
// coordinator goes on.
func TestClientLockOnTheLogEndsItsRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{secondDB: true})
	ctx := context.Background()
	r := e.post(order(e, "before", 1))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	_, err := e.db.Exec(ctx, `CREATE FUNCTION lock_log() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  LOCK TABLE coordinator_transactions IN SHARE MODE;
  RETURN 1;
END$$`)
	require.NoError(t, err)
	locks := []string{
		"DO $$BEGIN PERFORM 1 FROM coordinator_transactions FOR UPDATE; END$$",
		"DO $$BEGIN LOCK TABLE coordinator_transactions IN SHARE MODE; END$$",
		"DO $$BEGIN LOCK TABLE coordinator_events IN SHARE MODE; END$$",
		"SELECT lock_log()",
	}
	twoDatabases := func(id, stmt string) map[string]any {
		return map[string]any{"id": id, "sql": []any{
			map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{id}},
			map[string]any{"database": "other", "statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{id}},
			map[string]any{"statement": stmt},
		}}
	}
	for i, stmt := range locks {
		for _, shape := range []string{"kafka", "two databases"} {
			id := fmt.Sprintf("lock-%d-%s", i, strings.ReplaceAll(shape, " ", "-"))
			body := e.insertThen(id, stmt, true)
			if shape == "two databases" {
				body = twoDatabases(id, stmt)
			}
			r := e.post(body)
			require.Equal(t, http.StatusServiceUnavailable, r.Status, "%q (%s): %s", stmt, shape, r.Raw)
			assert.Equal(t, "aborted", r.str("state"), "%q (%s)", stmt, shape)
			assert.Equal(t, "retriable", r.str("error", "class"), "%q (%s)", stmt, shape)
			assert.Contains(t, r.str("error", "message"), "lock timeout", "%q (%s)", stmt, shape)
			e.assertNothingOf(id)
			var other int
			require.NoError(t, e.db2.QueryRow(ctx, "SELECT count(*) FROM orders WHERE id = $1", id).Scan(&other))
			assert.Zero(t, other, "%s: nothing on the second database", id)
		}
	}
	got := e.do(http.MethodGet, "/v1/transactions/before", nil)
	require.Equal(t, http.StatusOK, got.Status, "%s", got.Raw)
	assert.Equal(t, "committed", got.str("state"))

	// A wave of neighbours around one locking request: whatever each answers, every request is
	// atomic once recovery has run, the locking one never commits, and nothing stays prepared.
	reqs := map[string]sent{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 12 {
		id, kind := fmt.Sprintf("wave-%d", i), "both"
		body := any(e.orderBody(id, kind))
		if i == 5 {
			kind, body = "fail", e.insertThen(id, locks[3], true)
		}
		wg.Go(func() {
			r := e.postQuiet(body)
			mu.Lock()
			reqs[id] = sent{kind: kind, status: r.Status}
			mu.Unlock()
		})
	}
	wg.Wait()
	e.waitResolved(t, 60*time.Second)
	e.verify(t, e.srv.URL, reqs)

	ok := e.post(order(e, "after", 1))
	require.Equal(t, http.StatusOK, ok.Status, "%s", ok.Raw)
}
