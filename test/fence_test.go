package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answers collects every status each request got (a request may be retried with its id).
type answers struct {
	mu    sync.Mutex
	kinds map[string]string
	all   map[string][]int
}

func newAnswers() *answers { return &answers{kinds: map[string]string{}, all: map[string][]int{}} }

func (a *answers) add(id, kind string, status int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.kinds[id] = kind
	a.all[id] = append(a.all[id], status)
}

// sent turns the answers into verify's input: a 200 if any answer was 200, else a 409 if any
// was, else the last. An id answered both 200 and 409 fails the test.
func (a *answers) sent(t *testing.T) (map[string]sent, map[int]int) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]sent{}
	hist := map[int]int{}
	for id, sts := range a.all {
		s := sent{kind: a.kinds[id], status: sts[len(sts)-1]}
		has := map[int]bool{}
		for _, st := range sts {
			has[st] = true
			hist[st]++
		}
		assert.False(t, has[http.StatusOK] && has[http.StatusConflict], "%s answered both 200 and 409: %v", id, sts)
		switch {
		case has[http.StatusOK]:
			s.status = http.StatusOK
		case has[http.StatusConflict]:
			s.status = http.StatusConflict
		}
		out[id] = s
	}
	return out, hist
}

// postRetrying sends a request and retries it with the same id while the answer says the
// instance could not take it (503, or no answer).
func (n *node) postRetrying(a *answers, id, kind, body string) {
	for attempt := 0; attempt < 4; attempt++ {
		st := n.post(body)
		a.add(id, kind, st)
		if st != 0 && st != http.StatusServiceUnavailable {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lockHolderSQL terminates the backend holding an instance's advisory lock (recovery/owner.go's
// key) in the test's schema.
const lockHolderSQL = `SELECT count(pg_terminate_backend(l.pid, 5000)) FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended($1 || '/kpgtx-instance/' || $2, 0)`

// TestLockSessionTerminated: two instances on one log. The serving instance's lock session is
// terminated again and again (pg_terminate_backend on its lock connection); every other time
// the test then holds that lock itself for longer than the lease, so that the instance cannot
// confirm its ownership (503, not ready), stops heartbeating, and the other instance's recovery
// passes race it for the lock and take its rows over. Meanwhile concurrent load with idempotent
// retries and requests that must abort. Every transaction ends on both sides or neither, every
// 200 on both, every 409 on neither, GET agrees, nothing is left prepared.
func TestLockSessionTerminated(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{})
	short := []string{"COORDINATOR_MAX_TIMEOUT=3s", "COORDINATOR_DEFAULT_TIMEOUT=3s", "COORDINATOR_FINISH_TIMEOUT=2s"}
	b := e.startNode(t, "b", short...)
	// a heartbeats and checks its lock every second only: after its lock session dies, b (lease
	// 1s, passes every 200ms) may take a's lock, bump its epoch and claim its rows while a still
	// runs requests — the zombie case fencing is for.
	a := e.startNode(t, "a", append(short, "COORDINATOR_RECOVERY_INTERVAL=2s", "COORDINATOR_INSTANCE_LEASE=4s")...)
	ctx := context.Background()

	ans := newAnswers()
	kinds := []string{"order", "order", "order", "sql-only", "kafka-only", "fail"}
	var stop atomic.Bool
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := next.Add(1)
				id := fmt.Sprintf("s%04d", i)
				kind := kinds[int(i)%len(kinds)]
				a.postRetrying(ans, id, kind, e.orderBody(id, kind))
			}
		}()
	}

	var terminated, held, notReady int
	for cycle := 0; cycle < 16 || next.Load() < 300; cycle++ {
		if cycle > 60 {
			break
		}
		time.Sleep(time.Duration(200+rand.IntN(400)) * time.Millisecond)
		var n int
		require.NoError(t, e.db.QueryRow(ctx, lockHolderSQL, e.prefix, "a").Scan(&n))
		terminated += n
		if cycle%2 == 1 {
			continue
		}
		// Keep a from its lock for longer than the lease: it must stop serving, and b may take
		// its rows over once the test lets go.
		conn, err := e.db.Acquire(ctx)
		require.NoError(t, err)
		var got bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1 || '/kpgtx-instance/' || $2, 0))`,
			e.prefix, "a").Scan(&got))
		if got {
			held++
			time.Sleep(1300 * time.Millisecond) // a checks its lock every second
			if r := call(t, http.MethodGet, a.base+"/readyz", ""); r.Status == http.StatusServiceUnavailable &&
				strings.Contains(string(r.Raw), "ownership") {
				notReady++
			}
			time.Sleep(300 * time.Millisecond)
			_, err = conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1 || '/kpgtx-instance/' || $2, 0))`, e.prefix, "a")
			require.NoError(t, err)
		}
		conn.Release()
	}
	stop.Store(true)
	wg.Wait()
	// a serves again: it claimed its lock back.
	require.Eventually(t, func() bool {
		return call(t, http.MethodGet, a.base+"/readyz", "").Status == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "a claims its lock again and is ready")
	a.postRetrying(ans, "last", "order", e.orderBody("last", "order"))

	e.waitResolved(t, 2*time.Minute)
	reqs, hist := ans.sent(t)
	committed, aborted := e.verify(t, b.base, reqs)
	var epoch int64
	require.NoError(t, e.db.QueryRow(ctx, `SELECT epoch FROM coordinator_instances WHERE instance_id = 'a'`).Scan(&epoch))
	var claims, takenOver int
	require.NoError(t, e.db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE detail->>'claimed_by' = 'b')
FROM coordinator_events WHERE detail ? 'claimed_by'`).Scan(&claims, &takenOver))
	require.Positive(t, terminated)
	require.Positive(t, notReady, "a reported not ready while it could not confirm its lock")
	t.Logf("%d requests (%d committed, %d aborted); answers %v; lock sessions terminated %d, lock held away %d times (not ready seen %d); a's epoch %d; rows claimed by resolvers %d (by b %d); b's takeovers: %d",
		len(reqs), committed, aborted, hist, terminated, held, notReady, epoch, claims, takenOver,
		strings.Count(b.p.stderr.String(), "took over a dead instance"))
}

// TestLogWriteDelayed: a request's prepared write is held back past the finish bound by another
// session holding a lock on its log row, while recovery passes run and other requests go on.
// The request answers 202 and its write may still land after it gave up; whichever of that
// write and recovery's claim comes first decides, and both sides follow.
func TestLogWriteDelayed(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{})
	// The test locks the request's row while its SQL runs, so the row must be logged first:
	// with S8 on, a request that joins a batch while every slot is taken has none before its
	// prepared write, whose late landing coord.TestDeferredRowsFaultAtEveryStep covers.
	a := e.startNode(t, "a", "COORDINATOR_FINISH_TIMEOUT=1s", "COORDINATOR_DEFER_ROWS=false")
	ctx := context.Background()
	key := rand.Int32N(1 << 30)

	ans := newAnswers()
	var stop atomic.Bool
	var next atomic.Int64
	var wg sync.WaitGroup
	kinds := []string{"order", "order", "sql-only", "kafka-only", "fail"}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := next.Add(1)
				id := fmt.Sprintf("w%04d", i)
				kind := kinds[int(i)%len(kinds)]
				a.postRetrying(ans, id, kind, e.orderBody(id, kind))
			}
		}()
	}

	const rounds = 6
	for r := range rounds {
		id := fmt.Sprintf("d%02d", r)
		lock, err := e.db.Acquire(ctx)
		require.NoError(t, err)
		_, err = lock.Exec(ctx, "SELECT pg_advisory_lock($1)", key)
		require.NoError(t, err)
		// The request's SQL waits on the advisory lock in phase 1, so the test can lock its
		// log row before the prepared write.
		body := fmt.Sprintf(`{"id":%q,"timeout_ms":10000,"sql":[{"statement":"INSERT INTO orders (id, total) VALUES ($1, 1)","args":[%q]},{"statement":"SELECT pg_advisory_xact_lock(%d)"}],"kafka":[{"topic":%q,"key":%q,"value":"v"}]}`,
			id, id, key, e.topic, id)
		done := make(chan int, 1)
		go func() { done <- a.post(body) }()
		waitWaiters(t, e.db, key, 1)
		blocker, err := e.db.Begin(ctx)
		require.NoError(t, err)
		var one int
		require.NoError(t, blocker.QueryRow(ctx, `SELECT 1 FROM coordinator_transactions WHERE request_id = $1 FOR UPDATE`, id).Scan(&one))
		_, err = lock.Exec(ctx, "SELECT pg_advisory_unlock($1)", key)
		require.NoError(t, err)
		lock.Release()
		st := <-done // the prepared write waits on the row lock past the finish bound
		ans.add(id, "order", st)
		assert.Equal(t, http.StatusAccepted, st, "%s: the prepared write did not confirm within the finish bound", id)
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond) // recovery passes run meanwhile
		require.NoError(t, blocker.Commit(ctx))
	}
	stop.Store(true)
	wg.Wait()

	e.waitResolved(t, 2*time.Minute)
	reqs, hist := ans.sent(t)
	committed, aborted := e.verify(t, a.base, reqs)
	delayed := map[string]int{}
	for r := range rounds {
		id := fmt.Sprintf("d%02d", r)
		delayed[call(t, http.MethodGet, a.base+"/v1/transactions/"+id, "").str("state")]++
	}
	t.Logf("%d requests (%d committed, %d aborted); answers %v; %d prepared writes delayed past the finish bound, settled as %v",
		len(reqs), committed, aborted, hist, rounds, delayed)
}
