package test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/service"
)

// TestConcurrentMixed sends 64 requests at once, half of them designed to fail in different
// places (SQL constraint, unknown topic, oversized record, bad SQL), and checks every one of
// them on both sides.
func TestConcurrentMixed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{poolSize: 16, configure: func(c *service.Config) { c.MaxBodyBytes = 4 << 20 }})
	ctx := context.Background()
	_, err := e.db.Exec(ctx, "INSERT INTO orders (id, total) VALUES ('taken', 0)")
	require.NoError(t, err)

	const n = 64
	type result struct {
		id      string
		fail    bool
		status  int
		records []any
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("c-%02d", i)
			req := order(e, id, i)
			fail := i%2 == 1
			if fail {
				switch i % 8 {
				case 1: // unique violation on the second statement
					req["sql"] = append(req["sql"].([]any), map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('taken', 1)"})
				case 3: // unknown topic on the second record
					req["kafka"] = append(req["kafka"].([]any), map[string]any{"topic": e.prefix + "-missing", "value": "x"})
				case 5: // a record built from a result that is not there (P2: the insert returns no row)
					req["kafka"] = append(req["kafka"].([]any), map[string]any{"topic": e.topic,
						"value": map[string]any{"type": "json", "from": "sql[0].rows[0]"}})
				case 7: // SQL error after the row was written
					req["sql"] = append(req["sql"].([]any), map[string]any{"statement": "SELECT 1/0"})
				}
			}
			r := e.postQuiet(req)
			results[i] = result{id: id, fail: fail, status: r.Status}
			if r.Status == http.StatusOK {
				results[i].records, _ = r.get("kafka", "records").([]any)
			}
		}()
	}
	wg.Wait()

	committed := e.committedRecords(e.topic)
	byKey := map[string][]string{}
	for pos, r := range committed {
		byKey[string(r.Key)] = append(byKey[string(r.Key)], pos)
	}
	for _, r := range results {
		rows := countRows(t, e.db, r.id)
		if r.fail {
			assert.Equal(t, http.StatusConflict, r.status, "%s should abort", r.id)
			assert.Zero(t, rows, "%s: aborted but rows present", r.id)
			assert.Empty(t, byKey[r.id], "%s: aborted but records visible to read_committed", r.id)
			continue
		}
		assert.Equal(t, http.StatusOK, r.status, "%s should commit", r.id)
		assert.Equal(t, 1, rows, "%s: committed but no row", r.id)
		require.Len(t, byKey[r.id], 1, "%s: committed records, exactly once", r.id)
		require.Len(t, r.records, 1)
		m := r.records[0].(map[string]any)
		assert.Equal(t, fmt.Sprintf("%v/%v", m["partition"], m["offset"]), byKey[r.id][0], "%s: offset as reported", r.id)
	}
	assert.Empty(t, e.preparedLeft())
	e.settled()
	var states []string
	rows, err := e.db.Query(ctx, "SELECT state || ':' || count(*) FROM coordinator_transactions GROUP BY state ORDER BY state")
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		states = append(states, s)
	}
	assert.Equal(t, []string{"aborted:32", "committed:32"}, states)
	// The requests ran together, so Kafka transactions were shared (coord/batch.go), with the
	// failing ones inside them: the checks above hold for the shared path.
	m := e.scrape(t)
	assert.Positive(t, m.val(t, "kpgtx_kafka_shared_transaction_members_count"),
		"no Kafka transaction was shared")
	for _, phase := range []string{"slot_wait", "await_begins"} {
		assert.Positive(t, m.val(t, "kpgtx_phase_duration_seconds_count", "phase", phase),
			"a shared Kafka transaction observes phase %s", phase)
	}
	// And PostgreSQL transactions too (coord/sharedsql.go), the SQL failures among their
	// members: a failing member was rolled back to its savepoint and ran alone.
	assert.Positive(t, m.val(t, "kpgtx_sql_shared_transaction_members_count"),
		"no PostgreSQL transaction was shared")
}
