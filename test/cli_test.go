package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of `coordinator txn …`, the admin client, against a running coordinator binary.

// txnCLI runs `coordinator txn args…` with only the given COORDINATOR_* settings.
func txnCLI(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	return runCoordinator(t, coordinatorEnv(env...), append([]string{"txn"}, args...)...)
}

// TestCLI drives a transaction left prepared by a crash through the CLI: list it (table and
// JSON), show it, have the abort refused, retry it, and see the actions in its history.
func TestCLI(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{})
	e.killedAt(t, "after_log_prepared", "c1")
	e.postponeRecovery(t)
	n := e.startNode(t, "a", noRecoveryLoop...)
	srv := []string{"-server", n.base}
	with := func(args ...string) []string { return append(append([]string{}, args...), srv...) }

	jsonOf := func(t *testing.T, out string) map[string]any {
		t.Helper()
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &m), "stdout is JSON: %s", out)
		return m
	}
	cases := []struct {
		name   string
		env    []string
		args   []string
		code   int
		stdout []string // substrings of stdout
		stderr []string // substrings of stderr
		check  func(t *testing.T, stdout string)
	}{
		{name: "list the in-doubt view", args: with("list"), code: 0,
			stdout: []string{"ID", "STATE", "ISSUE", "SOURCES", "AGE", "ACTIONS", "c1", "prepared", "in_doubt", "log,postgres,kafka", "retry", e.prefix + "_c1@default"}},
		{name: "the server from COORDINATOR_URL", env: []string{"COORDINATOR_URL=" + n.base}, args: []string{"list"}, code: 0,
			stdout: []string{"c1", "prepared"}},
		{name: "list as JSON", args: with("list", "--json"), code: 0, check: func(t *testing.T, out string) {
			items := jsonOf(t, out)["transactions"].([]any)
			require.Len(t, items, 1)
			item := items[0].(map[string]any)
			assert.Equal(t, "c1", item["id"])
			assert.Equal(t, "prepared", item["state"])
			assert.Equal(t, []any{"log", "postgres", "kafka"}, item["sources"])
		}},
		{name: "list with an age filter", args: with("list", "-older-than", "1h"), code: 0, stdout: []string{"no in-doubt transactions"}},
		{name: "list one state", args: with("list", "-state", "prepared", "-limit", "5"), code: 0,
			stdout: []string{"ID", "STATE", "UPDATED", "KAFKA", "c1", "prepared", e.prefix + "-a-"}},
		{name: "show", args: with("show", "c1"), code: 0,
			stdout: []string{"id:", "c1", "state:", "prepared", "kafka:", "sql gid:", "events:", "TIME", "active"}},
		{name: "show as JSON, flags after the id", args: append([]string{"show", "c1", "-json"}, srv...), code: 0, check: func(t *testing.T, out string) {
			m := jsonOf(t, out)
			assert.Equal(t, "prepared", m["state"])
			assert.NotEmpty(t, m["events"])
		}},
		{name: "abort refused", args: with("abort", "c1", "-reason", "stuck"), code: 1,
			stderr: []string{"409 not_allowed", "prepared: Kafka decides; abort would break atomicity"}},
		{name: "resolve needs a reason", args: with("resolve", "c1", "-outcome", "committed"), code: 2,
			stderr: []string{"-reason is required"}},
		{name: "resolve needs an outcome", args: with("resolve", "c1", "-reason", "x"), code: 2,
			stderr: []string{"-outcome must be committed or aborted"}},
		{name: "resolve refused on a prepared row", args: with("resolve", "c1", "-outcome", "committed", "-reason", "x"), code: 1,
			stderr: []string{"409 not_allowed", "not heuristic"}},
		{name: "retry", args: with("retry", "c1", "-reason", "operator retry"), code: 0,
			stdout: []string{"state:", "committed", "retry by anonymous (operator retry) → committed"}},
		{name: "the history shows who and why", args: with("show", "c1"), code: 0,
			stdout: []string{"committed", "abort by anonymous (stuck) → refused", "resolve by anonymous as committed (x) → refused", "retry by anonymous (operator retry) → committed"}},
		{name: "nothing left in doubt", args: with("list"), code: 0, stdout: []string{"no in-doubt transactions"}},
		{name: "committed ones", args: with("list", "-state", "committed"), code: 0, stdout: []string{"c1", "committed"}},
		{name: "unknown transaction", args: with("show", "nope"), code: 1, stderr: []string{"404 not_found"}},
		{name: "retry of an unknown transaction", args: with("retry", "nope"), code: 1, stderr: []string{"404 not_found"}},
		{name: "bad state", args: with("list", "-state", "limbo"), code: 1, stderr: []string{"400 invalid_request", "state"}},
		{name: "unreachable server", args: []string{"list", "-server", fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), "-timeout", "5s"}, code: 1,
			stderr: []string{"cannot reach the coordinator"}},
		{name: "no verb", args: nil, code: 2, stderr: []string{"missing verb", "Usage:"}},
		{name: "unknown verb", args: []string{"frobnicate"}, code: 2, stderr: []string{`unknown verb "frobnicate"`}},
		{name: "show without an id", args: with("show"), code: 2, stderr: []string{"takes one transaction id"}},
		{name: "two ids", args: with("retry", "a", "b"), code: 2, stderr: []string{"takes one transaction id"}},
		{name: "list takes no arguments", args: with("list", "c1"), code: 2, stderr: []string{"takes no arguments"}},
		{name: "bad limit", args: with("list", "-limit", "0"), code: 2, stderr: []string{"-limit"}},
		{name: "bad age", args: with("list", "-older-than", "soon"), code: 2, stderr: []string{"-older-than"}},
		{name: "bad server", args: []string{"list", "-server", "localhost:8080"}, code: 2, stderr: []string{"-server"}},
		{name: "unknown flag", args: with("list", "-frob"), code: 2, stderr: []string{"frob"}},
		{name: "help", args: []string{"help"}, code: 0, stdout: []string{"coordinator txn list", "Exit status"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := txnCLI(t, tc.env, tc.args...)
			t.Logf("coordinator txn %v → %d\n%s%s", tc.args, code, stdout, stderr)
			assert.Equal(t, tc.code, code, "exit status\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			for _, s := range tc.stdout {
				assert.Contains(t, stdout, s)
			}
			for _, s := range tc.stderr {
				assert.Contains(t, stderr, s)
			}
			if tc.check != nil && code == tc.code {
				tc.check(t, stdout)
			}
		})
	}
	e.verify(t, n.base, map[string]sent{"c1": {kind: "order"}})

	code, stdout, _ := runCoordinator(t, coordinatorEnv(), "help", "txn")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "coordinator txn resolve ID -outcome committed|aborted -reason TEXT")
}

// TestCLIRequest checks what the CLI sends: the bearer token (flag over environment), the
// query of list, the bodies of the actions, and that a refusal's message is printed.
func TestCLIRequest(t *testing.T) {
	t.Parallel()
	type seen struct{ method, uri, auth, body string }
	var mu sync.Mutex
	var got []seen
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			body = make([]byte, 4096)
			k, _ := r.Body.Read(body)
			body = body[:k]
		}
		mu.Lock()
		got = append(got, seen{r.Method, r.RequestURI, r.Header.Get("Authorization"), string(body)})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/transactions":
			_, _ = w.Write([]byte(`{"transactions":[]}`))
		case r.Method == http.MethodPost && r.URL.Path == "/v1/transactions/x/abort":
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":{"class":"not_allowed","message":"prepared: Kafka decides"}}`))
		default:
			_, _ = w.Write([]byte(`{"id":"x","state":"committed","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","events":[]}`))
		}
	}))
	defer fake.Close()
	last := func() seen {
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, got)
		return got[len(got)-1]
	}
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		want seen
	}{
		{"token from the environment", []string{"COORDINATOR_TOKEN=envsecret", "COORDINATOR_URL=" + fake.URL},
			[]string{"list", "-older-than", "30s"}, 0,
			seen{http.MethodGet, "/v1/transactions?limit=100&older_than=30s&state=in-doubt", "Bearer envsecret", ""}},
		{"token flag over the environment", []string{"COORDINATOR_TOKEN=envsecret"},
			[]string{"retry", "x", "-server", fake.URL, "-token", "flagsecret"}, 0,
			seen{http.MethodPost, "/v1/transactions/x/retry", "Bearer flagsecret", ""}},
		{"no token", nil, []string{"show", "x", "-server", fake.URL + "/"}, 0,
			seen{http.MethodGet, "/v1/transactions/x", "", ""}},
		{"abort with a reason, refused", nil, []string{"abort", "x", "-reason", "why not", "-server", fake.URL}, 1,
			seen{http.MethodPost, "/v1/transactions/x/abort", "", `{"reason":"why not"}`}},
		{"resolve", nil, []string{"resolve", "x", "-outcome", "aborted", "-reason", "checked by hand", "-server", fake.URL}, 0,
			seen{http.MethodPost, "/v1/transactions/x/resolve", "", `{"outcome":"aborted","reason":"checked by hand"}`}},
		{"an id that needs escaping", nil, []string{"show", "a/b?c", "-server", fake.URL}, 0,
			seen{http.MethodGet, "/v1/transactions/a%2Fb%3Fc", "", ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := txnCLI(t, tc.env, tc.args...)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			assert.Equal(t, tc.want, last())
			if code == 1 {
				assert.Contains(t, stderr, "409 not_allowed: prepared: Kafka decides")
			}
		})
	}
}

// TestCLIShowOffsets: `txn show` prints the consumer group offsets a transaction commits
// (kafka_offsets), as GET and the console give them: the group, the fencing member and
// generation, and each partition's next offset.
func TestCLIShowOffsets(t *testing.T) {
	t.Parallel()
	const fenced = `{"id":"b1","state":"committed","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z",
		"kafka":{"transactional_id":"tx-1","producer_id":5,"producer_epoch":2,"records":[{"topic":"shipments","partition":0,"offset":3}]},
		"kafka_offsets":{"group_id":"shipping","generation_id":7,"member_id":"m-1","group_instance_id":"pod-1","after":"b0",
			"offsets":[{"topic":"orders","partition":0,"offset":42,"metadata":"from b1"},{"topic":"orders","partition":1,"offset":7}]},
		"events":[]}`
	const unfenced = `{"id":"b2","state":"committed","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z",
		"kafka_offsets":{"group_id":"sink","offsets":[{"topic":"orders","partition":2,"offset":9}]},"events":[]}`
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/transactions/b1":
			_, _ = w.Write([]byte(fenced))
		case "/v1/transactions/b2":
			_, _ = w.Write([]byte(unfenced))
		default:
			http.NotFound(w, r)
		}
	}))
	defer fake.Close()

	code, stdout, stderr := txnCLI(t, nil, "show", "b1", "-server", fake.URL)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	for _, want := range []string{
		"group:", "shipping  generation 7  member m-1  instance pod-1",
		"offset:", "orders/0 next 42  metadata \"from b1\"", "orders/1 next 7",
		"record:", "shipments/0@3",
		"after:", "b0  (the member's batch before",
	} {
		assert.Contains(t, stdout, want)
	}

	code, stdout, stderr = txnCLI(t, nil, "show", "b2", "-server", fake.URL)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "sink  unfenced")
	assert.NotContains(t, stdout, "after:", "a batch chained after none")
	assert.Contains(t, stdout, "orders/2 next 9")

	code, stdout, _ = txnCLI(t, nil, "show", "b1", "-json", "-server", fake.URL)
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, `"kafka_offsets"`, "-json prints the server's JSON, offsets included")
}
