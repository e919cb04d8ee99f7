package test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkThroughput compares, in one run on the same services, one SQL insert and one
// 100-byte record per request done three ways:
//
//   - coordinator: through the coordinator binary (its own process) and its REST API;
//   - unshared: the same with KAFKA_SHARED_MAX=1 (every request its own Kafka transaction), a
//     second instance on the same log: the baseline of shared Kafka transactions;
//   - inline-2pc: the same two-phase commit written inline in this process (BEGIN, insert,
//     marker, PREPARE ∥ transactional produce; EndTxn(commit); COMMIT PREPARED), without a
//     log and without HTTP;
//   - inline-2pc-logged: inline-2pc with the one log write no variant of this protocol can skip
//     (I2: the Kafka ids durable before EndTxn(commit)), one autocommit insert between the
//     prepares and EndTxn: the floor of the coordinator's latency at c=1;
//   - inline-2pc-begun: inline-2pc-logged with the coordinator's two other log writes: its row
//     made durable before the work (one autocommit insert first), which the coordinator keeps so
//     that a 202 is settled (docs/decisions.md, "The active row stays durable"), and its final
//     write behind the answer (I1);
//   - inline-2pc-gidlog: the same, with the PREPARE itself as that write: the statements ∥ the
//     records, then PREPARE TRANSACTION of a gid that names the transactional id, producer id
//     and epoch, then EndTxn(commit) and COMMIT PREPARED. What a one-database request would
//     cost if its participant's PREPARE were its prepared record (docs/decisions.md, "not
//     built"); measured here, not built;
//   - inline-kept and inline-kept-100x: every statement and log write the coordinator's
//     guarantees keep (the row before the work, the guards of I13 and the marker in the SQL
//     round trip, the prepared write with the results and offsets, the final write), made by
//     the coordinator's own packages (txlog, sqltxn) inline, on a log of their own: the floor
//     of a coordinator that keeps them, without HTTP, the body or the request engine
//     (kept_bench_test.go);
//   - inline-shared: inline-2pc with every request in flight gathered into one PostgreSQL
//     transaction (a savepoint each, one PREPARE) and one Kafka transaction: what sharing the SQL
//     side too would cost at best (sharedinline_bench_test.go);
//   - inline-shared-logged: inline-shared with the log writes the coordinator's guarantees need,
//     each one statement for a whole group: the requests' rows before their work, the prepared
//     write (I2) and the final write behind the answer; the floor of the coordinator's shared
//     path (sharedlogged_bench_test.go);
//   - inline-shared-overlap: the same with the rows logged beside the work and each PREPARE
//     waiting for them, the shape of the retired I14;
//   - dual-write: by hand, not atomic: a plain SQL commit ∥ one Kafka transaction;
//   - prepare-commit: the coordinator's request prepared for its caller's decision, then
//     committed by a second call (X1, X2): what deciding later costs against one request (at
//     concurrencies up to maxWaitingBench, the waiting bound it runs with);
//   - coordinator-100x and by-hand-100x: a request of 100 inserts and 100 records (what a
//     pipeline batch sends) through the coordinator, and the same by hand in one PostgreSQL
//     transaction (one batch) ∥ one Kafka transaction: the per-statement and per-record costs
//     apart from the per-request ones (scripts/bench.sh puts both against by-hand-100x);
//   - inline-2pc-logged-100x: inline-2pc-logged with those 100 inserts and 100 records: the
//     floor of the "-100x" rows (their "x floor");
//   - baseline (only with BENCH_BASELINE_BINARY, which scripts/bench.sh sets from
//     BENCH_BASELINE=<git revision>): another build of the coordinator, configured like the
//     first, a third instance on the same log: a change measured against the code before it,
//     in the same run.
//
// at concurrency 1, 16 and 64. Besides p50/p99 latency and throughput it reports the CPU
// time per committed transaction of each process, read from /proc: the coordinator (for the
// two baselines, this process, which does their work), PostgreSQL (the postmaster and every
// backend) and the Kafka broker. scripts/bench.sh turns the lines into one table with the
// ratios to the dual write.
//
//	bash scripts/bench.sh
func BenchmarkThroughput(b *testing.B) {
	printPhaseReports(b)
	cpu := servicePIDs(b)
	e := newStore(b, envOpts{poolSize: 64})
	_, err := e.db.Exec(context.Background(), "CREATE TABLE bench_markers (gid text PRIMARY KEY)")
	require.NoError(b, err)
	_, err = e.db.Exec(context.Background(), "CREATE TABLE bench_log (gid text PRIMARY KEY, kafka text NOT NULL)")
	require.NoError(b, err)
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	settings := []string{"KAFKA_POOL_SIZE=64", "COORDINATOR_DB_MAX_CONNS=96", fmt.Sprintf("COORDINATOR_MAX_WAITING=%d", maxWaitingBench),
		"COORDINATOR_RECOVERY_INTERVAL=2s", "COORDINATOR_INSTANCE_LEASE=10s", "COORDINATOR_MAX_IN_FLIGHT=4096"}
	// BENCH_COORDINATOR_ENV adds settings (space-separated NAME=value) to compare tunings.
	extra := strings.Fields(os.Getenv("BENCH_COORDINATOR_ENV"))
	// Two instances on one log: the coordinator as configured, and the same without shared Kafka
	// transactions (the baseline of that lever, in the same run). Only one runs load at a time.
	base, coordPID := startBenchCoordinator(b, e, "bench", append(append(settings, "COORDINATOR_PPROF_LISTEN="+pprofAddr), extra...))
	unsharedBase, unsharedPID := startBenchCoordinator(b, e, "bench-unshared", append(append(settings, extra...), "KAFKA_SHARED_MAX=1"))
	baselineBinary := os.Getenv("BENCH_BASELINE_BINARY")
	baselineBase, baselinePID, baselineTopic := "", 0, ""
	if baselineBinary != "" {
		// On a log of its own: an older revision may not know this revision's migrations.
		eb := newStore(b, envOpts{poolSize: 64})
		baselineTopic = eb.topic
		// BENCH_BASELINE_ENV adds settings to the baseline's alone: a tuning against the same
		// build in one run (BENCH_BASELINE=HEAD BENCH_BASELINE_ENV="NAME=value").
		baselineExtra := append(append(settings, extra...), strings.Fields(os.Getenv("BENCH_BASELINE_ENV"))...)
		baselineBase, baselinePID = startBenchBinary(b, baselineBinary, eb, "bench-baseline", baselineExtra)
	}

	producers := make(chan *kgo.Client, 64)
	for i := range cap(producers) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...),
			kgo.TransactionalID(fmt.Sprintf("%s-hand-%d", e.prefix, i)),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
		require.NoError(b, err)
		_, _, err = cl.ProducerID(context.Background())
		require.NoError(b, err)
		b.Cleanup(cl.Close)
		producers <- cl
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	value := strings.Repeat("v", 100)
	// BENCH_VALUE sends the coordinator's records as typed values of 100 bytes: "binary" (base64
	// of 100 bytes) or "json" (an object), to compare with the plain string in the same run (the
	// baseline build, which may predate typed values, always gets the plain string).
	typed := benchValue(b, os.Getenv("BENCH_VALUE"))
	via := func(base, topic string, answer string) func(int, string) error {
		v := typed
		if base == baselineBase {
			v = value
		}
		return func(_ int, id string) error {
			req := map[string]any{"id": id,
				"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, $2)", "args": []any{id, 1}}},
				"kafka": []any{map[string]any{"topic": topic, "key": id, "value": v}}}
			if answer != "" {
				req["answer"] = answer
			}
			return postTransaction(client, base, req)
		}
	}
	viaCoordinator, viaUnshared, viaBaseline := via(base, e.topic, ""), via(unsharedBase, e.topic, ""), via(baselineBase, baselineTopic, "")
	// A request of many statements and records, as a pipeline batch sends (the rows "-100x"):
	// manyPerRequest inserts and as many records, through the coordinator and by hand.
	viaMany := func(_ int, id string) error {
		sqls, recs := make([]any, manyPerRequest), make([]any, manyPerRequest)
		for i := range manyPerRequest {
			key := manyKey(id, i, manyPerRequest)
			sqls[i] = map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, $2)", "args": []any{key, 1}}
			recs[i] = map[string]any{"topic": e.topic, "key": key, "value": value}
		}
		return postTransaction(client, base, map[string]any{"id": id, "sql": sqls, "kafka": recs})
	}
	// The same coordinator, its requests answered at the decision (D1): phase 2 behind the answer.
	viaDecided := via(base, e.topic, "decided")
	// The same request prepared for its caller's decision, then committed: two calls (X1, X2).
	viaPrepareCommit := func(_ int, id string) error {
		return prepareCommit(client, base, map[string]any{"id": id, "decision": "external",
			"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, $2)", "args": []any{id, 1}}},
			"kafka": []any{map[string]any{"topic": e.topic, "key": id, "value": typed}}})
	}
	withProducer := func(f func(cl *kgo.Client, id string) error) func(int, string) error {
		return func(_ int, id string) error {
			cl := <-producers
			defer func() { producers <- cl }()
			return f(cl, id)
		}
	}
	inline := withProducer(func(cl *kgo.Client, id string) error { return inline2PC(e.db, cl, e.topic, id, value) })
	logged := withProducer(func(cl *kgo.Client, id string) error { return inline2PCLogged(e.db, cl, e.topic, id, value) })
	begun := withProducer(func(cl *kgo.Client, id string) error { return inline2PCBegun(e.db, cl, e.topic, id, value) })
	loggedMany := withProducer(func(cl *kgo.Client, id string) error { return inline2PCLoggedMany(e.db, cl, e.topic, id, value) })
	gidLog := withProducer(func(cl *kgo.Client, id string) error { return inline2PCGIDLog(e.db, cl, e.topic, id, value) })
	dual := withProducer(func(cl *kgo.Client, id string) error { return dualWrite(e.db, cl, e.topic, id, value) })
	dualMany := withProducer(func(cl *kgo.Client, id string) error { return dualWriteMany(e.db, cl, e.topic, id, value) })
	k := newKept(b, value)
	kept := withProducer(func(cl *kgo.Client, id string) error { return k.do(cl, id, 1) })
	keptMany := withProducer(func(cl *kgo.Client, id string) error { return k.do(cl, id, manyPerRequest) })

	// Warm up every path (JIT, pools, connections), untimed.
	shared := newSharedInline(b, e.db, producers, e.topic, value, 1).do
	sharedLogged := newSharedLogged(b, e.db, producers, e.topic, value, false).do
	sharedOverlap := newSharedLogged(b, e.db, producers, e.topic, value, true).do
	ops := []func(int, string) error{viaCoordinator, viaDecided, viaPrepareCommit, viaUnshared, inline, logged, begun, gidLog, dual, shared, sharedLogged, sharedOverlap, viaMany, loggedMany, dualMany, kept, keptMany}
	if baselineBinary != "" {
		ops = append(ops, viaBaseline)
	}
	for i := range 300 {
		id := fmt.Sprintf("warm-%d", i)
		for _, op := range ops {
			require.NoError(b, op(0, id+"-"+randHex(6)))
		}
	}
	type variant struct {
		name string
		pid  int
		op   func(int, string) error
		url  string // a coordinator's base URL: its metrics tell how requests shared
	}
	variants := []variant{
		{"coordinator", coordPID, viaCoordinator, base},
		{"coordinator-decided", coordPID, viaDecided, base},
		{"prepare-commit", coordPID, viaPrepareCommit, base},
		{"unshared", unsharedPID, viaUnshared, unsharedBase},
		{"inline-2pc", os.Getpid(), inline, ""},
		{"inline-2pc-logged", os.Getpid(), logged, ""},
		{"inline-2pc-begun", os.Getpid(), begun, ""},
		{"inline-kept", os.Getpid(), kept, ""},
		{"inline-2pc-gidlog", os.Getpid(), gidLog, ""},
		{"inline-shared", os.Getpid(), shared, ""},
		{"inline-shared-logged", os.Getpid(), sharedLogged, ""},
		{"inline-shared-overlap", os.Getpid(), sharedOverlap, ""},
		{"dual-write", os.Getpid(), dual, ""},
		{"coordinator-100x", coordPID, viaMany, base},
		{"inline-2pc-logged-100x", os.Getpid(), loggedMany, ""},
		{"inline-kept-100x", os.Getpid(), keptMany, ""},
		{"by-hand-100x", os.Getpid(), dualMany, ""},
	}
	if baselineBinary != "" {
		variants = append(variants, variant{"baseline", baselinePID, viaBaseline, baselineBase})
	}
	// BENCH_ORDER=reverse runs the variants of each concurrency in the reverse order
	// (scripts/bench.sh reverses every second round): on this machine the position in a round
	// alone moved a variant's figures by 10 to 20 %, so an A/B comparison must see both orders.
	if os.Getenv("BENCH_ORDER") == "reverse" {
		slices.Reverse(variants)
	}
	// BENCH_PPROF_C chooses the concurrency whose run is profiled (64 unless set), and
	// BENCH_PPROF_VARIANT the coordinator's row (coordinator unless set). The profile starts once,
	// with the row's first run of more than one iteration (-benchtime runs a row several times,
	// growing b.N until a run lasts long enough), and goes on over the runs that follow, unwaited:
	// a run that waited for it held the row idle for the rest of the profile, and another row of
	// the same process profiled after it replaced its file.
	profiledC, profiledVariant := 64, cmp.Or(os.Getenv("BENCH_PPROF_VARIANT"), "coordinator")
	var profiled <-chan struct{}
	parent := b // the profile outlives the run that starts it: its errors are the benchmark's
	defer func() {
		if profiled != nil {
			<-profiled
		}
	}()
	if s := os.Getenv("BENCH_PPROF_C"); s != "" && !strings.HasSuffix(s, "m") { // "1m": BenchmarkPipeline's
		profiledC, err = strconv.Atoi(s)
		require.NoError(b, err, "BENCH_PPROF_C")
	}
	for _, c := range benchConcurrencies(b) {
		for _, v := range variants {
			b.Run(fmt.Sprintf("%s/c=%d", v.name, c), func(b *testing.B) {
				if v.name == "prepare-commit" && c > maxWaitingBench {
					b.Skipf("at most COORDINATOR_MAX_WAITING=%d transactions wait for their caller", maxWaitingBench)
				}
				if v.name == profiledVariant && v.pid == coordPID && c == profiledC && b.N > 1 && profiled == nil {
					profiled = profileCoordinator(parent, pprofAddr)
				}
				var shared0 series
				if v.url != "" {
					shared0 = scrapeURL(b, v.url+"/metrics")
				}
				before, host0 := cpu.sample(b, v.pid), readHostCPU(b)
				run(b, c, v.op)
				after, host1 := cpu.sample(b, v.pid), readHostCPU(b)
				if shared0 != nil {
					// How many requests rode in shared Kafka transactions, and how many shared each.
					shared1 := scrapeURL(b, v.url+"/metrics")
					sum := shared1["kpgtx_kafka_shared_transaction_members_sum"] - shared0["kpgtx_kafka_shared_transaction_members_sum"]
					count := shared1["kpgtx_kafka_shared_transaction_members_count"] - shared0["kpgtx_kafka_shared_transaction_members_count"]
					b.ReportMetric(100*sum/float64(b.N), "shared-%")
					if count > 0 {
						b.ReportMetric(sum/count, "members/shared-txn")
					}
					sqlSum := shared1["kpgtx_sql_shared_transaction_members_sum"] - shared0["kpgtx_sql_shared_transaction_members_sum"]
					b.ReportMetric(100*sqlSum/float64(b.N), "sql-shared-%")
					if os.Getenv("BENCH_PHASES") != "" {
						logPhases(b, shared0, shared1)
					}
				}

				n := float64(b.N)
				if v.url != "" {
					// The coordinator's resident memory right after the run: with the one at c=1,
					// what each request in flight holds (scripts/bench.sh's "coord MB").
					b.ReportMetric(rssMB(b, v.pid), "rss-MB")
				}
				b.ReportMetric(after.self.Sub(before.self)/n, "cpu-coord-ms/txn")
				b.ReportMetric(after.postgres.Sub(before.postgres)/n, "cpu-pg-ms/txn")
				b.ReportMetric(after.kafka.Sub(before.kafka)/n, "cpu-kafka-ms/txn")
				// The machine's idle and stolen shares over the run: a run with little idle time
				// was bound by CPU, and one with stolen time shared the cores with other tenants,
				// whose load moves a figure without any change of code.
				idle, steal := host1.since(host0)
				b.ReportMetric(idle, "host-idle-%")
				b.ReportMetric(steal, "host-steal-%")
			})
		}
	}
}

// startBenchCoordinator starts one coordinator process for the benchmark and returns its base
// URL and pid.
func startBenchCoordinator(b *testing.B, e *env, instance string, settings []string) (string, int) {
	b.Helper()
	return startBenchBinary(b, coordinatorBinary(b), e, instance, settings)
}

// startBenchBinary is startBenchCoordinator with a given coordinator binary.
func startBenchBinary(b *testing.B, binary string, e *env, instance string, settings []string) (string, int) {
	b.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	p := startBinary(b, binary, e.binaryEnv(instance, listen, settings...), "serve")
	waitHealthy(b, p, "http://"+listen, 60*time.Second)
	return "http://" + listen, p.cmd.Process.Pid
}

// profileCoordinator saves a CPU profile of the coordinator process, taken over the first
// BENCH_PPROF_SECONDS seconds of the run, as $BENCH_PPROF_FILE (scripts/bench.sh prints its top
// entries). Nothing without BENCH_PPROF_SECONDS; the channel closes when the profile is saved.
func profileCoordinator(b *testing.B, addr string) <-chan struct{} {
	b.Helper()
	done := make(chan struct{})
	secs, file := os.Getenv("BENCH_PPROF_SECONDS"), os.Getenv("BENCH_PPROF_FILE")
	if secs == "" || file == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=" + secs)
		if err != nil {
			b.Errorf("profile: %v", err)
			return
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode == http.StatusOK {
			err = os.WriteFile(file, raw, 0o644)
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Errorf("profile: status %d, %v", resp.StatusCode, err)
		}
	}()
	return done
}

// inline2PC is the coordinator's protocol without the log and without HTTP.
func inline2PC(db *pgxpool.Pool, cl *kgo.Client, topic, id, value string) error {
	return inline2PCWith(db, cl, topic, id, value, 1, nil)
}

// dualWrite is the by-hand baseline: the same insert and record, committed separately and
// concurrently, not atomic.
func dualWrite(db *pgxpool.Pool, cl *kgo.Client, topic, id, value string) error {
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		_, err := db.Exec(ctx, "INSERT INTO orders (id, total) VALUES ($1, $2)", id, 1)
		errc <- err
	}()
	if _, err := produce(ctx, cl, topic, id, value, 1, false); err != nil {
		return err
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return err
	}
	return <-errc
}

// postTransaction sends one request to a coordinator's POST /v1/transactions; anything but 200
// is an error.
func postTransaction(client *http.Client, base string, req map[string]any) error {
	_, err := postOK(client, base+"/v1/transactions", req)
	return err
}

// postOK posts v as JSON to url and returns the answer's body; anything but 200 is an error.
func postOK(client *http.Client, url string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d: %s", url, resp.StatusCode, raw)
	}
	return raw, nil
}

// maxWaitingBench bounds the prepare-commit row's transactions waiting at once: it runs at the
// concurrencies up to it.
const maxWaitingBench = 32

// prepareCommit sends req prepared for its caller's decision ("decision": "external") and then
// its commit with the prepared_state answered: the two calls of the prepare-commit row.
func prepareCommit(client *http.Client, base string, req map[string]any) error {
	raw, err := postOK(client, base+"/v1/transactions", req)
	if err != nil {
		return err
	}
	var p struct {
		ID            string `json:"id"`
		PreparedState string `json:"prepared_state"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	_, err = postOK(client, base+"/v1/transactions/"+p.ID+"/commit", map[string]string{"prepared_state": p.PreparedState})
	return err
}

// manyPerRequest is the number of inserts and of records of one request in the "-100x" rows.
const manyPerRequest = 100

// dualWriteMany is the "-100x" rows' work by hand, without atomicity: one PostgreSQL transaction
// of manyPerRequest inserts (one batch) alongside one Kafka transaction of as many records.
func dualWriteMany(db *pgxpool.Pool, cl *kgo.Client, topic, id, value string) error {
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		b := &pgx.Batch{}
		for i := range manyPerRequest {
			b.Queue("INSERT INTO orders (id, total) VALUES ($1, $2)", manyKey(id, i, manyPerRequest), 1)
		}
		errc <- pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
	}()
	if _, err := produce(ctx, cl, topic, id, value, manyPerRequest, false); err != nil {
		return err
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return err
	}
	return <-errc
}

// cpuTime is CPU time in milliseconds.
type cpuTime float64

func (c cpuTime) Sub(o cpuTime) float64 { return float64(c - o) }

// cpuPIDs locates the processes whose CPU the throughput benchmark reads.
type cpuPIDs struct {
	postmaster int
	kafka      int
}

type cpuSample struct{ self, postgres, kafka cpuTime }

// servicePIDs reads the PostgreSQL postmaster's and the Kafka broker's pids from the files
// scripts/services.sh keeps (SERVICES_DIR, default /var/tmp/kpgtx-services).
func servicePIDs(b *testing.B) cpuPIDs {
	b.Helper()
	needEnv(b, "KAFKA_BROKERS")
	if useKfake() {
		b.Skip("BenchmarkThroughput measures the real broker's CPU: run it through scripts/bench.sh")
	}
	dir := os.Getenv("SERVICES_DIR")
	if dir == "" {
		dir = "/var/tmp/kpgtx-services"
	}
	first := func(path string) int {
		raw, err := os.ReadFile(path)
		require.NoError(b, err, "the services' pid files (scripts/services.sh start)")
		pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
		require.NoError(b, err, path)
		return pid
	}
	return cpuPIDs{
		postmaster: first(filepath.Join(dir, "pg", "data", "postmaster.pid")),
		kafka:      first(filepath.Join(dir, "kafka", "kafka.pid")),
	}
}

func (p cpuPIDs) sample(b *testing.B, self int) cpuSample {
	b.Helper()
	s := cpuSample{self: procCPU(b, self, false), kafka: procCPU(b, p.kafka, false)}
	// PostgreSQL: the postmaster with its exited children, and every live backend.
	s.postgres = procCPU(b, p.postmaster, true)
	entries, err := os.ReadDir("/proc")
	require.NoError(b, err)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == p.postmaster {
			continue
		}
		if ppid, ok := parentPID(pid); ok && ppid == p.postmaster {
			s.postgres += procCPU(b, pid, false)
		}
	}
	return s
}

// hostCPU is the machine's CPU time from /proc/stat's first line, in clock ticks: all of it,
// idle (idle and iowait) and stolen by the hypervisor.
type hostCPU struct{ total, idle, steal float64 }

func readHostCPU(b *testing.B) hostCPU {
	b.Helper()
	raw, err := os.ReadFile("/proc/stat")
	require.NoError(b, err)
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	require.GreaterOrEqual(b, len(f), 9, "/proc/stat: %q", line)
	var h hostCPU
	for i, v := range f[1:9] { // the guest times after steal are counted in user already
		x, err := strconv.ParseFloat(v, 64)
		require.NoError(b, err, "/proc/stat: %q", line)
		h.total += x
		switch i {
		case 3, 4:
			h.idle += x
		case 7:
			h.steal += x
		}
	}
	return h
}

// since is the idle and stolen shares of the machine's time between o and h, in percent.
func (h hostCPU) since(o hostCPU) (idle, steal float64) {
	t := h.total - o.total
	if t <= 0 {
		return 0, 0
	}
	return 100 * (h.idle - o.idle) / t, 100 * (h.steal - o.steal) / t
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux).
const clockTicks = 100

// procStat returns the fields of /proc/<pid>/stat after the command name.
func procStat(pid int) ([]string, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(s[i+1:]), true
}

func parentPID(pid int) (int, bool) {
	f, ok := procStat(pid)
	if !ok || len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// procCPU is a process's user+system time (and its waited-for children's, with children).
func procCPU(b *testing.B, pid int, children bool) cpuTime {
	f, ok := procStat(pid)
	if !ok {
		return 0 // a backend that exited between the listing and the read
	}
	// Fields after the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
	sum := 0
	last := 12
	if children {
		last = 14
	}
	for i := 11; i <= last; i++ {
		v, err := strconv.Atoi(f[i])
		require.NoError(b, err)
		sum += v
	}
	return cpuTime(float64(sum) * 1000 / clockTicks)
}

// phaseReports are logPhases' reports, printed when the benchmark ends (printPhaseReports).
var phaseReports []string

// printPhaseReports prints logPhases' reports when the benchmark ends.
func printPhaseReports(b *testing.B) {
	b.Cleanup(func() {
		for _, r := range phaseReports {
			fmt.Println(r)
		}
		phaseReports = nil
	})
}

// logPhases logs, for each phase the coordinator measured during the run, how many times it ran
// and its mean duration (BENCH_PHASES=1 bash scripts/bench.sh): where a request's time goes. A
// batch's steps (sql, kafka, log_prepared, endtxn) are measured once per batch.
func logPhases(b *testing.B, before, after series) {
	b.Helper()
	var lines []string
	for k, sum := range after {
		name, ok := strings.CutPrefix(k, `kpgtx_phase_duration_seconds_sum{phase="`)
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, `"}`)
		count := after[`kpgtx_phase_duration_seconds_count{phase="`+name+`"}`] - before[`kpgtx_phase_duration_seconds_count{phase="`+name+`"}`]
		if count == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("%-14s %7.0f x %7.3f ms", name, count, 1000*(sum-before[k])/count))
	}
	sort.Strings(lines)
	if b.N > 1 { // the measured run, not go test's probe of one iteration
		// Printed once every benchmark has printed its line: go test shows the test binary's
		// output in one stream, and a line in the middle of a result would break scripts/bench.sh.
		name := b.Name()
		phaseReports = append(phaseReports, fmt.Sprintf("%s: phases over %d requests:\n%s", name, b.N, strings.Join(lines, "\n")))
	}
}

// benchValue is a 100-byte record value in the form BENCH_VALUE names ("" or "text": a plain
// string).
func benchValue(b *testing.B, form string) any {
	b.Helper()
	switch form {
	case "", "text":
		return strings.Repeat("v", 100)
	case "binary":
		raw := make([]byte, 100)
		for i := range raw {
			raw[i] = byte(i * 7) // 0x00 first, as a Confluent-framed value starts
		}
		return map[string]any{"type": "binary", "data": base64.StdEncoding.EncodeToString(raw)}
	case "json":
		return map[string]any{"type": "json", "data": map[string]any{"order": "o-1", "total": 10, "note": strings.Repeat("n", 64)}}
	}
	b.Fatalf("BENCH_VALUE=%q: text, binary or json", form)
	return nil
}

// benchConcurrencies are the concurrencies of BenchmarkThroughput: BENCH_C (comma-separated) or
// 1, 16, 64 and 256.
func benchConcurrencies(b *testing.B) []int {
	b.Helper()
	spec := os.Getenv("BENCH_C")
	if spec == "" {
		return []int{1, 16, 64, 256}
	}
	var cs []int
	for _, f := range strings.Split(spec, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoError(b, err, "BENCH_C=%q", spec)
		require.Positive(b, c, "BENCH_C=%q", spec)
		cs = append(cs, c)
	}
	return cs
}

// rssMB is a process's resident memory (VmRSS of /proc/<pid>/status) in MB.
func rssMB(b *testing.B, pid int) float64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(b, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			require.NoError(b, err, "VmRSS %q", rest)
			return kb / 1024
		}
	}
	b.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
