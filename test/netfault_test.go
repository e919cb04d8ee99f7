package test

// Network faults between the coordinator and PostgreSQL: a TCP proxy (netproxy_test.go) in front
// of the log's database and another in front of the participant database, faulted separately
// and together, under concurrent load with same-id retries and requests that must abort.
//
// The log is in DATABASE_URL's database, which is also the "default" participant; the load's
// requests write to the "other" database (DATABASE_URL_2), so the "log" proxy carries the log
// (and the instance lock) and the "participant" proxy the participant's work. One kind writes to
// both databases without Kafka (the durable "committing" decision).
//
// Reproduce one class (with the services of scripts/services.sh):
//
//	go test ./test -run 'TestNetFaultPostgres/partition' -count=1 -v

import (
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// netBudget is the coordinator's request budget in these tests; a partition lasts longer.
const (
	netBudget    = 3 * time.Second
	netPartition = netBudget + 4*time.Second
)

// pgNetKinds is the PostgreSQL tests' mix: mostly two-phase requests on the participant
// database with a record, one-phase ones, a two-database one, Kafka only, and failing ones.
var pgNetKinds = []netKind{
	{name: "order", dbs: []string{"other"}, records: 1},
	{name: "sql-only", dbs: []string{"other"}},
	{name: "order", dbs: []string{"other"}, records: 1},
	{name: "fail", dbs: []string{"other"}, records: 1, fails: true},
	{name: "two-db", dbs: []string{"default", "other"}},
	{name: "order", dbs: []string{"other"}, records: 1},
	{name: "kafka-only", records: 1},
	{name: "sql-only-fail", dbs: []string{"other"}, fails: true},
	{name: "spread", dbs: []string{"other"}, records: 3},
	{name: "sql-only", dbs: []string{"other"}},
}

func TestNetFaultPostgres(t *testing.T) {
	if useKfake() {
		t.Skip("the faults are on PostgreSQL's side; this test runs once, in the real-Kafka pass of scripts/test.sh")
	}
	t.Parallel()
	for _, class := range []string{"latency", "cuts", "partition"} {
		t.Run(class, func(t *testing.T) {
			t.Parallel()
			testNetFaultPostgres(t, class)
		})
	}
}

func testNetFaultPostgres(t *testing.T, class string) {
	began := time.Now()
	e := newStore(t, envOpts{secondDB: true})
	e.createNetTables(t)
	logp := newNetProxy(t, "log", dsnHostPort(t, needEnv(t, "DATABASE_URL")))
	partp := newNetProxy(t, "participant", dsnHostPort(t, needEnv(t, "DATABASE_URL_2")))
	e.cfg.DatabaseURL = proxiedDSN(t, e.cfg.DatabaseURL, logp)
	e.cfg.Databases["other"] = proxiedDSN(t, e.cfg.Databases["other"], partp)
	// S8 on (off by default): the log's connection cut under deferred rows and late Begins.
	n := e.startNode(t, "a", "COORDINATOR_DEFAULT_TIMEOUT="+netBudget.String(), "COORDINATOR_DEFER_ROWS=true")

	l := startFaultLoad(e, n, pgNetKinds)
	time.Sleep(1500 * time.Millisecond)
	// Every connection to PostgreSQL goes through a proxy (checked again after the faults).
	routed := func() {
		requireRoutedThrough(t, n.p.cmd.Process.Pid, []*netProxy{logp, partp},
			[]int{portOf(t, dsnHostPort(t, needEnv(t, "DATABASE_URL"))), portOf(t, dsnHostPort(t, needEnv(t, "DATABASE_URL_2")))})
	}
	routed()

	scopes := [][]*netProxy{{logp}, {partp}, {logp, partp}}
	for _, scope := range scopes {
		switch class {
		case "latency":
			injectLatency(l, scope, 6*time.Second)
		case "cuts":
			injectCuts(l, scope, 8*time.Second)
		case "partition":
			for _, variant := range partitionVariants {
				injectPartition(l, scope, variant, netPartition)
				time.Sleep(2 * time.Second)
			}
		}
		time.Sleep(1500 * time.Millisecond)
	}
	tally := l.conclude(t, routed)
	t.Logf("PostgreSQL %s: %s; test took %s", class, tally, time.Since(began).Round(time.Second))
}

// injectLatency adds 50-200 ms (125 ± 75) to every chunk in both directions on the scope's
// proxies for d.
func injectLatency(l *faultLoad, scope []*netProxy, d time.Duration) {
	w := &faultWindow{class: "latency", variant: "125±75ms", proxies: scope}
	var names [][]string
	for _, np := range scope {
		names = append(names, np.both("latency", 1, `{"latency":125,"jitter":75}`))
		w.faults++
	}
	w.start = time.Now()
	time.Sleep(d)
	w.end = time.Now()
	for i, np := range scope {
		np.remove(names[i]...)
	}
	l.window(w)
}

// injectCuts cuts connections mid-request on the scope's proxies for d: every 200-600 ms one of
//   - the next answer on half the connections dropped and the connection reset (reset_peer
//     downstream for 200 ms: the request ran, its answer is lost);
//   - the same for requests (reset_peer upstream: the request never arrives);
//   - half the connections stalled for 0.3-1 s and then closed (timeout: a request or its
//     answer lost after a silence);
//   - every connection cut at once (the proxy disabled and enabled again).
func injectCuts(l *faultLoad, scope []*netProxy, d time.Duration) {
	w := &faultWindow{class: "cuts", variant: "reset_peer+timeout+disable", proxies: scope, start: time.Now()}
	for time.Since(w.start) < d {
		time.Sleep(time.Duration(200+rand.IntN(400)) * time.Millisecond)
		np := scope[rand.IntN(len(scope))]
		switch rand.IntN(4) {
		case 0, 1:
			stream := []string{"downstream", "upstream"}[rand.IntN(2)]
			name := np.toxic("reset_peer", stream, 0.5, `{"timeout":0}`)
			time.Sleep(200 * time.Millisecond)
			np.remove(name)
		case 2:
			names := np.both("timeout", 0.5, `{"timeout":0}`)
			time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
			np.remove(names...) // closes the stalled connections
		case 3:
			np.disable()
			np.enable()
		}
		w.faults++
	}
	w.end = time.Now()
	l.window(w)
}

// partitionVariants are the ways a partition longer than the budget looks to the coordinator:
// refused (the proxy disabled: connections reset, new ones refused), dropped (every byte dropped,
// new connections accepted and silent, then every connection closed at the heal, as TCP gives up
// on them), held (every byte held and delivered at the heal, as TCP retransmits across a
// partition it survives), answers-lost (one way: requests arrive and run, their answers are
// dropped, and the connections are closed at the heal).
var partitionVariants = []string{"refused", "dropped", "held", "answers-lost"}

// injectPartition partitions the scope's proxies for d.
func injectPartition(l *faultLoad, scope []*netProxy, variant string, d time.Duration) {
	w := &faultWindow{class: "partition", variant: variant, proxies: scope}
	var names [][]string
	for _, np := range scope {
		switch variant {
		case "refused":
			np.disable()
		case "dropped":
			names = append(names, np.both("timeout", 1, `{"timeout":0}`))
		case "held":
			names = append(names, np.both("latency", 1, `{"latency":600000,"jitter":0}`))
		case "answers-lost":
			names = append(names, []string{np.toxic("timeout", "downstream", 1, `{"timeout":0}`)})
		}
		w.faults++
	}
	w.start = time.Now()
	time.Sleep(d)
	w.end = time.Now()
	for i, np := range scope {
		if variant == "refused" {
			np.enable()
		} else {
			np.remove(names[i]...)
		}
	}
	l.window(w)
}

// portOf is the port of host:port.
func portOf(t testing.TB, hostPort string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(hostPort)
	require.NoError(t, err)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	return n
}

// TestNetFaultAnswerLost loses, deterministically, the participant database's answers to a
// request's last round trip (one phase: the pipelined BEGIN ... COMMIT; two phases: ... PREPARE
// TRANSACTION): while the server sleeps in a statement of that round trip, every answer from it
// starts being dropped; the server then runs the rest (COMMIT or PREPARE), the budget is spent,
// and the connections are closed. The request's answers, a same-id retry, GET and the databases
// must then agree, with nothing left prepared once recovery has run.
func TestNetFaultAnswerLost(t *testing.T) {
	if useKfake() {
		t.Skip("the faults are on PostgreSQL's side; this test runs once, in the real-Kafka pass of scripts/test.sh")
	}
	t.Parallel()
	for _, tc := range []struct {
		kind netKind
	}{
		{kind: netKind{name: "one-phase", dbs: []string{"other"}, pause: true}},
		{kind: netKind{name: "two-databases", dbs: []string{"default", "other"}, pause: true}},
		{kind: netKind{name: "with-kafka", dbs: []string{"other"}, records: 1, pause: true}},
	} {
		t.Run(tc.kind.name, func(t *testing.T) {
			t.Parallel()
			e := newStore(t, envOpts{secondDB: true})
			e.createNetTables(t)
			partp := newNetProxy(t, "participant", dsnHostPort(t, needEnv(t, "DATABASE_URL_2")))
			e.cfg.Databases["other"] = proxiedDSN(t, e.cfg.Databases["other"], partp)
			n := e.startNode(t, "a", "COORDINATOR_DEFAULT_TIMEOUT="+netBudget.String())
			l := &faultLoad{e: e, n: n, kinds: map[string]netKind{"warm": tc.kind, "lost": tc.kind}, ans: map[string][]int{}}
			client := &http.Client{Timeout: time.Minute}
			send := func(id string) int {
				start := time.Now()
				st := postStatus(client, n.base, e.netBody(id, tc.kind))
				l.record(netSend{id: id, status: st, start: start, end: time.Now()})
				return st
			}
			require.Equal(t, http.StatusOK, send("warm"), "a request commits before the fault")

			done := make(chan int, 1)
			go func() { done <- send("lost") }()
			time.Sleep(400 * time.Millisecond) // the batch is on the server, in pg_sleep
			answersLost := partp.toxic("timeout", "downstream", 1, `{"timeout":0}`)
			time.Sleep(netBudget + time.Second)
			partp.remove(answersLost) // closes every connection that lost answers
			st := <-done
			t.Logf("the request whose last answers were lost was answered %d; a retry with the same id: %d", st, send("lost"))
			require.Equal(t, 2, l.verify(t).txns)
		})
	}
}
