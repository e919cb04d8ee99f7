package test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNamespaces: two logs (two deployments) on one participant database under load. Log 2
// writes into log 1's schema too (its database "shared" is log 1's default database), so both
// write marker rows into one table and prepare transactions on one server. Each log claims its
// namespace (its gid prefix) in the database at startup: a third coordinator with its own log
// but log 1's prefix is refused. Under load, with recovery passes of both running every 200 ms
// and log 2 sweeping markers after 1 s, neither log rolls back or sweeps anything of the other:
// every request ends on both sides or neither, and log 1's markers stay.
func TestNamespaces(t *testing.T) {
	t.Parallel()
	e1 := newStore(t, envOpts{})
	e2 := newStore(t, envOpts{})
	e2.cfg.Databases = map[string]string{"shared": e1.cfg.DatabaseURL}
	n1 := e1.startNode(t, "a")
	n2 := e2.startNode(t, "a", "COORDINATOR_MARKER_AGE=1s")

	// A log of its own that asks for log 1's namespace is refused, naming the holder.
	e3 := newStore(t, envOpts{})
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	code, _, stderr := runCoordinator(t, e3.binaryEnv("c", listen, "COORDINATOR_GID_PREFIX="+e1.prefix), "serve")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, fmt.Sprintf("namespace %q (COORDINATOR_GID_PREFIX) is held by the log", e1.prefix))
	assert.Contains(t, stderr, "/"+e1.prefix+" (id ", "names the holder's database/schema")

	body2 := func(id, kind string) string {
		row := fmt.Sprintf(`{"database":"shared","statement":"INSERT INTO orders (id, total) VALUES ($1, 1)","args":[%q]}`, id)
		rec := fmt.Sprintf(`{"topic":%q,"key":%q,"value":"v"}`, e2.topic, id)
		switch kind {
		case "sql-only":
			return fmt.Sprintf(`{"id":%q,"sql":[%s]}`, id, row)
		case "fail":
			return fmt.Sprintf(`{"id":%q,"sql":[%s,{"database":"shared","statement":"SELECT 1/0"}],"kafka":[%s]}`, id, row, rec)
		}
		return fmt.Sprintf(`{"id":%q,"sql":[%s],"kafka":[%s]}`, id, row, rec)
	}
	ans1, ans2 := newAnswers(), newAnswers()
	kinds := []string{"order", "order", "sql-only", "fail"}
	var next atomic.Int64
	var wg sync.WaitGroup
	const perLog = 300
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > 2*perLog {
					return
				}
				kind := kinds[int(i)%len(kinds)]
				if w%2 == 0 {
					id := fmt.Sprintf("one%04d", i)
					n1.postRetrying(ans1, id, kind, e1.orderBody(id, kind))
				} else {
					id := fmt.Sprintf("two%04d", i)
					n2.postRetrying(ans2, id, kind, body2(id, kind))
				}
			}
		}()
	}
	wg.Wait()
	e1.waitResolved(t, time.Minute)
	e2.waitResolved(t, time.Minute)

	// Log 1 as usual.
	reqs1, hist1 := ans1.sent(t)
	c1, a1 := e1.verify(t, n1.base, reqs1)

	// Log 2: its rows are in log 1's schema, its records in its own topic.
	reqs2, hist2 := ans2.sent(t)
	records := map[string]int{}
	for _, r := range e2.committedRecords(e2.topic) {
		records[string(r.Key)]++
	}
	var c2, a2 int
	for id, s := range reqs2 {
		st := call(t, http.MethodGet, n2.base+"/v1/transactions/"+id, "").str("state")
		rows := countRows(t, e1.db, id)
		switch st {
		case "committed":
			c2++
			assert.Equal(t, 1, rows, "%s committed: row", id)
			if s.kind != "sql-only" {
				assert.Equal(t, 1, records[id], "%s committed: record", id)
			}
			assert.NotEqual(t, http.StatusConflict, s.status, "%s", id)
		case "aborted", "":
			a2++
			assert.Zero(t, rows, "%s %s: no row", id, st)
			assert.Zero(t, records[id], "%s %s: no record", id, st)
			assert.NotEqual(t, http.StatusOK, s.status, "%s", id)
		default:
			assert.Fail(t, "unexpected state", "%s: %s", id, st)
		}
	}
	assert.Empty(t, e2.preparedLeft())

	// Log 2's sweep (1 s) cleared its markers in the shared table; log 1's (1 min) are there.
	ctx := context.Background()
	markers := func(prefix string) int {
		var n int
		require.NoError(t, e1.db.QueryRow(ctx, `SELECT count(*) FROM coordinator_markers WHERE starts_with(gid, $1)`, prefix+"_").Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return markers(e2.prefix) == 0 }, 30*time.Second, 100*time.Millisecond,
		"log 2 sweeps its own markers")
	assert.Positive(t, markers(e1.prefix), "log 2's sweep left log 1's markers alone")
	t.Logf("log 1: %d requests (%d committed, %d aborted) answers %v; log 2: %d requests (%d committed, %d aborted) answers %v; log 1 markers kept: %d",
		len(reqs1), c1, a1, hist1, len(reqs2), c2, a2, hist2, markers(e1.prefix))
}
