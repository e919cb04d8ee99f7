package test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedSQLNeighbours runs requests together so that they share PostgreSQL transactions
// (coord/sharedsql.go), with neighbours that could hurt each other there: one changes its
// search_path and another its statement timeout for the rest of the transaction (S6: RESET ALL
// ends that with the member), and several insert the same key (the first one's row makes the
// others fail inside the shared transaction; each of them runs again alone, and exactly one
// commits). A second wave adds neighbours whose work fails only at PREPARE, which fails the
// whole shared transaction: a deferred foreign key to a missing parent, and a NOTIFY (which
// PostgreSQL refuses to prepare). A third adds neighbours that make the transaction read-only
// after their writes, which the coordinator refuses. A fourth adds neighbours that call a
// function rewriting the log and deleting the markers, which the coordinator's tables refuse.
// Every request ends atomic with a true answer.
func TestSharedSQLNeighbours(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{poolSize: 16})
	// A decoy table under the same name: a neighbour's search_path reaching the next member
	// would send that member's rows there, silently.
	decoy := e.prefix + "_decoy"
	_, err := e.db.Exec(context.Background(), "CREATE SCHEMA "+decoy+"; CREATE TABLE "+decoy+".orders (LIKE orders); "+
		"CREATE TABLE "+decoy+".parents (id int PRIMARY KEY); "+
		"CREATE TABLE "+decoy+".children (id text PRIMARY KEY, parent int REFERENCES "+decoy+
		".parents DEFERRABLE INITIALLY DEFERRED)")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = e.db.Exec(context.Background(), "DROP SCHEMA "+decoy+" CASCADE") })
	_, err = e.db.Exec(context.Background(), `CREATE FUNCTION scrub_log(mine text) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  UPDATE coordinator_transactions SET state = 'aborted' WHERE request_id <> mine;
  DELETE FROM coordinator_markers;
  RETURN 1;
END$$`)
	require.NoError(t, err)

	extra := map[string]string{
		"search_path": "SELECT pg_catalog.set_config('search_path', '" + decoy + "', true)",
		"timeout":     "SELECT pg_catalog.set_config('statement_timeout', '1', true)",
		"same_key":    "INSERT INTO orders (id, total) VALUES ('nb-same', 0)",
		"deferred":    "INSERT INTO " + decoy + ".children (id, parent) VALUES ('%s', 1)",
		"notify":      "SELECT pg_catalog.pg_notify('kpgtx_neighbour', '%s')",
		// Read-only for the rest of the transaction, after its own writes (RESET ALL cannot
		// undo it): its guard refuses it, as the coordinator's marker row must be written; the
		// next members' writes are unaffected.
		"read_only": "SELECT pg_catalog.set_config('transaction_read_only', 'on', true) AS \"%s\"",
		// A shareable statement whose function writes the coordinator's tables.
		"writes_log": "SELECT scrub_log('%s')",
	}
	failsAtPrepare := func(kind string) bool {
		return kind == "deferred" || kind == "notify" || kind == "read_only" || kind == "writes_log"
	}
	// wave runs n requests of the kinds at once and returns how many of each kind committed.
	wave := func(name string, n int, kinds ...string) map[string]int {
		t.Helper()
		committed := map[string]int{}
		status := make([]int, n)
		kind := func(i int) string { return kinds[i%len(kinds)] }
		id := func(i int) string { return fmt.Sprintf("nb-%s-%02d", name, i) }
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				req := order(e, id(i), i)
				if x, ok := extra[kind(i)]; ok {
					if failsAtPrepare(kind(i)) {
						x = fmt.Sprintf(x, id(i))
					}
					req["sql"] = append(req["sql"].([]any), map[string]any{"statement": x})
				}
				status[i] = e.postQuiet(req).Status
			})
		}
		wg.Wait()

		byKey := map[string]int{}
		for _, r := range e.committedRecords(e.topic) {
			byKey[string(r.Key)]++
		}
		for i := range n {
			k, rows := kind(i), countRows(t, e.db, id(i))
			switch {
			case failsAtPrepare(k):
				assert.NotEqual(t, http.StatusOK, status[i], "%s (%s) cannot be prepared", id(i), k)
				assert.Less(t, status[i], 500, "%s (%s): its own statement's fault is the client's", id(i), k)
			case k == "same_key" && status[i] != http.StatusOK:
				assert.Equal(t, http.StatusConflict, status[i], "%s", id(i))
			default:
				assert.Equal(t, http.StatusOK, status[i], "%s (%s) should commit", id(i), k)
				assert.Equal(t, 1, rows, "%s: committed but no row", id(i))
				assert.Equal(t, 1, byKey[id(i)], "%s: its record committed exactly once", id(i))
				committed[k]++
				continue
			}
			assert.Zero(t, rows, "%s: failed but its row is there", id(i))
			assert.Zero(t, byKey[id(i)], "%s: failed but its record is visible", id(i))
		}
		return committed
	}

	committed := wave("a", 64, "plain", "search_path", "same_key", "timeout")
	assert.Equal(t, 1, committed["same_key"], "exactly one of the requests inserting the same key commits")
	assert.Equal(t, 1, countRows(t, e.db, "nb-same"))
	assert.Positive(t, e.scrape(t).val(t, "kpgtx_sql_shared_transaction_members_count"),
		"no PostgreSQL transaction was shared")
	wave("b", 48, "plain", "deferred", "search_path", "notify")
	wave("c", 24, "plain", "read_only", "plain", "search_path")
	wave("d", 24, "plain", "writes_log", "plain", "search_path")
	var notCommitted int
	e.settled()
	require.NoError(t, e.db.QueryRow(context.Background(), `SELECT count(*) FROM coordinator_transactions
WHERE request_id LIKE 'nb-d-%' AND request_id IN (SELECT id FROM orders) AND state <> 'committed'`).Scan(&notCommitted))
	assert.Zero(t, notCommitted, "a neighbour rewrote committed requests' log rows")

	var decoyRows, children int
	require.NoError(t, e.db.QueryRow(context.Background(), "SELECT count(*) FROM "+decoy+".orders").Scan(&decoyRows))
	assert.Zero(t, decoyRows, "a neighbour's search_path reached another request's statements")
	require.NoError(t, e.db.QueryRow(context.Background(), "SELECT count(*) FROM "+decoy+".children").Scan(&children))
	assert.Zero(t, children, "a child row whose deferred foreign key fails committed")
	assert.Empty(t, e.preparedLeft())
}
