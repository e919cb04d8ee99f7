package test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func order(e *env, id string, total any) map[string]any {
	return map[string]any{
		"id": id,
		"sql": []any{map[string]any{
			"statement": "INSERT INTO orders (id, total) VALUES ($1, $2)",
			"args":      []any{id, total},
		}},
		"kafka": []any{map[string]any{
			"topic": e.topic, "key": id, "value": fmt.Sprintf(`{"total":%v}`, total),
			"headers": map[string]string{"source": "test"},
		}},
	}
}

func TestCommitBothSides(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	r := e.post(order(e, "o-1", 10))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	assert.Equal(t, "committed", r.str("state"))
	assert.Equal(t, "o-1", r.str("id"))

	// SQL side.
	assert.Equal(t, 1, countRows(t, e.db, "o-1"))
	// Kafka side: the record is at the offset the API returned, visible to read_committed.
	recs := r.get("kafka", "records").([]any)
	require.Len(t, recs, 1)
	rec := recs[0].(map[string]any)
	got := e.committedRecords(e.topic)
	key := fmt.Sprintf("%v/%v", rec["partition"], rec["offset"])
	require.Contains(t, got, key)
	assert.Equal(t, "o-1", string(got[key].Key))
	assert.Equal(t, `{"total":10}`, string(got[key].Value))
	require.Len(t, got[key].Headers, 1)
	assert.Equal(t, "source", got[key].Headers[0].Key)

	// The ids the log keeps for recovery.
	assert.NotEmpty(t, r.str("kafka", "transactional_id"))
	assert.Equal(t, fmt.Sprintf("%v:%v", r.get("kafka", "producer_id"), r.get("kafka", "producer_epoch")), r.str("kafka", "prepared_state"))

	// The log row, through the API.
	g := e.do(http.MethodGet, "/v1/transactions/o-1", nil)
	require.Equal(t, http.StatusOK, g.Status)
	assert.Equal(t, "committed", g.str("state"))
	assert.Empty(t, e.preparedLeft())
}

// A request chooses its transaction's isolation level with a leading SET TRANSACTION, as it
// would in PostgreSQL: its statements run at that level, and it commits on both sides.
func TestIsolationLevelChosen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	req := order(e, "iso-1", 5)
	req["sql"] = append([]any{map[string]any{"statement": "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"}},
		append(req["sql"].([]any), map[string]any{"statement": "SELECT current_setting('transaction_isolation') AS iso"})...)
	r := e.post(req)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	results, _ := r.get("sql").([]any)
	require.Len(t, results, 3, "a result for every statement: %s", r.Raw)
	rows, _ := results[2].(map[string]any)["rows"].([]any)
	require.Len(t, rows, 1, "%s", r.Raw)
	assert.Equal(t, "serializable", rows[0].(map[string]any)["iso"], "%s", r.Raw)
	assert.Equal(t, 1, countRows(t, e.db, "iso-1"))
	assert.Equal(t, 1, e.committedWithKey("iso-1"), "its record committed once")
}

// A commit is answered before its final log write (coord/finals.go). Every read that follows
// the answer on the instance that gave it, a GET and the same request sent again, must still say
// committed, with the answer's stamps: under load (shared Kafka and SQL transactions), each
// answer is read back at once.
func TestCommittedAnswerReadBackAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	const clients, each = 16, 12
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("rb-%d-%d", c, i)
				body := order(e, id, i)
				r := e.postQuiet(body)
				if r.Status != http.StatusOK {
					t.Errorf("%s: status %d: %s", id, r.Status, r.Raw)
					continue
				}
				got, err := e.send(http.MethodGet, "/v1/transactions/"+id, nil)
				if assert.NoError(t, err) {
					assert.Equal(t, "committed", got.str("state"), "%s: GET right after the answer", id)
					assert.Equal(t, r.str("updated_at"), got.str("updated_at"), "%s: the answer's stamp is the row's", id)
					assert.Equal(t, r.str("finished_at"), got.str("finished_at"), id)
				}
				again := e.postQuiet(body)
				assert.Equal(t, http.StatusOK, again.Status, "%s: the same request again: %s", id, again.Raw)
				assert.Equal(t, "committed", again.str("state"), id)
			}
		})
	}
	wg.Wait()
	assert.Empty(t, e.preparedLeft())
}
