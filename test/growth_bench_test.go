package test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
)

// BenchmarkGrowth compares, in one run on the same services, coordinators on three logs:
//
//   - empty: a fresh log;
//   - full: a log preloaded with GROWTH_ROWS final rows (default 1,000,000; the goal is
//     20,000,000), created over the last 6.9 days: what a log holds in its steady state at the
//     default retention (7 days), which removes none of them during the run;
//   - expiring: the same preload created 8 days ago, so that the coordinator's retention
//     removes them while the load runs (its cost to the requests).
//
// at concurrency 16 and 64 (one SQL insert and one 100-byte record per request), rounds
// alternating their order (BENCH_ORDER=reverse reverses the first), and one recovery pass of a
// separate in-process loop on each log (the pass reads the log's in-doubt rows, markers and
// prepared gids; its time must not depend on the number of final rows). It reports the CPU per
// transaction of the coordinator and of PostgreSQL as BenchmarkThroughput does, the preload's
// time and each log's size.
//
// GROWTH_LOGS chooses the logs (default "empty full expiring"). GROWTH_ROUNDS=N runs the
// throughput figures N times on the same preload (its sub-benchmarks then repeat, "#01" and on),
// each concurrency's order alternating from round to round, so that a slow stretch of a shared
// machine does not land on one log alone; take the medians.
//
//	GROWTH_ROWS=1000000 go test ./test -run '^$' -bench BenchmarkGrowth -benchtime 3000x -timeout 2h
func BenchmarkGrowth(b *testing.B) {
	rows := 1_000_000
	if s := os.Getenv("GROWTH_ROWS"); s != "" {
		var err error
		rows, err = strconv.Atoi(s)
		require.NoError(b, err, "GROWTH_ROWS")
	}
	cpu := servicePIDs(b)
	ctx := context.Background()
	// Printed when the benchmark ends: a line between go test's result lines would break them.
	var reports []string
	b.Cleanup(func() {
		for _, r := range reports {
			fmt.Println(r)
		}
	})
	report := func(format string, args ...any) { reports = append(reports, fmt.Sprintf("growth: "+format, args...)) }
	settings := []string{"KAFKA_POOL_SIZE=64", "COORDINATOR_DB_MAX_CONNS=96",
		"COORDINATOR_RECOVERY_INTERVAL=2s", "COORDINATOR_INSTANCE_LEASE=10s", "COORDINATOR_MAX_IN_FLIGHT=4096"}
	type log struct {
		name   string
		e      *env
		base   string
		pid    int
		size   txlog.Size
		loop   *recovery.Loop
		txlog  *txlog.Log
		warmID string
	}
	var logs []*log
	names := []string{"empty", "full", "expiring"}
	if s := os.Getenv("GROWTH_LOGS"); s != "" {
		names = strings.Fields(s) // e.g. "empty full": no expiring log (its removal takes long at 20M)
	}
	for _, name := range names {
		require.Contains(b, []string{"empty", "full", "expiring"}, name, "GROWTH_LOGS")
		e := newStore(b, envOpts{poolSize: 64})
		l := &log{name: name, e: e}
		pool := growthPool(b, e)
		l.txlog = txlog.New(pool, txlog.Options{})
		require.NoError(b, txlog.Migrate(ctx, l.txlog, "up"))
		if name != "empty" {
			age := "0 days" // created over the last 6.9 days: all within the retention
			if name == "expiring" {
				age = "8 days"
			}
			began := time.Now()
			preload(b, pool, e.prefix, rows, age)
			report("%s: %d final rows preloaded in %.1f s", name, rows, time.Since(began).Seconds())
		}
		var err error
		l.size, err = l.txlog.Size(ctx)
		require.NoError(b, err)
		report("%s: %d rows (estimate), %.0f MB", name, l.size.Rows, float64(l.size.Bytes)/1e6)
		l.loop = growthRecoveryLoop(b, e, pool, l.txlog)
		logs = append(logs, l)
	}
	for _, l := range logs {
		l.base, l.pid = startBenchCoordinator(b, l.e, "growth-"+l.name, settings)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	value := strings.Repeat("v", 100)
	via := func(l *log) func(int, string) error {
		return func(_ int, id string) error {
			return postTransaction(client, l.base, map[string]any{"id": id,
				"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, $2)", "args": []any{id, 1}}},
				"kafka": []any{map[string]any{"topic": l.e.topic, "key": id, "value": value}}})
		}
	}
	for i := range 300 { // warm up every path, untimed
		for _, l := range logs {
			id := fmt.Sprintf("warm-%d-%s", i, randHex(6))
			require.NoError(b, via(l)(0, id))
			l.warmID = id
		}
	}
	rounds := 1
	if s := os.Getenv("GROWTH_ROUNDS"); s != "" {
		var err error
		rounds, err = strconv.Atoi(s)
		require.NoError(b, err, "GROWTH_ROUNDS")
		require.Positive(b, rounds, "GROWTH_ROUNDS")
	}
	order := slices.Clone(logs)
	if os.Getenv("BENCH_ORDER") == "reverse" {
		slices.Reverse(order)
	}
	for round := range rounds * 2 {
		c := []int{16, 64}[round%2]
		for _, l := range order {
			b.Run(fmt.Sprintf("%s/c=%d", l.name, c), func(b *testing.B) {
				before := cpu.sample(b, l.pid)
				run(b, c, via(l))
				after := cpu.sample(b, l.pid)
				n := float64(b.N)
				b.ReportMetric(after.self.Sub(before.self)/n, "cpu-coord-ms/txn")
				b.ReportMetric(after.postgres.Sub(before.postgres)/n, "cpu-pg-ms/txn")
				b.ReportMetric(float64(l.size.Rows)/1e6, "preloaded-Mrows")
			})
		}
		if round%2 == 0 || rounds == 1 {
			slices.Reverse(order) // the next concurrency, or the next round's c=16, sees the other order
		}
	}
	// The reads of one row, of the newest page and of the in-doubt view, which must not depend on
	// the number of final rows either.
	for _, read := range []struct{ name, path string }{
		{"get", "/v1/transactions/warm-0"},
		{"list-newest", "/v1/transactions?limit=50"},
		{"list-committed", "/v1/transactions?state=committed&limit=50"},
		{"in-doubt-view", "/v1/transactions?state=in-doubt"},
	} {
		for _, l := range order {
			path := read.path
			if read.name == "get" {
				path = "/v1/transactions/" + l.warmID
			}
			b.Run(fmt.Sprintf("%s/%s", l.name, read.name), func(b *testing.B) {
				// At most 20 reads whatever -benchtime says: a read that scans the log must not
				// take the run's time.
				n := min(b.N, 20)
				began := time.Now()
				for range n {
					resp, err := client.Get(l.base + path)
					require.NoError(b, err)
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					require.Equal(b, http.StatusOK, resp.StatusCode, path)
				}
				b.ReportMetric(float64(time.Since(began).Microseconds())/1000/float64(n), "ms/read")
			})
		}
	}
	for _, l := range order {
		b.Run(fmt.Sprintf("%s/recovery-pass", l.name), func(b *testing.B) {
			for range b.N {
				_, err := l.loop.RunOnce(ctx)
				require.NoError(b, err)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/pass")
		})
	}
	for _, l := range logs {
		size, err := l.txlog.Size(ctx)
		require.NoError(b, err)
		m := scrapeURL(b, l.base+"/metrics")
		report("%s at the end: %d rows (estimate), %.0f MB; the coordinator's retention removed %.0f rows",
			l.name, size.Rows, float64(size.Bytes)/1e6, m[`kpgtx_retention_removed_total{table="transactions"}`])
	}
}

// growthPool is a pool on the benchmark's log.
func growthPool(b *testing.B, e *env) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(e.cfg.DatabaseURL)
	require.NoError(b, err)
	txlog.ConfigurePool(cfg)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	return pool
}

// preload inserts n committed rows shaped like the coordinator's (one SQL gid, one record, the
// Kafka ids), created over 6.9 days before now() - age, 500,000 per statement, then
// vacuums and analyzes the log as autovacuum would.
func preload(b *testing.B, pool *pgxpool.Pool, prefix string, n int, age string) {
	b.Helper()
	ctx := context.Background()
	const chunk = 500_000
	for from := 0; from < n; from += chunk {
		to := min(from+chunk, n)
		_, err := pool.Exec(ctx, `INSERT INTO coordinator_transactions (gid, request_id, request_digest, instance_id, state,
    owner_instance, owner_epoch, transactional_id, producer_id, producer_epoch, prepared_state, kafka_records, sql_gids,
    sql_results, created_at, updated_at, prepared_at, finished_at)
SELECT $1 || '_pre-' || i, 'pre-' || i, sha256(('pre-' || i)::bytea), 'growth-old', 'committed', 'growth-old', 1,
    $1 || '-growth-old-' || (i % 64), 1000 + i % 64, 0, (1000 + i % 64) || ':0',
    jsonb_build_array(jsonb_build_object('topic', $1 || '-orders', 'partition', i % 3, 'offset', i)),
    jsonb_build_array(jsonb_build_object('database', 'default', 'gid', $1 || '_pre-' || i || '@default')),
    '[{"rows_affected": 1}]', at, at, at, at
FROM (SELECT i, now() - $4::interval - (i::float8 / $5) * interval '6.9 days' AS at
      FROM generate_series($2::bigint, $3::bigint - 1) i) s`, prefix, from, to, age, n)
		require.NoError(b, err)
	}
	_, err := pool.Exec(ctx, "VACUUM ANALYZE coordinator_transactions")
	require.NoError(b, err)
}

// growthRecoveryLoop is a recovery loop of an instance of its own on the log, as the service
// builds one (its lock claimed, its instance registered), without Kafka.
func growthRecoveryLoop(b *testing.B, e *env, pool *pgxpool.Pool, log *txlog.Log) *recovery.Loop {
	b.Helper()
	ctx := context.Background()
	inst := "growth-recovery"
	owner, err := recovery.Claim(ctx, e.cfg.DatabaseURL, inst, 10*time.Second)
	require.NoError(b, err)
	own := recovery.NewOwnership(e.cfg.DatabaseURL, inst, owner)
	b.Cleanup(func() { own.Close(context.Background()) })
	require.NoError(b, log.RegisterInstance(ctx, inst, e.prefix, 1))
	sql, err := sqltxn.Open(ctx, map[string]string{"default": e.cfg.DatabaseURL}, sqltxn.Options{MaxConns: 4})
	require.NoError(b, err)
	b.Cleanup(sql.Close)
	return recovery.New(recovery.Config{Instance: inst, GIDPrefix: e.prefix, DSN: e.cfg.DatabaseURL,
		Interval: time.Hour, Lease: time.Hour, Logger: slog.New(slog.DiscardHandler)}, own, log, sql, nil, growthIdle{})
}

// growthIdle is the recovery loop's coordinator: nothing in flight.
type growthIdle struct{}

func (growthIdle) InFlight(string) bool                  { return false }
func (growthIdle) TakeQuarantined(string) (string, bool) { return "", false }
