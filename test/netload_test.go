package test

// The load and the checks of the network-fault tests: workers send requests of several shapes
// (some must abort) with idempotent same-id retries while faults are injected in windows; at the
// end every request is checked on both sides, against every answer it got and against GET.

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// netKind is the shape of a request.
type netKind struct {
	name    string
	dbs     []string // databases the request writes one row to ("default", "other")
	records int      // records keyed by the request id, over partitions 0, 1, 2, ...
	fails   bool     // a statement fails after the writes: the request must abort
	pause   bool     // the writes on "other" are followed by a second of pg_sleep
}

// needs reports whether a request of this kind cannot commit without the proxy's service.
func (k netKind) needs(np *netProxy) bool {
	switch np.name {
	case "log":
		return true // every request is logged before anything runs
	case "participant":
		for _, db := range k.dbs {
			if db == "other" {
				return true
			}
		}
		return false
	case "kafka":
		return k.records > 0
	}
	panic("netKind.needs: unknown proxy " + np.name)
}

// createNetTables creates the table the load writes to, without a key, so that a request applied
// twice shows as two rows.
func (e *env) createNetTables(t *testing.T) {
	t.Helper()
	for _, db := range []*pgxpool.Pool{e.db, e.db2} {
		if db != nil {
			_, err := db.Exec(context.Background(), `CREATE TABLE nf_rows (id text NOT NULL, db text NOT NULL)`)
			require.NoError(t, err)
		}
	}
}

// netBody is the request id of kind k.
func (e *env) netBody(id string, k netKind) string {
	var stmts, recs []string
	for _, db := range k.dbs {
		stmts = append(stmts, fmt.Sprintf(`{"database":%q,"statement":"INSERT INTO nf_rows (id, db) VALUES ($1, $2)","args":[%q,%q]}`, db, id, db))
	}
	if k.pause {
		stmts = append(stmts, `{"database":"other","statement":"SELECT pg_sleep(1)"}`)
	}
	if k.fails {
		stmts = append(stmts, fmt.Sprintf(`{"database":%q,"statement":"SELECT 1/0"}`, k.dbs[len(k.dbs)-1]))
	}
	for i := range k.records {
		recs = append(recs, fmt.Sprintf(`{"topic":%q,"partition":%d,"key":%q,"value":"v"}`, e.topic, i%3, id))
	}
	return fmt.Sprintf(`{"id":%q,"sql":[%s],"kafka":[%s]}`, id, strings.Join(stmts, ","), strings.Join(recs, ","))
}

// Bounds of the load. netMaxSends bounds the sends before the faults have healed (a fast
// machine sent 20,000 before the last fault ended and then nothing, so the check that the
// coordinator commits again after the heal saw no request); after the heal, finish bounds the
// load by time and stops it as soon as it committed again.
const (
	netWorkers  = 6
	netMaxSends = 60000
	netMaxTries = 6 // sends of one id
)

// netSend is one answer (status 0: none, the connection failed or timed out).
type netSend struct {
	id         string
	try        int
	status     int
	start, end time.Time
}

// faultLoad is the running load.
type faultLoad struct {
	e     *env
	n     *node
	mu    sync.Mutex
	kinds map[string]netKind // by request id
	ans   map[string][]int   // answers by request id, in order
	sends []netSend          // every answer
	wins  []*faultWindow     // the faults injected, in order
	stop  chan struct{}
	wg    sync.WaitGroup
	// healed: the last fault has healed (finish); the send bound no longer holds the load back.
	healed atomic.Bool
}

// faultWindow is one fault: what was done to which proxies, and when it held.
type faultWindow struct {
	class, variant string
	proxies        []*netProxy
	start, end     time.Time
	faults         int // fault actions injected (toxic bursts, cuts, partitions)
}

func (w *faultWindow) scope() string {
	var names []string
	for _, np := range w.proxies {
		names = append(names, np.name)
	}
	return strings.Join(names, "+")
}

func startFaultLoad(e *env, n *node, kinds []netKind) *faultLoad {
	l := &faultLoad{e: e, n: n, kinds: map[string]netKind{}, ans: map[string][]int{}, stop: make(chan struct{})}
	client := &http.Client{Timeout: 30 * time.Second}
	for w := range netWorkers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				for !l.healed.Load() && l.sent() >= netMaxSends {
					if l.stopped() {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				if l.stopped() {
					return
				}
				id := fmt.Sprintf("n%d-%05d", w, i)
				k := kinds[(i+w)%len(kinds)]
				body := e.netBody(id, k)
				l.mu.Lock()
				l.kinds[id] = k
				l.mu.Unlock()
				// Idempotent retries: an answer that does not settle the outcome (none, 503, 202) is
				// sent again with the same id and body; one settled request in eight is sent once
				// more. Every answer must agree with the outcome.
				resend := i%8 == 0
				for try := 0; try < netMaxTries; try++ {
					start := time.Now()
					st := postStatus(client, n.base, body)
					l.record(netSend{id: id, try: try, status: st, start: start, end: time.Now()})
					if st == http.StatusOK || st == http.StatusConflict {
						if resend {
							resend = false
							continue
						}
						break
					}
					if l.stopped() {
						break // recovery settles it
					}
					// In doubt (202), or a dependency unreachable: ask again with the same id, backing
					// off so that the retries of one id outlast a partition.
					time.Sleep(min(150*time.Millisecond<<try, 2*time.Second))
				}
			}
		}()
	}
	return l
}

// postStatus sends a request and returns the status (0: no answer).
func postStatus(client *http.Client, base, body string) int {
	resp, err := client.Post(base+"/v1/transactions", "application/json", strings.NewReader(body))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (l *faultLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *faultLoad) record(s netSend) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sends = append(l.sends, s)
	l.ans[s.id] = append(l.ans[s.id], s.status)
}

func (l *faultLoad) sent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sends)
}

// okSince counts 200 answers to sends started after t.
func (l *faultLoad) okSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.sends {
		if s.status == http.StatusOK && !s.start.Before(t) {
			n++
		}
	}
	return n
}

// window records a fault once it has healed.
func (l *faultLoad) window(w *faultWindow) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wins = append(l.wins, w)
}

// finish keeps the load running after the last fault until it commits again (at least minOK
// answers 200 sent after healed, within a bound), then stops it.
func (l *faultLoad) finish(t *testing.T, healed time.Time, minOK int) {
	t.Helper()
	l.healed.Store(true)
	limit := healed.Add(90 * time.Second)
	for time.Since(healed) < 3*time.Second || (l.okSince(healed) < minOK && time.Now().Before(limit)) {
		time.Sleep(100 * time.Millisecond)
	}
	close(l.stop)
	l.wg.Wait()
	select {
	case <-l.n.p.done:
		require.FailNow(t, "the coordinator exited during the test", "%v", l.n.p.err)
	default:
	}
	if !assert.GreaterOrEqual(t, l.okSince(healed), minOK, "the coordinator commits again once the network is healed") {
		// Where it is stuck: SIGQUIT makes the Go runtime print every goroutine's stack to
		// stderr, which the harness logs for a failed test.
		_ = l.n.p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-l.n.p.done:
		case <-time.After(10 * time.Second):
		}
	}
}

// checkPartitionsHeld checks that the proxies really stood between the coordinator and the
// services: no request sent for the first time during a partition, and answered before it
// healed, committed if it needed a partitioned service.
// conclude ends a fault test's load once the faults have healed: it waits for requests to
// succeed again, checks the routing once more (routed), reports the fault windows, checks that
// nothing committed inside a partition, and verifies both sides.
func (l *faultLoad) conclude(t *testing.T, routed func()) netTally {
	t.Helper()
	l.finish(t, time.Now(), 5)
	routed()
	faults := l.report(t)
	l.checkPartitionsHeld(t)
	tally := l.verify(t)
	tally.faults = faults
	// The load ran several requests at once, so the checks above held for shared Kafka
	// transactions too (coord/batch.go).
	shared := l.e.sharedRows(t)
	t.Logf("%d requests were logged prepared in a Kafka transaction shared with another", shared)
	assert.Positive(t, shared, "no request rode in a shared Kafka transaction")
	return tally
}

func (l *faultLoad) checkPartitionsHeld(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.wins {
		if w.class != "partition" {
			continue
		}
		inside := 0
		for _, s := range l.sends {
			if s.try != 0 || s.start.Before(w.start) || s.end.After(w.end) {
				continue
			}
			k := l.kinds[s.id]
			for _, np := range w.proxies {
				if k.needs(np) {
					inside++
					assert.NotEqual(t, http.StatusOK, s.status, "%s (%s) committed during the %s partition of %s", s.id, k.name, w.variant, w.scope())
					break
				}
			}
		}
		t.Logf("partition %s of %s: %d requests needing it were sent and answered inside it, none committed", w.variant, w.scope(), inside)
	}
}

// report logs the answers of the sends started in each window and returns the fault actions.
func (l *faultLoad) report(t *testing.T) (faults int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.wins {
		faults += w.faults
		codes := map[int]int{}
		var slowest time.Duration
		for _, s := range l.sends {
			// Sends in flight during the window: started before it ended, answered after it began.
			if s.start.Before(w.end) && s.end.After(w.start) {
				codes[s.status]++
				slowest = max(slowest, s.end.Sub(s.start))
			}
		}
		t.Logf("%s %s on %s for %s (%d faults): answers to the sends in flight %s, slowest %s", w.class, w.variant, w.scope(),
			w.end.Sub(w.start).Round(100*time.Millisecond), w.faults, formatCodes(codes), slowest.Round(time.Millisecond))
	}
	codes := map[int]int{}
	for _, s := range l.sends {
		codes[s.status]++
	}
	t.Logf("all answers: %s", formatCodes(codes))
	return faults
}

func formatCodes(codes map[int]int) string {
	var keys []int
	for c := range codes {
		keys = append(keys, c)
	}
	sort.Ints(keys)
	var parts []string
	for _, c := range keys {
		parts = append(parts, fmt.Sprintf("%d×%d", codes[c], c))
	}
	return strings.Join(parts, " ")
}

// netTally is what the checks found.
type netTally struct {
	txns, sends, faults         int
	committed, aborted          int
	inDoubt, inDoubtCommitted   int // answered 202 or not at all at least once
	retried503, retried503Final int // answered 503 at least once; of those, committed in the end
	unsettled                   int // never answered 200 or 409: the outcome came from the log
}

func (n netTally) String() string {
	return fmt.Sprintf("%d transactions (%d sends), %d fault actions: %d committed, %d aborted; "+
		"%d in doubt (202 or no answer) then resolved: %d committed, %d aborted; "+
		"%d answered 503 then retried: %d of them committed; %d never settled by an answer",
		n.txns, n.sends, n.faults, n.committed, n.aborted, n.inDoubt, n.inDoubtCommitted,
		n.inDoubt-n.inDoubtCommitted, n.retried503, n.retried503Final, n.unsettled)
}

// verify resolves what is in doubt and checks every request: committed means exactly one row in
// each database it wrote to and exactly its records, and no 409 ever; aborted (or never logged)
// means nothing anywhere and no 200 ever; GET agrees with the log; nothing stays prepared and the
// in-doubt view is empty.
func (l *faultLoad) verify(t *testing.T) netTally {
	t.Helper()
	e, n := l.e, l.n
	ctx := context.Background()
	r := call(t, http.MethodPost, n.base+"/v1/recovery/run", "")
	t.Logf("recovery pass: %d %s", r.Status, strings.TrimSpace(string(r.Raw)))
	e.waitResolved(t, 2*time.Minute)
	// Leftovers of aborted transactions are rolled back by recovery once they are old enough
	// (recovery/sweep.go): passes until none is left.
	var prepared []string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		prepared = e.preparedLeft()
		if len(prepared) == 0 || time.Now().After(deadline) {
			break
		}
		call(t, http.MethodPost, n.base+"/v1/recovery/run", "")
	}
	assert.Empty(t, prepared, "prepared transactions left after recovery")

	records := map[string]int{}
	for _, rec := range e.committedRecords(e.topic) {
		records[string(rec.Key)]++
	}
	rows := map[string]map[string]int{} // db -> id -> rows
	for db, pool := range map[string]*pgxpool.Pool{"default": e.db, "other": e.db2} {
		rows[db] = map[string]int{}
		if pool == nil {
			continue
		}
		rs, err := pool.Query(ctx, `SELECT id, db, count(*) FROM nf_rows GROUP BY id, db`)
		require.NoError(t, err)
		for rs.Next() {
			var id, in string
			var c int
			require.NoError(t, rs.Scan(&id, &in, &c))
			require.Equal(t, db, in, "%s: a row of database %s landed in %s", id, in, db)
			rows[db][id] = c
		}
		require.NoError(t, rs.Err())
	}
	states := map[string]string{}
	rs, err := e.db.Query(ctx, `SELECT request_id, state FROM coordinator_transactions`)
	require.NoError(t, err)
	for rs.Next() {
		var id, st string
		require.NoError(t, rs.Scan(&id, &st))
		states[id] = st
	}
	require.NoError(t, rs.Err())

	l.mu.Lock()
	defer l.mu.Unlock()
	tally := netTally{txns: len(l.kinds), sends: len(l.sends)}
	var bad []string
	for id, k := range l.kinds {
		ans := l.ans[id]
		has := map[int]bool{}
		for _, a := range ans {
			has[a] = true
		}
		st := states[id]
		ok := true
		check := func(cond bool, msg string, args ...any) {
			if !assert.Truef(t, cond, "%s (%s, answers %v, state %q): "+msg, append([]any{id, k.name, ans, st}, args...)...) {
				ok = false
			}
		}
		check(!(has[http.StatusOK] && has[http.StatusConflict]), "answered both 200 and 409")
		switch st {
		case "committed":
			tally.committed++
			check(!k.fails, "a request with a failing statement committed")
			check(!has[http.StatusConflict], "answered 409 but committed")
			for _, db := range []string{"default", "other"} {
				want := 0
				for _, d := range k.dbs {
					if d == db {
						want = 1
					}
				}
				check(rows[db][id] == want, "committed: %d rows in %s, want %d", rows[db][id], db, want)
			}
			check(records[id] == k.records, "committed: %d records, want %d", records[id], k.records)
		case "aborted", "":
			tally.aborted++
			check(!has[http.StatusOK], "answered 200 but %s", st)
			check(rows["default"][id]+rows["other"][id] == 0, "%s: rows %d+%d", st, rows["default"][id], rows["other"][id])
			check(records[id] == 0, "%s: %d records", st, records[id])
		default:
			check(false, "unexpected final state")
		}
		if has[http.StatusAccepted] || has[0] {
			tally.inDoubt++
			if st == "committed" {
				tally.inDoubtCommitted++
			}
		}
		if has[http.StatusServiceUnavailable] {
			tally.retried503++
			if st == "committed" {
				tally.retried503Final++
			}
		}
		if !has[http.StatusOK] && !has[http.StatusConflict] {
			tally.unsettled++
		}
		got := call(t, http.MethodGet, n.base+"/v1/transactions/"+id, "")
		if st == "" {
			check(got.Status == http.StatusNotFound, "never logged, but GET answers %d", got.Status)
		} else {
			check(got.str("state") == st, "GET says %q", got.str("state"))
		}
		if !ok {
			bad = append(bad, id)
		}
	}
	var left []map[string]any
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		left = inDoubtEntries(t, n.base, "", 100)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	assert.Empty(t, left, "the in-doubt view is empty once recovery has run")
	if len(bad) > 0 {
		l.explain(t, bad)
	}
	return tally
}

// explain logs the evidence of (at most 20) inconsistent requests: their answers with times,
// the log row and its events.
func (l *faultLoad) explain(t *testing.T, bad []string) {
	t.Helper()
	sort.Strings(bad)
	ctx := context.Background()
	for _, id := range bad[:min(len(bad), 20)] {
		var sends []string
		for _, s := range l.sends {
			if s.id == id {
				sends = append(sends, fmt.Sprintf("%d %s..%s", s.status, s.start.UTC().Format("15:04:05.000"), s.end.UTC().Format("15:04:05.000")))
			}
		}
		var st, errMsg, created, finished string
		_ = l.e.db.QueryRow(ctx, `SELECT state, coalesce(error_message,''), created_at::text, coalesce(finished_at::text,'')
			FROM coordinator_transactions WHERE request_id = $1`, id).Scan(&st, &errMsg, &created, &finished)
		t.Logf("INCONSISTENT %s (%s): sends [%s]; state %q created %s finished %s error %q", id, l.kinds[id].name,
			strings.Join(sends, ", "), st, created, finished, errMsg)
		rows, err := l.e.db.Query(ctx, `SELECT e.created_at::text, e.state, coalesce(e.detail::text,'') FROM coordinator_events e
			JOIN coordinator_transactions t USING (gid) WHERE t.request_id = $1 ORDER BY e.id`, id)
		if err != nil {
			continue
		}
		evs, _ := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			var at, s, d string
			err := r.Scan(&at, &s, &d)
			return at + " " + s + " " + d, err
		})
		for _, ev := range evs {
			t.Logf("    event %s", ev)
		}
	}
}
