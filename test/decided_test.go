package test

// D1 end to end: "answer": "decided" is answered 200 with the state committing at the decision,
// and the transaction ends committed on both sides; alone (c=1) and in shared batches.

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func (e *env) decidedBody(id string) map[string]any {
	return map[string]any{"id": id, "answer": "decided",
		"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{id}}},
		"kafka": []any{map[string]any{"topic": e.topic, "key": id, "value": "v"}}}
}

func TestDecidedAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	before := e.scrape(t)

	r := e.post(e.decidedBody("dec-1"))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	assert.Equal(t, "committing", r.str("state"), "answered at the decision")
	assert.NotEmpty(t, r.str("kafka", "transactional_id"), "the answer names the Kafka ids")
	// The answering instance's GET waits for phase 2 and the final write.
	g := e.do(http.MethodGet, "/v1/transactions/dec-1", nil)
	assert.Equal(t, "committed", g.str("state"), "%s", g.Raw)
	assert.Equal(t, 1, countRows(t, e.db, "dec-1"))
	assert.Equal(t, 1, e.committedWithKey("dec-1"))
	// Counted as the commit it is, never as a state in doubt.
	after := e.scrape(t)
	v0, _ := before.get("kpgtx_transactions_total", "state", "committed", "class", "none")
	assert.Equal(t, 1.0, after.val(t, "kpgtx_transactions_total", "state", "committed", "class", "none")-v0)
	_, counted := after.get("kpgtx_transactions_total", "state", "committing", "class", "none")
	assert.False(t, counted, "a decided answer is not counted committing")
	// The same id again: the stored outcome, whatever answer it asks for.
	again := e.post(map[string]any{"id": "dec-1", "sql": e.decidedBody("dec-1")["sql"], "kafka": e.decidedBody("dec-1")["kafka"]})
	require.Equal(t, http.StatusOK, again.Status, "%s", again.Raw)
	assert.Equal(t, "committed", again.str("state"))

	// One database, no Kafka: no phase 2, answered committed.
	one := e.post(map[string]any{"id": "dec-1p", "answer": "decided",
		"sql": []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('dec-1p', 1)"}}})
	require.Equal(t, http.StatusOK, one.Status, "%s", one.Raw)
	assert.Equal(t, "committed", one.str("state"))

	// "committed" is the default, said out loud.
	plain := e.post(map[string]any{"id": "dec-c", "answer": "committed",
		"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('dec-c', 1)"}},
		"kafka": []any{map[string]any{"topic": e.topic, "key": "dec-c", "value": "v"}}})
	require.Equal(t, http.StatusOK, plain.Status, "%s", plain.Raw)
	assert.Equal(t, "committed", plain.str("state"))

	for _, bad := range []any{"eventually", "", 1, true} {
		b := e.post(map[string]any{"id": "dec-bad", "answer": bad,
			"sql": []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('dec-bad', 1)"}}})
		require.Equal(t, http.StatusBadRequest, b.Status, "answer %v: %s", bad, b.Raw)
		assert.Equal(t, "answer", b.str("error", "field"), "%s", b.Raw)
	}
	assert.Zero(t, countRows(t, e.db, "dec-bad"), "a refused request runs nothing")

	// Concurrent: the requests share Kafka (and SQL) transactions; each is answered at its
	// batch's decision and ends committed on both sides.
	const n = 24
	var wg sync.WaitGroup
	states := make([]string, n)
	for i := range n {
		wg.Go(func() {
			r := e.postQuiet(e.decidedBody(fmt.Sprintf("dec-c%02d", i)))
			assert.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
			states[i] = r.str("state")
		})
	}
	wg.Wait()
	e.settled()
	for i := range n {
		id := fmt.Sprintf("dec-c%02d", i)
		assert.Contains(t, []string{"committing", "committed"}, states[i], id)
		assert.Equal(t, 1, countRows(t, e.db, id), id)
		assert.Equal(t, 1, e.committedWithKey(id), id)
		g := e.do(http.MethodGet, "/v1/transactions/"+id, nil)
		assert.Equal(t, "committed", g.str("state"), id)
	}
	assert.Empty(t, e.preparedLeft())
}
