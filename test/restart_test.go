package test

// Restart tests: while a coordinator binary runs under concurrent load, the Kafka broker (or
// PostgreSQL) is restarted. Afterwards every request must be consistent on both sides, the
// answers must agree with the outcomes, and the coordinator must serve again.
//
// They restart services, so they run on private ones (their own scripts/services.sh data
// directory and ports): the shared services stay up for the tests running at the same time.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// privateServices is a PostgreSQL cluster and a Kafka broker of one test, run by
// scripts/services.sh under a directory and ports of their own.
type privateServices struct {
	t       *testing.T
	dir     string
	env     []string
	dsn     string
	brokers []string
	downMu  sync.Mutex
	down    map[string]bool // "postgres"/"kafka": stopped by the test and not started again
}

// startPrivateServices starts the test's own PostgreSQL and Kafka. Outside CI a failure to start
// them skips the test (as a missing service does); in CI it fails it.
func startPrivateServices(t *testing.T) *privateServices {
	t.Helper()
	// Not t.TempDir(): PostgreSQL runs as the postgres user (when the tests run as root), which
	// must be able to traverse every directory above its data directory.
	dir, err := os.MkdirTemp("/var/tmp", "kpgtx-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	ports := map[int]bool{}
	for len(ports) < 3 {
		ports[freePort(t)] = true
	}
	var p []int
	for port := range ports {
		p = append(p, port)
	}
	s := &privateServices{t: t, dir: dir, down: map[string]bool{}}
	s.env = append(os.Environ(),
		"SERVICES_DIR="+dir,
		fmt.Sprintf("PG_PORT=%d", p[0]),
		fmt.Sprintf("KAFKA_PORT=%d", p[1]),
		fmt.Sprintf("KAFKA_CONTROLLER_PORT=%d", p[2]),
		"KAFKA_HEAP=512m",
		"APICURIO=0", // the suite's registry runs already; these tests need none
	)
	s.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/coordinator?sslmode=disable", p[0])
	s.brokers = []string{fmt.Sprintf("127.0.0.1:%d", p[1])}
	t.Cleanup(func() {
		if t.Failed() {
			s.logTail("kafka/server.log", 60)
			s.logTail("pg/postgres.log", 30)
		}
		if out, err := s.script("stop"); err != nil {
			t.Logf("stopping the private services: %v\n%s", err, out)
		}
		_ = os.RemoveAll(dir)
	})
	start := time.Now()
	if out, err := s.script("start"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("private services did not start: %v\n%s", err, out)
		}
		t.Skipf("private services did not start (scripts/services.sh start): %v\n%s", err, out)
	}
	t.Logf("private services up in %s: %s, %s", time.Since(start).Round(time.Millisecond), s.dsn, s.brokers[0])
	return s
}

// logTail logs the last lines of a service's log file (a path under the services directory).
func (s *privateServices) logTail(name string, lines int) {
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if err != nil {
		return
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	s.t.Logf("--- last %d lines of %s:\n%s", lines, name, strings.Join(all[max(0, len(all)-lines):], "\n"))
}

// markerSkips returns the broker's log lines saying it skipped transaction markers (the faults
// that leave transactions hanging; reported, never excused).
func (s *privateServices) markerSkips() []string {
	b, err := os.ReadFile(filepath.Join(s.dir, "kafka", "server.log"))
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "while trying to send transaction markers") {
			out = append(out, line)
		}
	}
	return out
}

// script runs scripts/services.sh with the private settings and returns its output.
func (s *privateServices) script(cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "../scripts/services.sh", cmd)
	c.Env = s.env
	c.WaitDelay = 10 * time.Second
	out, err := c.CombinedOutput()
	return string(out), err
}

// stop stops one service ("postgres" or "kafka") and returns how long that took.
func (s *privateServices) stop(service string) time.Duration {
	s.t.Helper()
	start := time.Now()
	s.downMu.Lock()
	s.down[service] = true
	s.downMu.Unlock()
	verb := "stop-"
	if service == "kafka" {
		// The broker is restarted as after a crash (SIGKILL). A controlled shutdown of the only
		// broker makes every partition leaderless, and Kafka 4.3/4.4 then skips the commit
		// markers of transactions whose EndTxn had already succeeded, while completing them in
		// the transaction log (seen here; docs/decisions.md). No coordinator can repair that.
		verb = "crash-"
	}
	out, err := s.script(verb + service)
	require.NoError(s.t, err, "services.sh %s%s:\n%s", verb, service, out)
	return time.Since(start)
}

// start starts one service again and returns how long it took until it was ready.
func (s *privateServices) start(service string) time.Duration {
	s.t.Helper()
	start := time.Now()
	out, err := s.script("start-" + service)
	require.NoError(s.t, err, "services.sh start-%s:\n%s", service, out)
	s.downMu.Lock()
	delete(s.down, service)
	s.downMu.Unlock()
	return time.Since(start)
}

// restoreOnCleanup starts again, at cleanup, a service that a failing test left stopped, so that
// the harness's cleanups (topic deletion, schema drop) do not wait for it. Register it after
// newStore: cleanups run last-registered first.
func (s *privateServices) restoreOnCleanup() {
	s.t.Cleanup(func() {
		s.downMu.Lock()
		var down []string
		for svc := range s.down {
			down = append(down, svc)
		}
		s.downMu.Unlock()
		for _, svc := range down {
			if out, err := s.script("start-" + svc); err != nil {
				s.t.Logf("restarting %s at cleanup: %v\n%s", svc, err, out)
			}
		}
	})
}

// restartLoad is the load of a restart test: workers send requests with unique ids, a mix of
// kinds, until told to stop (or a bound is reached).
type restartLoad struct {
	mu             sync.Mutex
	reqs           map[string]sent
	log            []loadResult
	contradictions []string
	stop           chan struct{}
	wg             sync.WaitGroup
}

type loadResult struct {
	id         string
	kind       string
	status     int
	start, end time.Time
}

// Bounds of the load: it stops by itself after this many requests or this long.
const (
	restartLoadWorkers  = 6
	restartLoadMaxReqs  = 6000
	restartLoadMaxTime  = 4 * time.Minute
	restartMinRequests  = 150
	restartSettle       = 3 * time.Second  // load after the service is back
	restartWantOKAfter  = 5                // 200s after the service is back before the load may stop
	restartWaitOKAfter  = 60 * time.Second // how long to wait for them
	restartLoadRampUp   = 1500 * time.Millisecond
	restartDownFor      = 3 * time.Second // after the stop has completed, before the start
	restartResolveBound = 2 * time.Minute
)

// restartKinds is the mix: mostly orders, some failing, some single-sided.
var restartKinds = []string{"order", "order", "order", "fail", "order", "sql-only", "order", "kafka-only", "order", "fail"}

func startRestartLoad(e *env, n *node) *restartLoad {
	l := &restartLoad{reqs: map[string]sent{}, stop: make(chan struct{})}
	deadline := time.Now().Add(restartLoadMaxTime)
	for w := range restartLoadWorkers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				if time.Now().After(deadline) || l.count() >= restartLoadMaxReqs {
					return
				}
				id := fmt.Sprintf("r%d-%04d", w, i)
				kind := restartKinds[(i+w)%len(restartKinds)]
				body := e.orderBody(id, kind)
				// Idempotent retries: an answer that does not settle the outcome (no answer, 503,
				// 202) is retried with the same id and body, and every tenth settled one is sent
				// once more; every answer must agree with the outcome.
				for try := 0; try < restartRetries; try++ {
					start := time.Now()
					st := n.post(body)
					l.record(id, kind, st, start)
					settled := st == http.StatusOK || st == http.StatusConflict
					if settled && (i%10 != 0 || try > 0) {
						break
					}
					if !settled {
						time.Sleep(50 * time.Millisecond) // a dependency is down: do not spin
					}
				}
			}
		}()
	}
	return l
}

// restartRetries bounds the sends of one request id.
const restartRetries = 4

// record notes one answer; a request's status for verify is 200 if any answer was 200, else 409
// if any was, else the last one. Answers that contradict each other (200 and 409 for one id) are
// kept for the check.
func (l *restartLoad) record(id, kind string, st int, start time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, seen := l.reqs[id]
	switch {
	case !seen, prev.status != http.StatusOK && prev.status != http.StatusConflict:
		l.reqs[id] = sent{kind: kind, status: st}
	case st == http.StatusOK && prev.status == http.StatusConflict, st == http.StatusConflict && prev.status == http.StatusOK:
		l.contradictions = append(l.contradictions, fmt.Sprintf("%s answered %d and then %d", id, prev.status, st))
	}
	l.log = append(l.log, loadResult{id: id, kind: kind, status: st, start: start, end: time.Now()})
}

func (l *restartLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.log)
}

// okSince counts 200 answers to requests sent after t.
func (l *restartLoad) okSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.log {
		if r.status == http.StatusOK && !r.start.Before(t) {
			n++
		}
	}
	return n
}

// runUntil keeps the load running until enough requests were sent and the service has been back
// for a while (with some requests committed since), then stops it and waits for the workers.
func (l *restartLoad) runUntil(back time.Time) {
	limit := back.Add(restartWaitOKAfter)
	for {
		enough := l.count() >= restartMinRequests && time.Since(back) >= restartSettle && l.okSince(back) >= restartWantOKAfter
		if enough || time.Now().After(limit) || l.count() >= restartLoadMaxReqs {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(l.stop)
	l.wg.Wait()
}

// report logs the answers by phase (before the outage, during it, after) and returns the
// requests for verify.
func (l *restartLoad) report(t *testing.T, down, back time.Time) map[string]sent {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	phases := []string{"before", "during", "after"}
	counts := map[string]map[int]int{}
	for _, p := range phases {
		counts[p] = map[int]int{}
	}
	for _, r := range l.log {
		switch {
		case r.end.Before(down):
			counts["before"][r.status]++
		case r.start.Before(back):
			counts["during"][r.status]++
		default:
			counts["after"][r.status]++
		}
	}
	for _, p := range phases {
		var parts []string
		var codes []int
		for c := range counts[p] {
			codes = append(codes, c)
		}
		sort.Ints(codes)
		for _, c := range codes {
			parts = append(parts, fmt.Sprintf("%d×%d", counts[p][c], c))
		}
		t.Logf("answers %s the outage: %s", p, strings.Join(parts, " "))
	}
	// A timeline by the second in which a request was sent: answers and the slowest answer.
	if len(l.log) > 0 {
		t0 := l.log[0].start
		for _, r := range l.log {
			if r.start.Before(t0) {
				t0 = r.start
			}
		}
		type bucket struct {
			codes map[int]int
			max   time.Duration
		}
		var buckets []*bucket
		for _, r := range l.log {
			i := int(r.start.Sub(t0) / time.Second)
			for len(buckets) <= i {
				buckets = append(buckets, &bucket{codes: map[int]int{}})
			}
			buckets[i].codes[r.status]++
			buckets[i].max = max(buckets[i].max, r.end.Sub(r.start))
		}
		var lines []string
		for i, b := range buckets {
			var codes []int
			for c := range b.codes {
				codes = append(codes, c)
			}
			sort.Ints(codes)
			var parts []string
			for _, c := range codes {
				parts = append(parts, fmt.Sprintf("%d×%d", b.codes[c], c))
			}
			mark := ""
			at := t0.Add(time.Duration(i) * time.Second)
			if !at.Add(time.Second).Before(down) && at.Before(back) {
				mark = " (outage)"
			}
			lines = append(lines, fmt.Sprintf("  +%02ds%s: %s, slowest %s", i, mark, strings.Join(parts, " "), b.max.Round(time.Millisecond)))
		}
		t.Logf("answers by the second the request was sent:\n%s", strings.Join(lines, "\n"))
	}
	out := make(map[string]sent, len(l.reqs))
	for id, s := range l.reqs {
		out[id] = s
	}
	return out
}

// testRestartUnderLoad restarts service ("kafka" or "postgres") while a coordinator binary runs
// under load, then checks every request.
func testRestartUnderLoad(t *testing.T, service string, second bool) {
	if useKfake() {
		t.Skip("restarting a broker needs the real one; this test runs in the real-Kafka pass of scripts/test.sh")
	}
	t.Parallel()
	began := time.Now()
	svc := startPrivateServices(t)
	e := newStore(t, envOpts{dsn: svc.dsn, brokers: svc.brokers})
	svc.restoreOnCleanup()
	var b *node
	if second {
		// A second instance on the log, running recovery passes only: after the outage (longer
		// than the lease) it races a for a's lock and may take a's rows over while a is still
		// running requests; fencing keeps them apart.
		b = e.startNode(t, "b", "COORDINATOR_DEFAULT_TIMEOUT=5s")
	}
	n := e.startNode(t, "a", "COORDINATOR_DEFAULT_TIMEOUT=5s")

	l := startRestartLoad(e, n)
	time.Sleep(restartLoadRampUp)
	down := time.Now()
	stopTook := svc.stop(service)
	// Leave it down for longer than a request's budget, so that requests meet the outage.
	time.Sleep(restartDownFor)
	startTook := svc.start(service)
	back := time.Now()
	t.Logf("%s stopped in %s, down %s (start took %s): stop sent %s, back %s", service, stopTook.Round(time.Millisecond),
		back.Sub(down).Round(time.Millisecond), startTook.Round(time.Millisecond),
		down.UTC().Format("15:04:05.000"), back.UTC().Format("15:04:05.000"))
	if service == "postgres" {
		// The test's own pool holds connections the restart closed.
		e.db.Reset()
	}

	l.runUntil(back)
	reqs := l.report(t, down, back)
	okAfter := l.okSince(back)
	t.Logf("%d requests, %d answered 200 after %s was back", len(reqs), okAfter, service)

	select {
	case <-n.p.done:
		require.FailNow(t, "coordinator exited during the test", "%v", n.p.err)
	default:
	}
	assert.Positive(t, okAfter, "the coordinator commits again after %s is back", service)
	assert.GreaterOrEqual(t, len(reqs), restartMinRequests)

	// Resolve what was in doubt: a pass at once, then the loop.
	r := call(t, http.MethodPost, n.base+"/v1/recovery/run", "")
	t.Logf("recovery pass: %s", strings.TrimSpace(string(r.Raw)))
	resolveStart := time.Now()
	e.waitResolved(t, restartResolveBound)
	t.Logf("in-doubt transactions resolved %s after the load stopped", time.Since(resolveStart).Round(time.Millisecond))

	// The coordinator holds its instance lock (again, after a PostgreSQL restart): it is the
	// only client of the private server that takes advisory locks.
	assert.Eventually(t, func() bool {
		var locks int
		err := e.db.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted`).Scan(&locks)
		return err == nil && locks > 0
	}, 15*time.Second, 100*time.Millisecond, "the coordinator's instance lock is held")
	if b != nil {
		var claims, byB int
		require.NoError(t, e.db.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE detail->>'claimed_by' = 'b')
FROM coordinator_events WHERE detail ? 'claimed_by'`).Scan(&claims, &byB))
		t.Logf("rows claimed by resolvers: %d (by b: %d); b's takeovers of a: %d", claims, byB,
			strings.Count(b.p.stderr.String(), "took over a dead instance"))
		assert.Equal(t, http.StatusOK, call(t, http.MethodGet, n.base+"/readyz", "").Status, "a serves again")
	}

	// Why requests aborted, by error class and message (ids and numbers blanked).
	rows, err := e.db.Query(context.Background(), `SELECT coalesce(error_participant,'') || '/' || coalesce(error_class,'') || ': ' ||
			regexp_replace(left(coalesce(error_message,''), 160), '[0-9a-f]{6,}|[0-9]+', '#', 'g') AS why, count(*)
		FROM coordinator_transactions WHERE state = 'aborted' GROUP BY why ORDER BY count(*) DESC`)
	require.NoError(t, err)
	for rows.Next() {
		var why string
		var count int
		require.NoError(t, rows.Scan(&why, &count))
		t.Logf("aborted %d× %s", count, why)
	}
	require.NoError(t, rows.Err())

	assert.Empty(t, l.contradictions, "an id answered both 200 and 409")
	if service == "kafka" {
		// The broker may have skipped markers at its restart (KAFKA-20734); the coordinator must
		// have found those transactions and repaired them: nothing is excused.
		skips := svc.markerSkips()
		t.Logf("the broker logged %d skipped transaction markers", len(skips))
		for _, line := range skips[:min(len(skips), 10)] {
			t.Logf("  %s", line)
		}
		e.checkHangingRepaired(t, n.base)
	}
	c, a := e.verify(t, n.base, reqs)
	t.Logf("%d requests (%d sends), %d committed, %d aborted (or never logged); test took %s", len(reqs), l.count(), c, a, time.Since(began).Round(time.Second))
	if t.Failed() {
		e.explainInconsistent(t, reqs)
	}
}

// explainInconsistent logs, for every request whose two sides disagree with the log (at most 20),
// the log row, its events, and its records as a read_uncommitted consumer sees them, with the
// transaction markers around them, so that a failure carries its evidence.
func (e *env) explainInconsistent(t *testing.T, reqs map[string]sent) {
	t.Helper()
	ctx := context.Background()
	committed := map[string]bool{}
	records := map[string]int{}
	for pos, r := range e.committedRecords(e.topic) {
		records[string(r.Key)]++
		committed[pos] = true
	}
	var bad []string
	for id, s := range reqs {
		var st string
		_ = e.db.QueryRow(ctx, `SELECT state FROM coordinator_transactions WHERE request_id = $1`, id).Scan(&st)
		rows := countRows(t, e.db, id)
		wantRow, wantRec := s.kind != "kafka-only", s.kind != "sql-only"
		var ok bool
		if st == "committed" {
			ok = (!wantRow || rows == 1) && (!wantRec || records[id] == 1) && s.status != http.StatusConflict
		} else {
			ok = rows == 0 && records[id] == 0 && s.status != http.StatusOK
		}
		if !ok {
			bad = append(bad, id)
		}
	}
	sort.Strings(bad)
	if len(bad) > 20 {
		bad = bad[:20]
	}
	want := map[string]bool{}
	for _, id := range bad {
		want[id] = true
		s := reqs[id]
		var st, tid, recs, created, prepared, finished, errMsg string
		var pid, epoch int64
		_ = e.db.QueryRow(ctx, `SELECT state, coalesce(transactional_id,''), coalesce(producer_id,-1),
			coalesce(producer_epoch,-1), kafka_records::text, created_at::text, coalesce(prepared_at::text,''),
			coalesce(finished_at::text,''), coalesce(error_message,'')
			FROM coordinator_transactions WHERE request_id = $1`, id).
			Scan(&st, &tid, &pid, &epoch, &recs, &created, &prepared, &finished, &errMsg)
		t.Logf("INCONSISTENT %s kind=%s status=%d state=%q rows=%d committed_records=%d txn_id=%s pid=%d epoch=%d records=%s created=%s prepared=%s finished=%s error=%q",
			id, s.kind, s.status, st, countRows(t, e.db, id), records[id], tid, pid, epoch, recs, created, prepared, finished, errMsg)
		rows, err := e.db.Query(ctx, `SELECT e.state, coalesce(e.detail::text,''), e.created_at::text FROM coordinator_events e
			JOIN coordinator_transactions t USING (gid) WHERE t.request_id = $1 ORDER BY e.id`, id)
		if err == nil {
			for rows.Next() {
				var es, ed, ec string
				_ = rows.Scan(&es, &ed, &ec)
				t.Logf("    event %s %s %s", ec, es, ed)
			}
			rows.Close()
		}
	}
	if len(want) == 0 {
		return
	}
	// Every record of the topic, read_uncommitted with the control records (transaction
	// markers): for each record of interest, the markers of its producer id on its partition
	// right before and after it. (With transactions v2 a marker carries the epoch after the
	// bump: the transaction of epoch e ends with a marker of epoch e+1.)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(e.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords())
	if err != nil {
		t.Logf("read_uncommitted client: %v", err)
		return
	}
	defer cl.Close()
	type key struct {
		partition int32
		pid       int64
	}
	markers := map[key][]*kgo.Record{}
	var found []*kgo.Record
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		fetches := cl.PollFetches(pctx)
		cancel()
		if fetches.NumRecords() == 0 {
			break
		}
		fetches.EachRecord(func(r *kgo.Record) {
			switch {
			case r.Attrs.IsControl():
				k := key{r.Partition, r.ProducerID}
				markers[k] = append(markers[k], r)
			case want[string(r.Key)]:
				found = append(found, r)
			}
		})
	}
	describe := func(m *kgo.Record) string {
		if m == nil {
			return "none"
		}
		kind := "ABORT"
		if len(m.Key) >= 4 && m.Key[3] == 1 {
			kind = "COMMIT"
		}
		return fmt.Sprintf("%s epoch=%d at offset %d (%s)", kind, m.ProducerEpoch, m.Offset, m.Timestamp.UTC().Format("15:04:05.000"))
	}
	for _, r := range found {
		var before, after *kgo.Record
		for _, m := range markers[key{r.Partition, r.ProducerID}] {
			if m.Offset < r.Offset {
				before = m
			} else if after == nil {
				after = m
			}
		}
		pos := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
		t.Logf("    record %s at %s pid=%d epoch=%d sent %s, visible to read_committed: %v; marker of pid %d on partition %d before it: %s; after it: %s",
			r.Key, pos, r.ProducerID, r.ProducerEpoch, r.Timestamp.UTC().Format("15:04:05.000"), committed[pos],
			r.ProducerID, r.Partition, describe(before), describe(after))
	}
}

// TestKafkaRestartUnderLoad restarts the Kafka broker (controlled shutdown, then start) while a
// coordinator runs under load.
func TestKafkaRestartUnderLoad(t *testing.T) {
	testRestartUnderLoad(t, "kafka", false)
}

// TestPostgresRestartUnderLoad restarts PostgreSQL (fast shutdown, then start) while a
// coordinator runs under load. Prepared transactions survive the restart; the coordinator's
// connections (and its instance lock's session) do not.
func TestPostgresRestartUnderLoad(t *testing.T) {
	testRestartUnderLoad(t, "postgres", false)
}

// TestPostgresRestartTwoInstances restarts PostgreSQL for longer than the instance lease while
// two instances share the log: a serves the load, b runs recovery passes. Both lose their
// locks' sessions; whichever of a's re-claim and b's takeover comes first, a's older epoch
// writes nothing more, and every transaction ends on both sides or neither.
func TestPostgresRestartTwoInstances(t *testing.T) {
	testRestartUnderLoad(t, "postgres", true)
}
