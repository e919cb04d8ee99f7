package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// node is one coordinator process of a black-box test.
type node struct {
	t    *testing.T
	e    *env
	name string
	base string
	p    *proc
}

// binaryEnv is the binary's environment for this test's schema, topic and prefixes.
func (e *env) binaryEnv(instance, listen string, extra ...string) []string {
	c := e.cfg
	set := []string{
		"DATABASE_URL=" + c.DatabaseURL,
		"COORDINATOR_LISTEN=" + listen,
		"COORDINATOR_INSTANCE=" + instance,
		"COORDINATOR_GID_PREFIX=" + c.GIDPrefix,
		"KAFKA_TRANSACTIONAL_ID_PREFIX=" + c.TxnIDPrefix,
		"KAFKA_POOL_SIZE=8",
		"COORDINATOR_RECOVERY_INTERVAL=200ms",
		"COORDINATOR_INSTANCE_LEASE=1s",
		"COORDINATOR_CLAIM_WAIT=5s",
		"COORDINATOR_LOG_LEVEL=warn",
	}
	if len(c.Brokers) > 0 {
		set = append(set, "KAFKA_BROKERS="+strings.Join(c.Brokers, ","))
	}
	for name, dsn := range c.Databases {
		set = append(set, "COORDINATOR_DATABASES="+name+"="+dsn)
	}
	return coordinatorEnv(append(set, extra...)...)
}

// startNode starts the binary as instance name and waits until it serves.
func (e *env) startNode(t *testing.T, name string, extra ...string) *node {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	n := &node{t: t, e: e, name: name, base: "http://" + listen}
	n.p = startCoordinator(t, e.binaryEnv(name, listen, extra...), "serve")
	waitHealthy(t, n.p, n.base, 60*time.Second)
	return n
}

// kill ends the process with SIGKILL and waits for it.
func (n *node) kill() {
	_ = n.p.cmd.Process.Signal(syscall.SIGKILL)
	n.waitExit(10 * time.Second)
}

func (n *node) waitExit(timeout time.Duration) {
	n.t.Helper()
	select {
	case <-n.p.done:
	case <-time.After(timeout):
		require.FailNow(n.t, "coordinator did not exit", "%s within %s", n.name, timeout)
	}
}

// post sends a request; status 0 means no answer (the process died).
func (n *node) post(body string) int {
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Post(n.base+"/v1/transactions", "application/json", strings.NewReader(body))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// orderBody is a request writing one row and one record keyed by id; kind varies the shape.
func (e *env) orderBody(id, kind string) string {
	row := fmt.Sprintf(`{"statement":"INSERT INTO orders (id, total) VALUES ($1, 1)","args":[%q]}`, id)
	rec := fmt.Sprintf(`{"topic":%q,"key":%q,"value":"v"}`, e.topic, id)
	switch kind {
	case "sql-only":
		return fmt.Sprintf(`{"id":%q,"sql":[%s]}`, id, row)
	case "kafka-only":
		return fmt.Sprintf(`{"id":%q,"kafka":[%s]}`, id, rec)
	case "fail":
		return fmt.Sprintf(`{"id":%q,"sql":[%s,{"statement":"SELECT 1/0"}],"kafka":[%s]}`, id, row, rec)
	case "derived":
		// P2: the record's key and value are the inserted row, resolved after the insert ran.
		ret := fmt.Sprintf(`{"statement":"INSERT INTO orders (id, total) VALUES ($1, 1) RETURNING id, total","args":[%q]}`, id)
		derived := fmt.Sprintf(`{"topic":%q,"key":{"type":"string","from":"sql[0].rows[0].id"},"value":{"type":"json","from":"sql[0].rows[0]"}}`, e.topic)
		return fmt.Sprintf(`{"id":%q,"sql":[%s],"kafka":[%s]}`, id, ret, derived)
	case "decided":
		// D1: answered at the decision, phase 2 behind the answer.
		return fmt.Sprintf(`{"id":%q,"sql":[%s],"kafka":[%s],"answer":"decided"}`, id, row, rec)
	}
	return fmt.Sprintf(`{"id":%q,"sql":[%s],"kafka":[%s]}`, id, row, rec)
}

// sent is what a test sent: the request's shape and the status it got (0: no answer).
type sent struct {
	kind   string
	status int
}

// waitResolved polls until no transaction of the test is in doubt (recovery has run).
func (e *env) waitResolved(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var n int
		require.NoError(t, e.db.QueryRow(context.Background(),
			`SELECT count(*) FROM coordinator_transactions WHERE state IN ('active','aborting','prepared','committing')`).Scan(&n))
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			rows, _ := e.db.Query(context.Background(), `SELECT gid, state, attempts, coalesce(last_error,'') FROM coordinator_transactions WHERE state IN ('active','aborting','prepared','committing')`)
			var left []string
			for rows.Next() {
				var g, s, le string
				var a int
				_ = rows.Scan(&g, &s, &a, &le)
				left = append(left, fmt.Sprintf("%s %s attempts=%d %s", g, s, a, le))
			}
			require.FailNow(t, "transactions still in doubt", "%d after %s:\n%s", n, timeout, strings.Join(left, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// verify checks every request on both sides against the log and the API: committed means the
// row and exactly one record; aborted or never logged means neither. It returns the counts.
func (e *env) verify(t *testing.T, api string, reqs map[string]sent) (committed, aborted int) {
	t.Helper()
	ctx := context.Background()
	records := map[string]int{}
	for _, r := range e.committedRecords(e.topic) {
		records[string(r.Key)]++
	}
	states := map[string]string{}
	rows, err := e.db.Query(ctx, `SELECT request_id, state FROM coordinator_transactions`)
	require.NoError(t, err)
	for rows.Next() {
		var id, st string
		require.NoError(t, rows.Scan(&id, &st))
		states[id] = st
	}
	require.NoError(t, rows.Err())
	for id, s := range reqs {
		var n int
		require.NoError(t, e.db.QueryRow(ctx, "SELECT count(*) FROM orders WHERE id = $1", id).Scan(&n))
		wantRow := s.kind != "kafka-only"
		wantRec := s.kind != "sql-only"
		st := states[id]
		switch st {
		case "committed":
			committed++
			require.NotEqual(t, "fail", s.kind, "%s: a failing request committed", id)
			if wantRow {
				assert.Equal(t, 1, n, "%s committed: row", id)
			}
			if wantRec {
				e.checkRecords(t, id, 1, records[id], "%s committed: exactly one record", id)
			}
			assert.NotEqual(t, http.StatusConflict, s.status, "%s: answered 409 but committed", id)
		case "aborted", "":
			aborted++
			assert.Zero(t, n, "%s %s: no row", id, st)
			e.checkRecords(t, id, 0, records[id], "%s %s: no record", id, st)
			assert.NotEqual(t, http.StatusOK, s.status, "%s: answered 200 but %s", id, st)
		default:
			assert.Fail(t, "unexpected state", "%s: %s", id, st)
		}
		if api != "" {
			r := call(t, http.MethodGet, api+"/v1/transactions/"+id, "")
			if st == "" {
				assert.Equal(t, http.StatusNotFound, r.Status, "%s: not logged", id)
			} else {
				assert.Equal(t, st, r.str("state"), "%s: API reports the outcome", id)
			}
		}
	}
	assert.Empty(t, e.preparedLeft(), "prepared gids left")
	return committed, aborted
}

// checkRecords asserts how many of a request's records a read_committed consumer sees.
func (e *env) checkRecords(t *testing.T, id string, want, got int, msg string, args ...any) {
	t.Helper()
	assert.Equal(t, want, got, append([]any{msg}, args...)...)
}

// sharedRows counts the log rows that were logged prepared with the same Kafka ids as another
// row: the members of shared Kafka transactions (coord/batch.go).
func (e *env) sharedRows(t testing.TB) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.QueryRow(context.Background(), `
SELECT coalesce(sum(n), 0) FROM (SELECT count(*) AS n FROM coordinator_transactions
WHERE producer_id IS NOT NULL GROUP BY transactional_id, producer_id, producer_epoch HAVING count(*) > 1) g`).Scan(&n))
	return n
}

// postAll sends one request of each kind at once (ids prefix0, prefix1, …) and returns what
// each was answered (0: no answer).
func (n *node) postAll(prefix string, kinds []string) map[string]sent {
	reqs := map[string]sent{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, kind := range kinds {
		id := fmt.Sprintf("%s%02d", prefix, i)
		wg.Go(func() {
			st := n.post(n.e.orderBody(id, kind))
			mu.Lock()
			reqs[id] = sent{kind: kind, status: st}
			mu.Unlock()
		})
	}
	wg.Wait()
	return reqs
}

// TestFaultPoints kills the coordinator at every step boundary while a mix of requests runs,
// restarts it, and checks that recovery makes every request consistent on both sides and that
// the API reports the same outcome.
func TestFaultPoints(t *testing.T) {
	t.Parallel()
	for _, point := range txntype.FaultPoints {
		t.Run(string(point), func(t *testing.T) {
			t.Parallel()
			e := newStore(t, envOpts{})
			n := e.startNode(t, "a", "COORDINATOR_FAULT="+string(point))
			kinds := []string{"order", "order", "order", "derived", "sql-only", "kafka-only", "fail", "order", "derived", "decided", "decided"}
			reqs := n.postAll("f", kinds)
			n.waitExit(30 * time.Second) // the fault point killed it
			n2 := e.startNode(t, "a")
			e.waitResolved(t, 60*time.Second)
			c, a := e.verify(t, n2.base, reqs)
			t.Logf("%s: %d committed, %d aborted", point, c, a)
			if point == txntype.FaultDecidedBeforePhase2 {
				// D1: answered 200 at the decision, killed before phase 2: still committed on
				// both sides (verify: a 200 never ends aborted).
				answered := 0
				for _, s := range reqs {
					if s.kind == "decided" && s.status == http.StatusOK {
						answered++
					}
				}
				assert.Positive(t, answered, "no decided request was answered before the kill")
			}
		})
	}
}

// TestSharedBatchKilled kills the coordinator at the step boundaries of a shared Kafka
// transaction while many requests run together, so the kill lands in a batch: every member is
// then resolved by recovery (members logged prepared with one set of Kafka ids are committed by
// EndTxn on those ids), and every request is consistent on both sides with a true answer.
func TestSharedBatchKilled(t *testing.T) {
	t.Parallel()
	for _, point := range txntype.SharedFaultPoints {
		t.Run(string(point), func(t *testing.T) {
			t.Parallel()
			e := newStore(t, envOpts{})
			n := e.startNode(t, "a", "COORDINATOR_FAULT="+string(point), "KAFKA_POOL_SIZE=4", "KAFKA_SHARED_CONCURRENCY=1")
			kinds := make([]string, 24)
			for i := range kinds {
				kinds[i] = "order"
				switch i % 6 {
				case 5:
					kinds[i] = "fail"
				case 2:
					kinds[i] = "derived" // P2: prepared alone, then riding in the batch
				case 4:
					kinds[i] = "decided" // D1: answered at the batch's decision
				}
			}
			reqs := n.postAll("s", kinds)
			n.waitExit(30 * time.Second) // the fault point killed it
			// Counted before recovery: what the kill left.
			shared := e.sharedRows(t)
			sharedSQL := 0
			for _, g := range e.preparedLeft() {
				if txntype.IsSharedGID(e.prefix, g) {
					sharedSQL++
				}
			}
			n2 := e.startNode(t, "a", "COORDINATOR_LOG_LEVEL=info")
			e.waitResolved(t, 60*time.Second)
			c, a := e.verify(t, n2.base, reqs)
			t.Logf("%s: %d committed, %d aborted; %d rows logged with Kafka ids shared with another, %d shared SQL transactions left prepared",
				point, c, a, shared, sharedSQL)
			switch point {
			case txntype.FaultSharedAfterSQLPrepare, txntype.FaultSharedAfterKafkaFlush:
				// Before its prepared write a batch logs no ids; its shared SQL transaction is
				// prepared, named by no row: the startup pass tombstones it and rolls it back.
				assert.Positive(t, sharedSQL, "the kill did not land in a shared SQL transaction")
			default:
				assert.Positive(t, shared, "the kill did not land in a shared Kafka transaction")
			}
		})
	}
}
