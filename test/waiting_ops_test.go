package test

// What an operator sees of transactions waiting for their callers (X1): the in-doubt view
// lists them with issue waiting, not in doubt, and until when; the status and the metrics count
// them apart from the in-doubt ones; retry and resolve are refused, and abort aborts both
// sides as the caller's rollback would.

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/openapishape"
	"github.com/kpgtx/coordinator/service"
)

func TestWaitingOperator(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.MaxWaiting = 4 }})
	keep := e.prepare(t, "", "w-keep", 0)
	e.prepare(t, "", "w-abort", 0)

	v := e.do(http.MethodGet, "/v1/transactions?state=in-doubt", nil)
	require.Equal(t, http.StatusOK, v.Status, "%s", v.Raw)
	// The view as the API documents it: the entry's state is the log's (waiting), its row is
	// the transaction as GET shows it (prepared, waiting true).
	openapishape.Validate(t, openapishape.Load(t, "../api/openapi.yaml"),
		"/paths/~1v1~1transactions/get/responses/200/content/application~1json/schema", v.Raw)
	items, _ := v.get("transactions").([]any)
	byID := map[string]map[string]any{}
	for _, it := range items {
		m := it.(map[string]any)
		byID[fmt.Sprint(m["id"])] = m
	}
	for _, id := range []string{"w-keep", "w-abort"} {
		w := byID[id]
		require.NotNil(t, w, "%s listed: %s", id, v.Raw)
		assert.Equal(t, "waiting", w["issue"], "%s: not in doubt", id)
		assert.Equal(t, "waiting", w["state"])
		if row, ok := w["log"].(map[string]any); assert.True(t, ok, "%s: its log row", id) {
			assert.Equal(t, "prepared", row["state"], "%s: the row as GET shows it", id)
			assert.Equal(t, true, row["waiting"], "%s", id)
		}
		assert.Equal(t, []any{"abort"}, w["actions"])
		assert.Contains(t, w["hint"], "waiting for its caller's commit or rollback until ")
	}
	assert.Len(t, items, 2, "nothing else is listed (their Kafka transactions are theirs): %s", v.Raw)

	st := e.do(http.MethodGet, "/v1/status", nil)
	require.Equal(t, http.StatusOK, st.Status, "%s", st.Raw)
	assert.Equal(t, "2", st.str("waiting", "count"), "%s", st.Raw)
	assert.Equal(t, "2", st.str("waiting", "self"))
	assert.NotEmpty(t, st.str("waiting", "oldest_decide_by"))
	assert.Equal(t, "0", st.str("in_doubt", "count"), "a waiting transaction is not in doubt")

	m := e.scrape(t)
	assert.Equal(t, 2.0, m.val(t, "kpgtx_waiting_transactions"))
	assert.Positive(t, m.val(t, "kpgtx_waiting_oldest_deadline_seconds"))
	assert.Equal(t, 4.0, m.val(t, "kpgtx_waiting_max"))
	assert.Zero(t, m.val(t, "kpgtx_waiting_deadline_aborts_total"))
	assert.Zero(t, m.val(t, "kpgtx_in_doubt_transactions", "state", "prepared"))
	assert.Zero(t, m.val(t, "kpgtx_in_doubt_oldest_age_seconds"))

	// The console: the in-doubt list and the transaction page say until when it waits; the
	// status strip counts them.
	t.Run("console", func(t *testing.T) {
		b := newBrowser(t)
		b.navigate(e.srv.URL + "/ui/#/in-doubt")
		row := `tr[data-key="w-keep"] `
		b.visible(row)
		assert.Equal(t, "waiting", b.text(row+"td.issue"))
		assert.Contains(t, b.text(row+"td.state"), "waiting until ")
		assert.Equal(t, "abort", b.text(row+"td.actions"))
		assert.Regexp(t, `(?i)^waiting\s*2 · .*earliest deadline .* \(in [0-9]+s\)`, b.text("#health-waiting"))
		assert.Contains(t, b.text("#health-in-doubt"), "0")
		b.navigate(e.srv.URL + "/ui/#/txn/w-keep")
		b.visible("#txn-waiting")
		assert.Contains(t, b.text("#txn-waiting"), "Waiting for its caller's commit or rollback until ")
		assert.Equal(t, []string{"abort"}, eval[[]string](b, `[...document.querySelectorAll('#actions button')].map((x) => x.dataset.action)`))
		assert.Empty(t, b.Problems(), "the pages reported no errors")
	})

	// Retry and resolve do not apply; the row still waits.
	rt := e.do(http.MethodPost, "/v1/transactions/w-keep/retry", map[string]any{})
	assert.Equal(t, http.StatusConflict, rt.Status, "%s", rt.Raw)
	assert.Contains(t, rt.str("error", "message"), "retry does not apply")
	rs := e.do(http.MethodPost, "/v1/transactions/w-keep/resolve", map[string]any{"outcome": "aborted", "reason": "x"})
	assert.Equal(t, http.StatusConflict, rs.Status, "%s", rs.Raw)
	g := e.do(http.MethodGet, "/v1/transactions/w-keep", nil)
	assert.Equal(t, true, g.get("waiting"), "%s", g.Raw)

	// Abort: both sides aborted; the caller's commit then gets the abort.
	ab := e.do(http.MethodPost, "/v1/transactions/w-abort/abort", map[string]any{"reason": "stuck caller"})
	require.Equal(t, http.StatusOK, ab.Status, "%s", ab.Raw)
	assert.Equal(t, "aborted", ab.str("state"), "%s", ab.Raw)
	assert.Contains(t, ab.str("error", "message"), "aborted by operator")

	// The other still waits for its caller, whose commit goes through.
	c := e.decide("", "w-keep", "commit", keep.str("prepared_state"))
	require.Equal(t, http.StatusOK, c.Status, "%s", c.Raw)
	rows, recs := e.sides(t, "w-abort")
	assert.Zero(t, rows)
	assert.Zero(t, recs)
	assert.Empty(t, e.preparedLeft(), "nothing left prepared")
}
