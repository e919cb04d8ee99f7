package test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/api"
	"github.com/kpgtx/coordinator/service"
)

// Tests of the web console (/ui) in a real browser, against a coordinator on the real services
// with tokens: the in-doubt list with its filters and paging, one transaction's page, operator
// actions behind a confirmation (resolve of a heuristic transaction, abort of an active one),
// refusals (an abort Kafka's decision forbids, a read-only token, a forged cross-site form),
// each checked in the page and on the server afterwards.

// serveAs starts an in-process coordinator as instance name on the test's store, with the
// recovery loop idle after its startup pass (as noRecoveryLoop does for the binary).
func (e *env) serveAs(t *testing.T, name string, configure func(*service.Config)) {
	t.Helper()
	cfg := e.cfg
	cfg.Instance = name
	cfg.RecoveryInterval = time.Hour
	cfg.InstanceLease = 2 * time.Hour
	if configure != nil {
		configure(&cfg)
	}
	// The longer lease and recovery interval raise the retention's floor above the one
	// newStore chose: the retention follows, or the configuration is refused.
	if cfg.Retention != 0 {
		cfg.Retention = max(cfg.Retention, cfg.RetentionFloor())
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := service.Open(context.Background(), cfg, logger)
	require.NoError(t, err)
	e.svc = svc
	e.srv = httptest.NewServer(svc.Handler())
	loopCtx, stopLoop := context.WithCancel(context.Background())
	svc.Start(loopCtx)
	t.Cleanup(func() {
		stopLoop()
		svc.Recovery.Wait()
		e.srv.Close()
		svc.Close()
	})
}

// inDoubtKeys lists the in-doubt view's entries by key, in the API's order.
func inDoubtKeys(t *testing.T, base, token string) []string {
	t.Helper()
	r, _ := sendAs(t, token, http.MethodGet, base+"/v1/transactions?state=in-doubt&limit=1000", "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	var keys []string
	for _, it := range r.get("transactions").([]any) {
		keys = append(keys, entryKey(it.(map[string]any)))
	}
	return keys
}

func TestConsole(t *testing.T) {
	t.Parallel()
	b := newBrowser(t) // first: without a browser there is nothing to test
	e := newStore(t, envOpts{})
	ctx := context.Background()

	// act: killed after PREPARE, before prepared was logged: active, a gid prepared.
	e.killedAt(t, "after_prepare", "act")
	e.postponeRecovery(t)
	// prep: killed after prepared was logged; Kafka's transaction stays open (Kafka decides).
	e.killedAt(t, "after_log_prepared", "prep", noRecoveryLoop...)
	e.postponeRecovery(t)
	// mixed: killed after prepared was logged, its gid rolled back by hand; the console's
	// coordinator's startup pass commits Kafka, finds the gid gone: heuristic_mixed.
	e.killedAt(t, "after_log_prepared", "mixed", noRecoveryLoop...)
	_, err := e.db.Exec(ctx, "ROLLBACK PREPARED '"+e.prefix+"_mixed@default'")
	require.NoError(t, err)

	admin, viewer := newSecret("ops"), newSecret("viewer")
	toks, err := api.ParseTokens(fmt.Sprintf("ops:admin:%s;viewer:read:%s", admin, viewer))
	require.NoError(t, err)
	e.serveAs(t, "a", func(c *service.Config) { c.Tokens = toks })
	base := e.srv.URL
	state := func(id string) string {
		t.Helper()
		r, _ := sendAs(t, admin, http.MethodGet, base+"/v1/transactions/"+id, "")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
		return r.str("state")
	}
	require.Equal(t, "heuristic_mixed", state("mixed"), "the startup pass found the hand-rolled-back gid")
	require.Equal(t, "active", state("act"))
	require.Equal(t, "prepared", state("prep"))
	keys := inDoubtKeys(t, base, admin)
	require.Subset(t, keys, []string{"act", "prep", "mixed"})

	// GET /v1/status, which the health strip shows: the caller, the instances and their
	// leases, the pools, and the in-doubt view's size.
	for _, c := range []struct{ token, name, role string }{{admin, "ops", "admin"}, {viewer, "viewer", "read"}} {
		st, _ := sendAs(t, c.token, http.MethodGet, base+"/v1/status", "")
		require.Equal(t, http.StatusOK, st.Status, "%s", st.Raw)
		assert.Equal(t, c.name, st.str("caller", "name"))
		assert.Equal(t, []string{c.role}, strs(st.get("caller", "roles")))
		assert.Equal(t, "true", st.str("caller", "auth"))
		assert.Equal(t, "a", st.str("instance"))
		insts, _ := st.get("instances").([]any)
		require.NotEmpty(t, insts, "%s", st.Raw)
		self := insts[0].(map[string]any)
		assert.Equal(t, "a", self["id"], "this instance first")
		assert.Equal(t, true, self["self"])
		assert.Equal(t, false, self["expired"])
		assert.Equal(t, "7200", fmt.Sprint(self["lease_seconds"]))
		assert.Equal(t, fmt.Sprint(len(keys)), st.str("in_doubt", "count"))
		assert.NotEqual(t, "0", st.str("in_doubt", "oldest_age_seconds"))
		assert.Equal(t, "8", st.str("pools", "kafka", "size"))
		assert.Equal(t, "1", st.str("pools", "kafka", "quarantined"), "prep's transactional id is withheld")
		assert.Equal(t, "40", st.str("pools", "log", "max"))
		assert.NotEmpty(t, st.get("pools", "databases", "default"))
		assert.NotEqual(t, "0", st.str("recovery", "passes"), "the startup pass")
	}
	st, _ := sendAs(t, "", http.MethodGet, base+"/v1/status", "")
	assert.Equal(t, http.StatusUnauthorized, st.Status, "the status needs a token")

	// Sign in: the console asks for a token; a wrong one is refused; the token stays out of the
	// URL and out of cookies.
	b.navigate(base + "/ui/#/in-doubt")
	b.visible("#login")
	b.screenshot("login")
	b.do("type a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), newSecret("wrong")), chromedp.Click(chromedp.CSS("#login-submit")))
	assert.Contains(t, b.text("#login-error"), "not accepted")
	b.do("type the admin token", chromedp.SendKeys(chromedp.CSS("#token"), admin), chromedp.Click(chromedp.CSS("#login-submit")))
	b.visible(`tr[data-key="mixed"]`)
	assert.Equal(t, "ops", b.text("#who-name"))
	assert.NotContains(t, eval[string](b, "location.href"), admin, "the token is not in the URL")
	assert.Empty(t, eval[string](b, "document.cookie"), "no cookie")
	assert.Equal(t, admin, eval[string](b, "sessionStorage.getItem('kpgtx.console.token')"), "the token is in the tab's session storage")

	t.Run("list", func(t *testing.T) {
		b := b.in(t)
		assert.Equal(t, keys, b.keys(), "the same entries as the API, in its order")
		rows := []struct{ key, state, issue string }{
			{"act", "active", "in_doubt"},
			{"prep", "prepared", "in_doubt"},
			{"mixed", "heuristic_mixed", "heuristic"},
		}
		for _, r := range rows {
			row := `tr[data-key="` + r.key + `"] `
			assert.Equal(t, r.state, b.text(row+"td.state"), r.key)
			assert.Equal(t, r.issue, b.text(row+"td.issue"), r.key)
			assert.Equal(t, "a", b.text(row+"td.instance"), r.key)
			assert.Regexp(t, `^[0-9]+$`, b.text(row+"td.attempts"), r.key)
			assert.Regexp(t, `^[0-9]+(s|m [0-9]+s)$`, b.text(row+"td.age"), r.key)
		}
		assert.Equal(t, "retry", b.text(`tr[data-key="prep"] td.actions`), "abort is not offered while Kafka has it open")
		assert.Contains(t, b.text("#health-in-doubt"), fmt.Sprint(len(keys)))
		assert.Contains(t, b.text("#health-instances"), "a (this)")
		assert.Contains(t, b.text("#health-pools"), "kafka ids")
		checkClipped(t, b, `tr[data-key="prep"] td.what .clip`)
		b.screenshot("list")

		// The age filter: nothing is an hour old.
		b.do("filter by age", chromedp.SetValue(chromedp.CSS("#filter-age"), "1h"), chromedp.Click(chromedp.CSS("#filter-apply")))
		assert.Equal(t, "Nothing is in doubt.", b.text("#list-empty"))
		assert.Contains(t, eval[string](b, "location.hash"), "older_than=1h")
		// The state filter: the log's prepared rows.
		b.setHash("#/?state=prepared&limit=25")
		b.until("the prepared rows", `document.querySelector('tr.entry[data-key="prep"]') !== null`)
		assert.Equal(t, []string{"prep"}, b.keys())

		// Paging with the API's cursor: two per page, forth and back.
		b.setHash("#/?state=in-doubt&limit=2")
		b.until("page 1", `document.querySelectorAll('tr.entry').length === 2 && document.getElementById('page-number')?.textContent === 'Page 1'`)
		var paged []string
		paged = append(paged, b.keys()...)
		for page := 2; !b.hasAttr("#page-next", "disabled"); page++ {
			require.LessOrEqual(t, page, len(keys), "paging does not end")
			b.click("#page-next")
			b.until(fmt.Sprintf("page %d", page), fmt.Sprintf(`document.getElementById('page-number')?.textContent === 'Page %d' && document.querySelector('tr.entry, #list-empty') !== null`, page))
			paged = append(paged, b.keys()...)
		}
		assert.Equal(t, keys, paged, "the pages hold every entry once, in order")
		b.click("#page-prev")
		b.until("back a page", `document.getElementById('page-number')?.textContent === 'Page `+fmt.Sprint((len(keys)+1)/2-1)+`'`)
	})

	t.Run("transaction", func(t *testing.T) {
		b := b.in(t)
		b.setHash("#/in-doubt")
		b.click(`tr[data-key="mixed"] a.txn-link`)
		b.until("the page of mixed", `document.getElementById('txn-id')?.textContent === 'mixed'`)
		assert.Equal(t, "heuristic_mixed", b.text("#txn-state"))
		assert.Contains(t, b.text("#txn-sql"), e.prefix+"_mixed@default", "the SQL gid")
		kafka := b.text("#kafka-ids")
		assert.Contains(t, kafka, e.loggedTransactionalID(t, "mixed"), "the transactional id")
		var pid string
		require.NoError(t, e.db.QueryRow(ctx, `SELECT producer_id::text FROM coordinator_transactions WHERE request_id = 'mixed'`).Scan(&pid))
		assert.Contains(t, kafka, pid, "the producer id, exactly")
		assert.Regexp(t, `(?s)`+e.topic+`\s*[0-2]\s*[0-9]+`, b.text("#txn-kafka"), "the record's topic, partition and offset")
		checkRecordTimes(t, b)
		assert.Contains(t, b.text("#txn-error"), "rolled back by someone else", "the evidence behind the heuristic state")
		assert.NotEmpty(t, b.texts("#events tbody tr"), "the event history")
		assert.Contains(t, b.text("#evidence"), "How it became heuristic_mixed")
		b.screenshot("transaction")
	})

	t.Run("resolve with confirmation", func(t *testing.T) {
		b := b.in(t)
		b.click(`button[data-action="resolve"]`)
		b.visible("#confirm-ok")
		assert.True(t, b.hasAttr("#confirm-ok", "disabled"), "no outcome or reason yet")
		b.do("choose the outcome", chromedp.Click(chromedp.CSS(`#confirm-outcome input[value="committed"]`)))
		assert.True(t, b.hasAttr("#confirm-ok", "disabled"), "the reason is required")
		b.do("give the reason", chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "row re-inserted by hand, ticket OPS-7"))
		assert.False(t, b.hasAttr("#confirm-ok", "disabled"))
		b.screenshot("confirm-resolve")
		b.click("#confirm-ok")
		b.until("committed", `document.querySelector('#txn-state .v-committed') !== null`)
		assert.Contains(t, b.text("#banner.ok"), "now committed")
		assert.Contains(t, b.text("#events tr.admin-event"), "ops")

		require.Equal(t, "committed", state("mixed"))
		r, _ := sendAs(t, admin, http.MethodGet, base+"/v1/transactions/mixed", "")
		ev := lastAdminEvent(t, r)
		assert.Equal(t, "resolve", ev["action"])
		assert.Equal(t, "ops", ev["by"], "recorded with who did it")
		assert.Equal(t, "row re-inserted by hand, ticket OPS-7", ev["reason"])
		assert.Equal(t, "committed", ev["outcome"])
	})

	t.Run("abort an active transaction, cancelled then confirmed", func(t *testing.T) {
		b := b.in(t)
		b.setHash("#/txn/act")
		b.until("the page of act", `document.querySelector('#txn-state .v-active') !== null`)
		b.click(`button[data-action="abort"]`)
		b.visible("#confirm-cancel")
		b.click("#confirm-cancel")
		b.do("the dialog closes", chromedp.WaitNotVisible(chromedp.CSS("#confirm")))
		assert.Equal(t, "active", state("act"), "cancel does nothing")
		assert.Contains(t, e.preparedLeft(), e.prefix+"_act@default")

		b.click(`button[data-action="abort"]`)
		b.do("give a reason", chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "customer cancelled"))
		b.click("#confirm-ok")
		b.until("aborted", `document.querySelector('#txn-state .v-aborted') !== null`)
		assert.Contains(t, b.text("#banner.ok"), "now aborted")

		require.Equal(t, "aborted", state("act"))
		assert.NotContains(t, e.preparedLeft(), e.prefix+"_act@default", "the prepared gid was rolled back")
		r, _ := sendAs(t, admin, http.MethodGet, base+"/v1/transactions/act", "")
		ev := lastAdminEvent(t, r)
		assert.Equal(t, "abort", ev["action"])
		assert.Equal(t, "ops", ev["by"])
		assert.Equal(t, "customer cancelled", ev["reason"])
		assert.Contains(t, r.str("error", "message"), "aborted by operator ops (customer cancelled)")
	})

	t.Run("abort refused where Kafka decides", func(t *testing.T) {
		b := b.in(t)
		b.setHash("#/txn/prep")
		b.until("the page of prep", `document.querySelector('#txn-state .v-prepared') !== null && document.getElementById('txn-hint') !== null`)
		assert.Contains(t, b.text("#txn-kafka-open"), "Ongoing", "Kafka has it open")
		assert.Contains(t, b.text("#evidence"), e.prefix+"_prep@default", "the gid in pg_prepared_xacts")
		b.click(`button[data-action="abort"]`)
		b.click("#confirm-ok")
		banner := b.text("#banner.error")
		assert.Contains(t, banner, "abort refused")
		assert.Contains(t, banner, "409 not_allowed")
		assert.Contains(t, banner, "Kafka decides")
		b.until("the page again", `document.querySelector('#txn-state .v-prepared') !== null`)
		b.screenshot("refused")

		require.Equal(t, "prepared", state("prep"), "nothing changed")
		assert.Contains(t, e.preparedLeft(), e.prefix+"_prep@default")
		r, _ := sendAs(t, admin, http.MethodGet, base+"/v1/transactions/prep", "")
		ev := lastAdminEvent(t, r)
		assert.Equal(t, "refused", ev["result"], "the refusal is recorded")
		assert.Equal(t, "ops", ev["by"])
	})

	t.Run("read-only token", func(t *testing.T) {
		b := b.in(t)
		before, _ := sendAs(t, admin, http.MethodGet, base+"/v1/transactions/prep", "")
		b.click("#sign-out")
		b.visible("#login")
		assert.Empty(t, eval[string](b, "sessionStorage.getItem('kpgtx.console.token') || ''"), "signing out forgets the token")
		b.do("type the read-only token", chromedp.SendKeys(chromedp.CSS("#token"), viewer), chromedp.Click(chromedp.CSS("#login-submit")))
		b.until("the page of prep", `document.querySelector('#txn-state .v-prepared') !== null && document.getElementById('read-only') !== null`)
		assert.Equal(t, "viewer", b.text("#who-name"))
		assert.Contains(t, b.text("#read-only"), "lacks the admin role")
		for _, a := range []string{"retry", "abort"} {
			assert.True(t, b.hasAttr(`button[data-action="`+a+`"]`, "disabled"), "%s is disabled", a)
		}
		b.screenshot("read-only")
		// The server refuses the action whatever the page shows.
		status := eval[int](b, `fetch('/v1/transactions/prep/abort', {method: 'POST', headers: {Authorization: 'Bearer ' + sessionStorage.getItem('kpgtx.console.token')}}).then((r) => r.status)`)
		assert.Equal(t, http.StatusForbidden, status)
		after, _ := sendAs(t, admin, http.MethodGet, base+"/v1/transactions/prep", "")
		assert.Equal(t, "prepared", after.str("state"))
		assert.Equal(t, len(before.get("events").([]any)), len(after.get("events").([]any)), "nothing was done, nothing recorded")
	})

	t.Run("cross-site form refused", func(t *testing.T) {
		b := b.in(t)
		b.navigate(crossSitePage(t, base+"/v1/transactions/prep/abort"))
		b.until("the coordinator's answer", `location.href.startsWith('`+base+`')`)
		assert.Contains(t, b.text("body"), "cross_origin")
		assert.Equal(t, "prepared", state("prep"))
	})

	assert.Empty(t, b.Problems(), "the pages reported no errors (exceptions, CSP violations)")
}

// checkRecordTimes: the Kafka card's record timestamps are UTC with milliseconds, each on one
// line, inside its card.
func checkRecordTimes(t *testing.T, b *browser) {
	t.Helper()
	type cell struct {
		Text       string  `json:"text"`
		WhiteSpace string  `json:"whiteSpace"`
		Height     float64 `json:"height"`
		Line       float64 `json:"line"`
		Right      float64 `json:"right"`
		CardRight  float64 `json:"cardRight"`
	}
	cells := eval[[]cell](b, `Array.from(document.querySelectorAll('#txn-kafka #kafka-records td.time')).map((td) => {
		const r = document.createRange();
		r.selectNodeContents(td);
		const text = r.getBoundingClientRect(), cs = getComputedStyle(td);
		return {text: td.textContent, whiteSpace: cs.whiteSpace, height: text.height,
			line: parseFloat(cs.lineHeight) || 1.2 * parseFloat(cs.fontSize), right: td.getBoundingClientRect().right,
			cardRight: document.getElementById('txn-kafka').getBoundingClientRect().right};
	})`)
	require.NotEmpty(t, cells, "the records' timestamps")
	for _, c := range cells {
		assert.Regexp(t, `^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$`, c.Text, "a record's timestamp, in UTC")
		assert.Equal(t, "nowrap", c.WhiteSpace, "%s: kept on one line", c.Text)
		assert.Less(t, c.Height, 1.5*c.Line, "%s: one line high (%.0fpx, a line is %.0fpx)", c.Text, c.Height, c.Line)
		assert.LessOrEqual(t, c.Right, c.CardRight, "%s: inside its card", c.Text)
	}
}

// setHash moves the console to another view, as a link would.
func (b *browser) setHash(hash string) {
	b.t.Helper()
	eval[string](b, fmt.Sprintf(`location.hash = %q`, hash))
}

// until waits until the JavaScript condition holds in the page.
func (b *browser) until(what, cond string) {
	b.t.Helper()
	browserRun(b, "wait for "+what, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(stepTimeout)))
}

// keys are the data-key of the list's rows, in order.
func (b *browser) keys() []string {
	b.t.Helper()
	return eval[[]string](b, `Array.from(document.querySelectorAll('tr.entry')).map((r) => r.dataset.key)`)
}
