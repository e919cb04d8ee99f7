package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Tests of the operator API: the in-doubt view (GET /v1/transactions?state=in-doubt) and the
// admin actions (retry, abort, resolve), against the binary.

// postponeRecovery pushes the next recovery attempt of every unfinished row an hour away, as a
// long backoff would: the rows stay in doubt while a coordinator serves, until an operator acts.
func (e *env) postponeRecovery(t *testing.T) {
	t.Helper()
	_, err := e.db.Exec(context.Background(), `UPDATE coordinator_transactions SET next_attempt_at = now() + interval '1 hour'
WHERE state IN ('active', 'aborting', 'prepared', 'committing')`)
	require.NoError(t, err)
}

// noRecoveryLoop keeps a node's recovery loop from running after the startup pass.
var noRecoveryLoop = []string{"COORDINATOR_RECOVERY_INTERVAL=1h", "COORDINATOR_INSTANCE_LEASE=2h"}

// killedAt runs a node that kills itself at the fault point while serving body, and waits
// for it to be gone.
func (e *env) killedAt(t *testing.T, fault, id string, extra ...string) {
	t.Helper()
	n := e.startNode(t, "a", append(extra, "COORDINATOR_FAULT="+fault)...)
	assert.Zero(t, n.post(e.orderBody(id, "order")), "%s: the fault point kills the process", id)
	n.waitExit(30 * time.Second)
}

// prepareOrphan leaves a prepared transaction with the coordinator's gid prefix and no log row.
func (e *env) prepareOrphan(t *testing.T, gid string) {
	t.Helper()
	ctx := context.Background()
	conn, err := e.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, q := range []string{"BEGIN", "INSERT INTO orders (id, total) VALUES ('" + gid + "', 1)", "PREPARE TRANSACTION '" + gid + "'"} {
		_, err = conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
}

// openKafkaTxn begins a Kafka transaction on the transactional id and produces one record to
// topic, leaving it open (as a stray producer on our id would); it is aborted at the end.
func (e *env) openKafkaTxn(t *testing.T, id, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.TransactionalID(id), kgo.TransactionTimeout(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		cl.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.BeginTransaction())
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("stray"), Value: []byte("v")}).FirstErr())
}

// inDoubtEntries lists the in-doubt view, following every page of limit entries.
func inDoubtEntries(t *testing.T, base, query string, limit int) []map[string]any {
	t.Helper()
	var out []map[string]any
	after := ""
	for page := 0; ; page++ {
		require.Less(t, page, 100, "paging does not end")
		q := "state=in-doubt&limit=" + fmt.Sprint(limit) + query
		if after != "" {
			q += "&after=" + url.QueryEscape(after)
		}
		r := call(t, http.MethodGet, base+"/v1/transactions?"+q, "")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
		assert.Empty(t, r.get("warnings"), "the view is complete")
		items, _ := r.get("transactions").([]any)
		require.LessOrEqual(t, len(items), limit)
		for _, it := range items {
			out = append(out, it.(map[string]any))
		}
		after = r.str("next")
		if after == "" {
			return out
		}
	}
}

// entryKey names an in-doubt entry: its id, or kafka:<transactional id>.
func entryKey(m map[string]any) string {
	if id, _ := m["id"].(string); id != "" {
		return id
	}
	k, _ := m["kafka"].(map[string]any)
	return fmt.Sprint("kafka:", k["transactional_id"])
}

func field(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func strs(v any) []string {
	out := []string{}
	for _, x := range v.([]any) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// lastAdminEvent returns the detail of the transaction's last event that records an operator
// action.
func lastAdminEvent(t *testing.T, r response) map[string]any {
	t.Helper()
	events, _ := r.get("events").([]any)
	require.NotEmpty(t, events, "events: %s", r.Raw)
	for i := len(events) - 1; i >= 0; i-- {
		d, _ := events[i].(map[string]any)["detail"].(map[string]any)
		if d["action"] != nil {
			return d
		}
	}
	require.FailNow(t, "no admin event", "%s", r.Raw)
	return nil
}

// requestedEvent is the last "requested" record of an action: written before the action ran.
func requestedEvent(t *testing.T, r response, action string) map[string]any {
	t.Helper()
	events, _ := r.get("events").([]any)
	for i := len(events) - 1; i >= 0; i-- {
		d, _ := events[i].(map[string]any)["detail"].(map[string]any)
		if d["action"] == action && d["result"] == "requested" {
			return d
		}
	}
	require.FailNow(t, "no requested event", "%s: %s", action, r.Raw)
	return nil
}

// TestAdminInDoubt builds every kind of in-doubt entry with real crashes and stray
// participants, checks that one view shows them all with their evidence, then resolves them
// with the admin actions: abort where it is safe, refused where Kafka decides, retry, and an
// operator's decision on a heuristic row, each recorded with who and why.
func TestAdminInDoubt(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{})
	ctx := context.Background()

	// act: killed after PREPARE, before prepared was logged: active, a gid prepared.
	e.killedAt(t, "after_prepare", "act")
	e.postponeRecovery(t)
	// mixed: killed after prepared was logged; someone rolls the gid back by hand; the next
	// start's recovery commits Kafka and finds the gid gone: heuristic_mixed.
	e.killedAt(t, "after_log_prepared", "mixed")
	gids := e.preparedLeft()
	require.Contains(t, gids, e.prefix+"_mixed@default")
	_, err := e.db.Exec(ctx, "ROLLBACK PREPARED '"+e.prefix+"_mixed@default'")
	require.NoError(t, err)
	// prep: killed after prepared was logged; Kafka's transaction stays open.
	e.killedAt(t, "after_log_prepared", "prep", noRecoveryLoop...)
	e.postponeRecovery(t)

	// The serving node: no recovery pass before the operator acts (the startup pass finds
	// nothing due).
	n := e.startNode(t, "a", noRecoveryLoop...)
	// Stray participants, after the startup pass: an orphan gid and an open Kafka transaction
	// on one of the pool's ids that no transaction uses (not the in-doubt ones: that would
	// fence them).
	e.prepareOrphan(t, e.prefix+"_handmade@default")
	prepTID, mixedTID := e.loggedTransactionalID(t, "prep"), e.loggedTransactionalID(t, "mixed")
	stray := ""
	for i := 7; i >= 0 && stray == ""; i-- {
		if id := fmt.Sprintf("%s-a-%d", e.prefix, i); id != prepTID && id != mixedTID {
			stray = id
		}
	}
	strayTopic := e.prefix + "-stray"
	e.createTopic(strayTopic, 1)
	e.openKafkaTxn(t, stray, strayTopic)

	var prepPID string
	require.NoError(t, e.db.QueryRow(ctx, `SELECT producer_id::text FROM coordinator_transactions WHERE request_id = 'prep'`).Scan(&prepPID))

	// One view, every kind, with its sources and evidence.
	all := inDoubtEntries(t, n.base, "", 100)
	byKey := map[string]map[string]any{}
	for _, m := range all {
		byKey[entryKey(m)] = m
	}
	t.Logf("in-doubt view: %v", slices.Collect(func(yield func(string) bool) {
		for _, m := range all {
			if !yield(fmt.Sprintf("%s=%v/%v%v", entryKey(m), m["state"], m["issue"], m["sources"])) {
				return
			}
		}
	}))
	views := []struct {
		key      string
		state    string
		issue    string
		sources  []string
		actions  []string
		pgGID    string // the prepared gid shown, if any
		kafkaTID string // the open Kafka transaction shown, if any
	}{
		{"act", "active", "in_doubt", []string{"log", "postgres"}, []string{"retry", "abort"}, e.prefix + "_act@default", ""},
		{"prep", "prepared", "in_doubt", []string{"log", "postgres", "kafka"}, []string{"retry"}, e.prefix + "_prep@default", prepTID},
		{"mixed", "heuristic_mixed", "heuristic", []string{"log"}, []string{"resolve"}, "", ""},
		{"handmade", "", "orphan", []string{"postgres"}, []string{}, e.prefix + "_handmade@default", ""},
		{"kafka:" + stray, "", "kafka_open", []string{"kafka"}, []string{}, "", stray},
	}
	require.Len(t, all, len(views), "exactly these entries")
	for _, v := range views {
		t.Run("view/"+v.key, func(t *testing.T) {
			m, ok := byKey[v.key]
			require.True(t, ok, "%s is listed", v.key)
			state, _ := m["state"].(string)
			assert.Equal(t, v.state, state, "state")
			assert.Equal(t, v.issue, m["issue"], "issue")
			assert.Equal(t, v.sources, strs(m["sources"]), "sources")
			assert.Equal(t, v.actions, strs(m["actions"]), "actions")
			assert.NotEmpty(t, m["hint"], "hint")
			assert.NotEmpty(t, m["since"], "since")
			if v.pgGID != "" {
				pg, _ := m["postgres"].([]any)
				require.Len(t, pg, 1, "postgres evidence")
				p0 := pg[0].(map[string]any)
				assert.Equal(t, v.pgGID, p0["gid"])
				assert.Equal(t, "default", p0["database"])
				assert.NotEmpty(t, p0["prepared_at"])
			} else {
				assert.Nil(t, m["postgres"])
			}
			if v.kafkaTID != "" {
				assert.Equal(t, v.kafkaTID, field(m, "kafka", "transactional_id"), "kafka evidence")
				assert.Equal(t, "Ongoing", field(m, "kafka", "state"))
				assert.Equal(t, "a", field(m, "kafka", "owner"))
				// The in-doubt transaction's id is withheld from the pool; the stray one's is not.
				assert.Equal(t, v.key == "prep", field(m, "kafka", "quarantined"))
			} else {
				assert.Nil(t, m["kafka"])
			}
			if v.state != "" {
				assert.Equal(t, v.key, fmt.Sprint(field(m, "log", "id")), "the log row")
				assert.Equal(t, "a", m["instance"])
			}
		})
	}
	assert.Equal(t, prepPID, fmt.Sprint(field(byKey["prep"], "kafka", "producer_id")), "Kafka's producer id is the logged one")
	assert.Equal(t, fmt.Sprint(field(byKey["prep"], "log", "kafka", "producer_epoch")), fmt.Sprint(field(byKey["prep"], "kafka", "producer_epoch")))

	// Paging (one per page) gives the same entries in the same order; the age filter keeps
	// young entries out; a per-state listing takes the age filter too.
	paged := inDoubtEntries(t, n.base, "", 1)
	require.Len(t, paged, len(all))
	for i := range all {
		assert.Equal(t, entryKey(all[i]), entryKey(paged[i]), "page %d", i)
	}
	assert.Empty(t, inDoubtEntries(t, n.base, "&older_than=1h", 100), "nothing is an hour old")
	assert.Len(t, inDoubtEntries(t, n.base, "&older_than=0s", 100), len(all))
	for _, tc := range []struct {
		query string
		want  int
	}{
		{"state=prepared", 1},
		{"state=prepared&older_than=1h", 0},
		{"state=heuristic_mixed&older_than=1ms", 1},
	} {
		r := call(t, http.MethodGet, n.base+"/v1/transactions?"+tc.query, "")
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", tc.query, r.Raw)
		assert.Len(t, r.get("transactions"), tc.want, tc.query)
	}
	r := call(t, http.MethodGet, n.base+"/v1/transactions?state=in-doubt&older_than=soon", "")
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Equal(t, "older_than", r.str("error", "field"))

	// The admin actions, in order.
	actions := []struct {
		name     string
		path     string // after /v1/transactions/
		body     string
		status   int
		class    string // of a refusal or a bad request
		field    string // of a bad request
		message  string // in the error, when refused
		state    string // the transaction's state afterwards
		recorded string // the result recorded in the events ("" = nothing recorded)
	}{
		{"abort prepared while Kafka would commit", "prep/abort", `{"reason":"stuck"}`, http.StatusConflict, "not_allowed",
			"", "prepared: Kafka decides; abort would break atomicity", "prepared", "refused"},
		{"abort with a NUL in the reason", "act/abort", `{"reason":"a\u0000b"}`, http.StatusBadRequest, "invalid_request", "reason", "", "active", ""},
		{"abort with a control character in the reason", "act/abort", `{"reason":"ok\u001b[2Jcleared"}`, http.StatusBadRequest, "invalid_request", "reason", "", "active", ""},
		{"resolve with a bidi override in the reason", "mixed/resolve", `{"outcome":"committed","reason":"x\u202ey"}`, http.StatusBadRequest, "invalid_request", "reason", "", "heuristic_mixed", ""},
		{"abort active", "act/abort", `{"reason":"customer cancelled"}`, http.StatusOK, "", "", "", "aborted", "aborted"},
		{"abort aborted is a no-op", "act/abort", "", http.StatusOK, "", "", "", "aborted", "aborted"},
		{"retry prepared commits", "prep/retry", `{"reason":"recover now"}`, http.StatusOK, "", "", "", "committed", "committed"},
		{"abort committed", "prep/abort", "", http.StatusConflict, "not_allowed", "", "committed: there is nothing to abort", "committed", "refused"},
		{"abort heuristic", "mixed/abort", "", http.StatusConflict, "not_allowed", "", "resolve", "heuristic_mixed", "refused"},
		{"retry heuristic", "mixed/retry", "", http.StatusConflict, "not_allowed", "", "cannot decide it", "heuristic_mixed", "refused"},
		{"resolve without a reason", "mixed/resolve", `{"outcome":"committed"}`, http.StatusBadRequest, "invalid_request", "reason", "", "heuristic_mixed", ""},
		{"resolve with a blank reason", "mixed/resolve", `{"outcome":"committed","reason":"  "}`, http.StatusBadRequest, "invalid_request", "reason", "", "heuristic_mixed", ""},
		{"resolve without an outcome", "mixed/resolve", `{"reason":"x"}`, http.StatusBadRequest, "invalid_request", "outcome", "", "heuristic_mixed", ""},
		{"resolve with an unknown field", "mixed/resolve", `{"outcome":"aborted","reason":"x","force":true}`, http.StatusBadRequest, "invalid_request", "force", "", "heuristic_mixed", ""},
		{"retry with an outcome", "mixed/retry", `{"outcome":"aborted"}`, http.StatusBadRequest, "invalid_request", "outcome", "", "heuristic_mixed", ""},
		{"resolve a non-heuristic", "prep/resolve", `{"outcome":"aborted","reason":"x"}`, http.StatusConflict, "not_allowed", "", "not heuristic", "committed", "refused"},
		{"resolve heuristic", "mixed/resolve", `{"outcome":"committed","reason":"row re-inserted by hand, ticket OPS-7"}`, http.StatusOK, "", "", "", "committed", "committed"},
		{"resolve twice", "mixed/resolve", `{"outcome":"aborted","reason":"changed my mind"}`, http.StatusConflict, "not_allowed", "", "not heuristic", "committed", "refused"},
		{"unknown id", "nope/retry", "", http.StatusNotFound, "not_found", "", "", "", ""},
	}
	for _, a := range actions {
		t.Run("action/"+a.name, func(t *testing.T) {
			id, _, _ := strings.Cut(a.path, "/")
			r := call(t, http.MethodPost, n.base+"/v1/transactions/"+a.path, a.body)
			require.Equal(t, a.status, r.Status, "%s", r.Raw)
			if a.class != "" {
				assert.Equal(t, a.class, r.str("error", "class"), "%s", r.Raw)
				assert.Equal(t, a.field, r.str("error", "field"), "%s", r.Raw)
				assert.Contains(t, r.str("error", "message"), a.message)
			} else {
				assert.Equal(t, a.state, r.str("state"), "%s", r.Raw)
				assert.NotNil(t, r.get("events"), "the answer has the event history")
			}
			if a.status == http.StatusNotFound {
				return
			}
			g := call(t, http.MethodGet, n.base+"/v1/transactions/"+id, "")
			require.Equal(t, http.StatusOK, g.Status)
			assert.Equal(t, a.state, g.str("state"), "state afterwards")
			if a.recorded == "" {
				return
			}
			ev := lastAdminEvent(t, g)
			action := strings.SplitN(a.path, "/", 2)[1]
			assert.Equal(t, action, ev["action"])
			assert.Equal(t, "anonymous", ev["by"], "who did it")
			assert.Equal(t, a.recorded, ev["result"])
			var body map[string]any
			if a.body != "" {
				require.NoError(t, json.Unmarshal([]byte(a.body), &body))
			}
			if reason, _ := body["reason"].(string); reason != "" {
				assert.Equal(t, reason, ev["reason"], "why")
			}
			if a.recorded == "refused" {
				assert.Contains(t, fmt.Sprint(ev["error"]), a.message)
			}
			if action != "resolve" {
				// The request was recorded before anything was touched.
				req := requestedEvent(t, g, action)
				assert.Equal(t, "anonymous", req["by"])
			}
		})
	}

	// The operator's abort is in the row's error; the resolution keeps the evidence.
	g := call(t, http.MethodGet, n.base+"/v1/transactions/act", "")
	assert.Contains(t, g.str("error", "message"), "aborted by operator anonymous (customer cancelled)")
	g = call(t, http.MethodGet, n.base+"/v1/transactions/mixed", "")
	var ev map[string]any
	for _, x := range g.get("events").([]any) {
		if d, _ := x.(map[string]any)["detail"].(map[string]any); d["action"] == "resolve" && d["result"] == "committed" {
			ev = d
			assert.Equal(t, "committed", x.(map[string]any)["state"], "the event carries the new state")
		}
	}
	require.NotNil(t, ev, "the resolution is in the events: %s", g.Raw)
	assert.Equal(t, "heuristic_mixed", ev["previous"])
	assert.Contains(t, fmt.Sprint(ev["previous_error"]), "rolled back by someone else")
	assert.Equal(t, "committed", ev["outcome"])

	// Both sides agree for what the coordinator decided; the orphan goes with a recovery pass.
	r = call(t, http.MethodPost, n.base+"/v1/recovery/run", "")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, "1", r.str("orphans"), "%s", r.Raw)
	e.verify(t, n.base, map[string]sent{"act": {kind: "order"}, "prep": {kind: "order"}})
	left := inDoubtEntries(t, n.base, "", 100)
	require.Len(t, left, 1, "only the stray Kafka transaction is left: %v", left)
	assert.Equal(t, "kafka:"+stray, entryKey(left[0]))
}

// TestAdminAbortPrepared: an abort after prepared is granted only when Kafka has already
// aborted the transaction; when Kafka committed it, the abort is refused and the transaction
// ends committed on both sides.
func TestAdminAbortPrepared(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		fault   string
		reinit  bool // someone re-initialises the transactional id: Kafka aborts what was open
		status  int
		state   string
		message string
	}{
		{"kafka aborted", "after_log_prepared", true, http.StatusOK, "aborted", "aborted by operator anonymous (kafka says aborted)"},
		{"kafka committed", "after_endtxn", false, http.StatusConflict, "committed", "Kafka had already committed it"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newStore(t, envOpts{})
			e.killedAt(t, tc.fault, "p1")
			e.postponeRecovery(t)
			if tc.reinit {
				e.reinitID(t, e.loggedTransactionalID(t, "p1"))
			}
			n := e.startNode(t, "a", noRecoveryLoop...)
			require.Equal(t, "prepared", call(t, http.MethodGet, n.base+"/v1/transactions/p1", "").str("state"))

			r := call(t, http.MethodPost, n.base+"/v1/transactions/p1/abort", `{"reason":"kafka says aborted"}`)
			require.Equal(t, tc.status, r.Status, "%s", r.Raw)
			g := call(t, http.MethodGet, n.base+"/v1/transactions/p1", "")
			assert.Equal(t, tc.state, g.str("state"))
			if tc.status == http.StatusOK {
				assert.Contains(t, g.str("error", "message"), tc.message)
			} else {
				assert.Equal(t, "not_allowed", r.str("error", "class"))
				assert.Contains(t, r.str("error", "message"), tc.message)
			}
			ev := lastAdminEvent(t, g)
			assert.Equal(t, "abort", ev["action"])
			assert.Equal(t, "kafka says aborted", ev["reason"])
			e.verify(t, n.base, map[string]sent{"p1": {kind: "order"}})
		})
	}
}

// TestAdminRetryOtherInstance: instances share the log; a retry sent to one instance for
// another's transaction is refused while that instance runs (it owns the row, I8) and resolves
// the row once it is gone, as a takeover would.
func TestAdminRetryOtherInstance(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{})
	e.killedAt(t, "after_log_prepared", "o1")
	e.postponeRecovery(t)
	a := e.startNode(t, "a", noRecoveryLoop...)
	b := e.startNode(t, "b", noRecoveryLoop...)

	r := call(t, http.MethodPost, b.base+"/v1/transactions/o1/retry", "")
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Raw)
	assert.Equal(t, "not_allowed", r.str("error", "class"))
	assert.Contains(t, r.str("error", "message"), `belongs to instance "a", which is running`)
	assert.Equal(t, "prepared", call(t, http.MethodGet, b.base+"/v1/transactions/o1", "").str("state"))

	a.kill()
	// The process is gone; PostgreSQL frees its lock once the backend has seen the connection
	// close, a few milliseconds later: until then the instance still counts as running.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = call(t, http.MethodPost, b.base+"/v1/transactions/o1/retry", `{"reason":"a is gone"}`)
		if r.Status != http.StatusConflict || !strings.Contains(r.str("error", "message"), "which is running") || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	assert.Equal(t, "committed", r.str("state"))
	ev := lastAdminEvent(t, r)
	assert.Equal(t, "retry", ev["action"])
	assert.Equal(t, "committed", ev["result"])
	assert.Equal(t, "prepared", ev["previous"])
	e.verify(t, b.base, map[string]sent{"o1": {kind: "order"}})
}
