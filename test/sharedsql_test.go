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
// commits). Every request ends atomic with a true answer.
func TestSharedSQLNeighbours(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{poolSize: 16})
	// A decoy table under the same name: a neighbour's search_path reaching the next member
	// would send that member's rows there, silently.
	decoy := e.prefix + "_decoy"
	_, err := e.db.Exec(context.Background(), "CREATE SCHEMA "+decoy+"; CREATE TABLE "+decoy+".orders (LIKE orders)")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = e.db.Exec(context.Background(), "DROP SCHEMA "+decoy+" CASCADE") })
	const n = 64
	status := make([]int, n)
	kind := func(i int) string { return [...]string{"plain", "search_path", "same_key", "timeout"}[i%4] }
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("nb-%02d", i)
			req := order(e, id, i)
			var extra string
			switch kind(i) {
			case "search_path":
				extra = "SELECT pg_catalog.set_config('search_path', '" + decoy + "', true)"
			case "timeout":
				extra = "SELECT pg_catalog.set_config('statement_timeout', '1', true)"
			case "same_key":
				extra = "INSERT INTO orders (id, total) VALUES ('nb-same', 0)"
			}
			if extra != "" {
				req["sql"] = append(req["sql"].([]any), map[string]any{"statement": extra})
			}
			status[i] = e.postQuiet(req).Status
		})
	}
	wg.Wait()

	byKey := map[string]int{}
	for _, r := range e.committedRecords(e.topic) {
		byKey[string(r.Key)]++
	}
	same := 0
	for i := range n {
		id := fmt.Sprintf("nb-%02d", i)
		rows := countRows(t, e.db, id)
		if kind(i) == "same_key" && status[i] != http.StatusOK {
			assert.Equal(t, http.StatusConflict, status[i], "%s", id)
			assert.Zero(t, rows, "%s: aborted but its row is there", id)
			assert.Zero(t, byKey[id], "%s: aborted but its record is visible", id)
			continue
		}
		if kind(i) == "same_key" {
			same++
		}
		assert.Equal(t, http.StatusOK, status[i], "%s (%s) should commit", id, kind(i))
		assert.Equal(t, 1, rows, "%s: committed but no row", id)
		assert.Equal(t, 1, byKey[id], "%s: its record committed exactly once", id)
	}
	assert.Equal(t, 1, same, "exactly one of the requests inserting the same key commits")
	assert.Equal(t, 1, countRows(t, e.db, "nb-same"))
	var decoyRows int
	require.NoError(t, e.db.QueryRow(context.Background(), "SELECT count(*) FROM "+decoy+".orders").Scan(&decoyRows))
	assert.Zero(t, decoyRows, "a neighbour's search_path reached another request's statements")
	assert.Empty(t, e.preparedLeft())
	assert.Positive(t, e.scrape(t).val(t, "kpgtx_sql_shared_transaction_members_count"),
		"no PostgreSQL transaction was shared")
}
