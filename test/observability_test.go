package test

// Observability and lifecycle: /metrics moves when transactions run, /readyz names the
// dependency that fails, and SIGTERM ends the process within COORDINATOR_SHUTDOWN_TIMEOUT,
// leaving nothing recovery cannot resolve.

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/devstack"
	"github.com/kpgtx/coordinator/migrations"
	"github.com/kpgtx/coordinator/service"
)

// series is one scrape of /metrics: the value of every series, keyed as the text format prints
// it, e.g. `kpgtx_transactions_total{class="none",state="committed"}` (labels sorted by name).
type series map[string]float64

func scrapeURL(t testing.TB, u string) series {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"), resp.Header.Get("Content-Type"))
	out := series{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "metrics line %q", line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, "metrics line %q", line)
		out[line[:i]] = v
	}
	require.NoError(t, sc.Err())
	return out
}

func (e *env) scrape(t *testing.T) series { return scrapeURL(t, e.srv.URL+"/metrics") }

// get returns a series' value; labels are name, value pairs in any order.
func (s series) get(name string, labels ...string) (float64, bool) {
	type kv struct{ k, v string }
	var l []kv
	for i := 0; i+1 < len(labels); i += 2 {
		l = append(l, kv{labels[i], labels[i+1]})
	}
	for i := range l { // sort by label name, as the exposition does
		for j := i + 1; j < len(l); j++ {
			if l[j].k < l[i].k {
				l[i], l[j] = l[j], l[i]
			}
		}
	}
	key := name
	if len(l) > 0 {
		parts := make([]string, len(l))
		for i, p := range l {
			parts[i] = fmt.Sprintf("%s=%q", p.k, p.v)
		}
		key += "{" + strings.Join(parts, ",") + "}"
	}
	v, ok := s[key]
	return v, ok
}

func (s series) val(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, ok := s.get(name, labels...)
	require.True(t, ok, "series %s%v not exported", name, labels)
	return v
}

// TestMetrics scrapes /metrics around a committed and an aborted request, then around a
// transaction left prepared by a coordinator killed at a fault point.
func TestMetrics(t *testing.T) {
	t.Parallel()
	// A lease of an hour: this instance must not take over the killed binary's transaction
	// below; its own restart resolves it.
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.InstanceLease = time.Hour }})
	ctx := context.Background()
	before := e.scrape(t)
	v0 := func(name string, labels ...string) float64 { v, _ := before.get(name, labels...); return v }

	r := e.post(order(e, "m-ok", 1))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	_, err := e.db.Exec(ctx, "INSERT INTO orders (id, total) VALUES ('m-dup', 1)")
	require.NoError(t, err)
	r = e.post(order(e, "m-dup", 2)) // unique violation: aborted, abortable
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Raw)

	after := e.scrape(t)
	assert.Equal(t, 1.0, after.val(t, "kpgtx_transactions_total", "state", "committed", "class", "none")-
		v0("kpgtx_transactions_total", "state", "committed", "class", "none"), "committed counter")
	assert.Equal(t, 1.0, after.val(t, "kpgtx_transactions_total", "state", "aborted", "class", "abortable")-
		v0("kpgtx_transactions_total", "state", "aborted", "class", "abortable"), "aborted counter")

	// Both requests ran log_begin, phase1, sql, kafka, log_final and total; the committed one
	// the decision path, the aborted one the abort.
	for phase, n := range map[string]float64{
		"log_begin": 2, "phase1": 2, "sql": 2, "kafka": 2, "pool_acquire": 2, "log_final": 2, "total": 2,
		"log_prepared": 1, "endtxn": 1, "phase2": 1, "abort": 1,
	} {
		got := after.val(t, "kpgtx_phase_duration_seconds_count", "phase", phase) -
			v0("kpgtx_phase_duration_seconds_count", "phase", phase)
		assert.Equal(t, n, got, "observations of phase %s", phase)
		assert.Positive(t, after.val(t, "kpgtx_phase_duration_seconds_sum", "phase", phase), "phase %s sum", phase)
	}
	assert.Zero(t, after.val(t, "kpgtx_phase_duration_seconds_count", "phase", "log_committing"), "no SQL-only two-database request ran")

	// Pool: every id back and free once the answers are out.
	assert.Equal(t, float64(e.cfg.PoolSize), after.val(t, "kpgtx_kafka_pool_size"))
	assert.Equal(t, float64(e.cfg.PoolSize), after.val(t, "kpgtx_kafka_pool_transactional_ids", "status", "free"))
	assert.Zero(t, after.val(t, "kpgtx_kafka_pool_transactional_ids", "status", "leased"))
	assert.Zero(t, after.val(t, "kpgtx_kafka_pool_transactional_ids", "status", "quarantined"))

	// The log: writes timed, group commits sized, the in-doubt query answered.
	assert.GreaterOrEqual(t, after.val(t, "kpgtx_log_write_duration_seconds_count")-v0("kpgtx_log_write_duration_seconds_count"), 5.0,
		"begin, prepared and final of one, begin and final of the other")
	assert.Positive(t, after.val(t, "kpgtx_log_batch_size_count"))
	assert.Equal(t, 1.0, after.val(t, "kpgtx_log_up"))
	assert.Zero(t, after.val(t, "kpgtx_in_doubt_transactions", "state", "prepared"))
	assert.Zero(t, after.val(t, "kpgtx_heuristic_transactions", "state", "heuristic_mixed"))
	assert.Zero(t, after.val(t, "kpgtx_in_doubt_oldest_age_seconds"))

	// Recovery (startup pass and the loop) and HTTP.
	assert.Positive(t, after.val(t, "kpgtx_recovery_passes_total"))
	_ = after.val(t, "kpgtx_recovery_pass_failures_total")
	assert.Equal(t, 1.0, after.val(t, "kpgtx_http_requests_total", "method", "POST", "route", "/v1/transactions", "code", "200"))
	assert.Equal(t, 1.0, after.val(t, "kpgtx_http_requests_total", "method", "POST", "route", "/v1/transactions", "code", "409"))
	assert.Positive(t, after.val(t, "kpgtx_http_request_duration_seconds_count", "method", "GET", "route", "/metrics"))
	_ = after.val(t, "go_goroutines")

	// A transaction left prepared by a coordinator killed after logging prepared shows in the
	// in-doubt gauges of every instance sharing the log.
	n := e.startNode(t, "a", "COORDINATOR_FAULT=after_log_prepared")
	assert.Zero(t, n.post(e.orderBody("m-doubt", "order")), "the fault point kills the process")
	n.waitExit(30 * time.Second)
	time.Sleep(50 * time.Millisecond) // some age in database time
	doubt := e.scrape(t)
	assert.Equal(t, 1.0, doubt.val(t, "kpgtx_in_doubt_transactions", "state", "prepared"))
	assert.Zero(t, doubt.val(t, "kpgtx_in_doubt_transactions", "state", "active"))
	assert.Positive(t, doubt.val(t, "kpgtx_in_doubt_oldest_age_seconds"))

	// Its own restart resolves it (Kafka commits: prepared was logged), and the gauges say so.
	n2 := e.startNode(t, "a")
	e.waitResolved(t, time.Minute)
	resolved := e.scrape(t)
	assert.Zero(t, resolved.val(t, "kpgtx_in_doubt_transactions", "state", "prepared"))
	assert.Zero(t, resolved.val(t, "kpgtx_in_doubt_oldest_age_seconds"))
	assert.Equal(t, "committed", call(t, http.MethodGet, n2.base+"/v1/transactions/m-doubt", "").str("state"))
	// The restarted binary resolved it in its startup pass (or its loop): its own counters show it.
	nm := scrapeURL(t, n2.base+"/metrics")
	assert.Positive(t, nm.val(t, "kpgtx_recovery_resolved_total"))
}

// TestReadyz: every check passes on healthy services, and the body says what was found.
func TestReadyz(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	h := e.do(http.MethodGet, "/healthz", nil)
	require.Equal(t, http.StatusOK, h.Status)

	r := e.do(http.MethodGet, "/readyz", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	assert.Equal(t, "ready", r.str("status"))
	assert.Nil(t, r.get("failed"))
	for _, c := range []string{"log", "databases", "migrations", "kafka", "ownership"} {
		assert.Equal(t, "true", r.str("checks", c, "ok"), "check %s: %s", c, r.Raw)
	}
	mpt, err := strconv.Atoi(r.str("checks", "databases", "databases", "default", "max_prepared_transactions"))
	require.NoError(t, err, "%s", r.Raw)
	assert.Positive(t, mpt)
	assert.Equal(t, r.str("checks", "migrations", "latest"), r.str("checks", "migrations", "version"))
	ups, err := fs.Glob(migrations.FS, "*.up.sql")
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(len(ups)), r.str("checks", "migrations", "latest"), "the embedded migrations go up to the last one")
	assert.Equal(t, e.cfg.Instance, r.str("checks", "ownership", "instance"))
	assert.NotEqual(t, "0", r.str("checks", "ownership", "epoch"), "the instance lock gave it an epoch")
	tv, err := strconv.Atoi(r.str("checks", "kafka", "transaction_version"))
	require.NoError(t, err, "%s", r.Raw)
	if !useKfake() {
		assert.Equal(t, 2, tv, "a new Kafka 4.x cluster runs transactions v2")
	} else {
		assert.GreaterOrEqual(t, tv, 0, "kfake reports transaction.version")
	}
	t.Logf("readyz: %s", r.Raw)
}

// TestReadyzKafkaDown stops the Kafka cluster under a running coordinator: /readyz answers 503
// naming kafka, within the check's bound, while the other checks still pass.
func TestReadyzKafkaDown(t *testing.T) {
	t.Parallel()
	k, err := devstack.StartKafka(context.Background())
	require.NoError(t, err)
	t.Cleanup(k.Stop)
	e := newEnv(t, envOpts{brokers: k.Brokers()})
	require.Equal(t, http.StatusOK, e.do(http.MethodGet, "/readyz", nil).Status)

	k.Stop()
	start := time.Now()
	r := e.do(http.MethodGet, "/readyz", nil)
	took := time.Since(start)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Raw)
	assert.Less(t, took, 5*time.Second, "each check is bounded")
	assert.Equal(t, "not_ready", r.str("status"))
	assert.Equal(t, []any{"kafka"}, r.get("failed"))
	assert.Equal(t, "false", r.str("checks", "kafka", "ok"))
	assert.NotEmpty(t, r.str("checks", "kafka", "error"))
	assert.Equal(t, "true", r.str("checks", "log", "ok"))
	assert.Equal(t, "true", r.str("checks", "databases", "ok"))
	t.Logf("readyz after %s: %s", took, r.Raw)
}

// TestReadyzNoPreparedTransactions: a configured database's server restarts with
// max_prepared_transactions = 0 (at the same address) while the coordinator runs. Startup
// refuses such a server, so the setting can only become 0 later, at a restart: max_prepared_
// transactions is a postmaster setting. The test runs the "other" database on a private
// PostgreSQL, stops it, and starts a server with max_prepared_transactions = 0 on the same
// port, as a misconfigured replacement (a failover, a config rollout) would come up. /readyz
// must turn 503 naming the databases check, the database and the setting.
func TestReadyzNoPreparedTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgA, err := devstack.StartPostgres(ctx, devstack.PostgresOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pgA.Stop(context.Background()) })
	u, err := url.Parse(pgA.DSN())
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)

	e := newEnv(t, envOpts{configure: func(c *service.Config) {
		c.Databases = map[string]string{"other": pgA.DSN()}
	}})
	r := e.do(http.MethodGet, "/readyz", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	assert.Equal(t, "100", r.str("checks", "databases", "databases", "other", "max_prepared_transactions"))

	require.NoError(t, pgA.Stop(ctx))
	pgB, err := devstack.StartPostgres(ctx, devstack.PostgresOptions{Port: port, MaxPreparedTransactions: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pgB.Stop(context.Background()) })

	// The pool's connections to the old server fail first ("does not answer"); the next ones
	// reach the new server.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = e.do(http.MethodGet, "/readyz", nil)
		if r.str("checks", "databases", "databases", "other", "max_prepared_transactions") == "0" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Raw)
	assert.Equal(t, []any{"databases"}, r.get("failed"))
	assert.Equal(t, "0", r.str("checks", "databases", "databases", "other", "max_prepared_transactions"), "%s", r.Raw)
	msg := r.str("checks", "databases", "error")
	assert.Contains(t, msg, `database "other"`)
	assert.Contains(t, msg, "max_prepared_transactions")
	assert.Contains(t, msg, "ALTER SYSTEM", "says what to change")
	assert.Equal(t, "true", r.str("checks", "databases", "databases", "default", "ok"))
	assert.Equal(t, "true", r.str("checks", "log", "ok"))
	t.Logf("readyz: %s", r.Raw)
}

// slowOrder is an order whose statements take about three seconds.
func (e *env) slowOrder(id string, seconds int) string {
	return fmt.Sprintf(`{"id":%q,"sql":[{"statement":"INSERT INTO orders (id, total) VALUES ($1, 1)","args":[%q]},{"statement":"SELECT pg_sleep(%d)"}],"kafka":[{"topic":%q,"key":%q,"value":"v"}]}`,
		id, id, seconds, e.topic, id)
}

// waitRow waits until the request has a log row (it is in flight).
func (e *env) waitRow(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		require.NoError(t, e.db.QueryRow(context.Background(),
			"SELECT count(*) FROM coordinator_transactions WHERE request_id = $1", id).Scan(&n))
		if n > 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "request %s never logged", id)
		time.Sleep(20 * time.Millisecond)
	}
}

// TestShutdownBound: SIGTERM while a request runs a 3-second statement, with
// COORDINATOR_SHUTDOWN_TIMEOUT=1s. The process exits within the bound (plus slack), the request
// does not report a commit, and after a restart the transaction is aborted on both sides.
func TestShutdownBound(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{})
	n := e.startNode(t, "a", "COORDINATOR_SHUTDOWN_TIMEOUT=1s")
	status := make(chan int, 1)
	go func() { status <- n.post(e.slowOrder("slow", 3)) }()
	e.waitRow(t, "slow")
	time.Sleep(200 * time.Millisecond) // into pg_sleep

	start := time.Now()
	n.p.signal(syscall.SIGTERM)
	code := n.p.exitCode(10 * time.Second)
	took := time.Since(start)
	t.Logf("exited %d after %s", code, took)
	assert.Equal(t, 0, code)
	assert.Less(t, took, 2*time.Second, "COORDINATOR_SHUTDOWN_TIMEOUT=1s bounds the shutdown")
	st := <-status
	assert.NotEqual(t, http.StatusOK, st, "a request cut off by shutdown must not report a commit")
	logs := n.p.stderr.String()
	assert.Contains(t, logs, "cancelling the requests in flight")

	n2 := e.startNode(t, "a")
	e.waitResolved(t, time.Minute)
	r := call(t, http.MethodGet, n2.base+"/v1/transactions/slow", "")
	require.Equal(t, "aborted", r.str("state"), "%s", r.Raw)
	e.verify(t, n2.base, map[string]sent{"slow": {kind: "order", status: st}})
}

// TestShutdownAbandons: a request that cannot finish within COORDINATOR_SHUTDOWN_TIMEOUT, even
// cancelled (its log write waits on a row lock the test holds), is abandoned at the bound: the
// process exits anyway, logs the gid and its state, and recovery aborts it after a restart.
func TestShutdownAbandons(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newStore(t, envOpts{})
	n := e.startNode(t, "a", "COORDINATOR_SHUTDOWN_TIMEOUT=1s")
	status := make(chan int, 1)
	go func() { status <- n.post(e.slowOrder("stuck", 2)) }()
	e.waitRow(t, "stuck")

	// Every later write of the row (prepared, or aborted once cancelled) waits for this lock.
	tx, err := e.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var state string
	require.NoError(t, tx.QueryRow(ctx, "SELECT state FROM coordinator_transactions WHERE request_id = 'stuck' FOR UPDATE").Scan(&state))
	require.Equal(t, "active", state)

	start := time.Now()
	n.p.signal(syscall.SIGTERM)
	code := n.p.exitCode(10 * time.Second)
	took := time.Since(start)
	t.Logf("exited %d after %s", code, took)
	assert.Equal(t, 0, code)
	assert.Less(t, took, 2*time.Second, "COORDINATOR_SHUTDOWN_TIMEOUT=1s bounds the shutdown")
	st := <-status
	assert.Zero(t, st, "the connection was closed without an answer")
	logs := n.p.stderr.String()
	assert.Contains(t, logs, "transactions left in flight")
	assert.Contains(t, logs, e.prefix+"_stuck active")
	require.NoError(t, tx.Rollback(ctx))

	n2 := e.startNode(t, "a")
	e.waitResolved(t, time.Minute)
	r := call(t, http.MethodGet, n2.base+"/v1/transactions/stuck", "")
	require.Equal(t, "aborted", r.str("state"), "%s", r.Raw)
	e.verify(t, n2.base, map[string]sent{"stuck": {kind: "order", status: st}})
}

// TestShutdownFinishesInFlight: SIGTERM while a one-second request runs, with a bound that
// leaves it time: the request commits and answers 200, then the process exits.
func TestShutdownFinishesInFlight(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{})
	n := e.startNode(t, "a", "COORDINATOR_SHUTDOWN_TIMEOUT=20s")
	status := make(chan int, 1)
	go func() { status <- n.post(e.slowOrder("fin", 1)) }()
	e.waitRow(t, "fin")

	start := time.Now()
	n.p.signal(syscall.SIGTERM)
	assert.Equal(t, http.StatusOK, <-status, "the request in flight finishes")
	assert.Equal(t, 0, n.p.exitCode(20*time.Second))
	t.Logf("exited after %s", time.Since(start))
	assert.Less(t, time.Since(start), 10*time.Second, "exits once the request is done, not at the bound")
	assert.NotContains(t, n.p.stderr.String(), "cancelling the requests in flight")

	n2 := e.startNode(t, "a")
	e.verify(t, n2.base, map[string]sent{"fin": {kind: "order", status: http.StatusOK}})
}
