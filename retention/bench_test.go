package retention_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/pgtest"
	"github.com/kpgtx/coordinator/retention"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
)

// BenchmarkRetention measures the retention's cost: one pass over RETENTION_BENCH_ROWS expired
// rows (default 100,000) shaped like the coordinator's, with a pause of 1 ms between batches of
// DefaultBatch (the pauses are the rate bound, not a cost: they are subtracted). It reports,
// per 10,000 rows removed, the wall time, the CPU of the two PostgreSQL backends that did the
// work (the log's and the default database's, read from /proc: other load on the server does
// not count) and this process's CPU.
//
//	go test ./retention -run '^$' -bench BenchmarkRetention -benchtime 1x
func BenchmarkRetention(b *testing.B) {
	n := 100_000
	if s := os.Getenv("RETENTION_BENCH_ROWS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(b, err, "RETENTION_BENCH_ROWS")
	}
	ctx := context.Background()
	var wall, backends, self time.Duration
	for range b.N {
		b.StopTimer()
		_, dsn, _ := pgtest.Schema(b)
		cfg, err := pgxpool.ParseConfig(dsn)
		require.NoError(b, err)
		cfg.MinConns, cfg.MaxConns = 1, 1
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(b, err)
		log := txlog.New(pool, txlog.Options{})
		require.NoError(b, txlog.Migrate(ctx, log, "up"))
		sql, err := sqltxn.Open(ctx, map[string]string{"default": dsn}, sqltxn.Options{MaxConns: 1})
		require.NoError(b, err)
		_, err = pool.Exec(ctx, `INSERT INTO coordinator_transactions (gid, request_id, request_digest, instance_id, state,
    owner_instance, transactional_id, producer_id, producer_epoch, prepared_state, kafka_records, sql_gids, sql_results,
    created_at, updated_at, prepared_at, finished_at)
SELECT 'p_' || i, 'r' || i, '\x01', 'a', 'committed', 'a', 'tx-' || (i % 64), 1000, 0, '1000:0',
    jsonb_build_array(jsonb_build_object('topic', 't', 'partition', 0, 'offset', i)),
    jsonb_build_array(jsonb_build_object('database', 'default', 'gid', 'p_' || i || '@default')),
    '[{"rows_affected": 1}]', at, at, at, at
FROM (SELECT i, now() - interval '8 days' + i * interval '1 millisecond' AS at FROM generate_series(1, $1) i) s`, n)
		require.NoError(b, err)
		_, err = pool.Exec(ctx, "VACUUM ANALYZE coordinator_transactions")
		require.NoError(b, err)
		sqlPool, err := sql.Pool("default")
		require.NoError(b, err)
		pids := []int{backendPID(b, pool), backendPID(b, sqlPool)}

		s := retention.New(retention.Config{Retention: 7 * 24 * time.Hour, Pause: time.Millisecond}, log, sql, &kafka{})
		cpu0, self0 := backendCPU(b, pids), selfCPU()
		b.StartTimer()
		began := time.Now()
		st, err := s.RunOnce(ctx)
		took := time.Since(began)
		b.StopTimer()
		require.NoError(b, err)
		require.Equal(b, n, st.Removed)
		wall += took - time.Duration(st.Batches)*time.Millisecond
		backends += backendCPU(b, pids) - cpu0
		self += selfCPU() - self0
		require.Equal(b, pids, []int{backendPID(b, pool), backendPID(b, sqlPool)}, "the same backends did the work")
		sql.Close()
		log.Close()
		pool.Close()
	}
	per10k := func(d time.Duration) float64 { return float64(d.Milliseconds()) * 10000 / float64(n*b.N) }
	b.ReportMetric(per10k(wall), "wall-ms/10k-rows")
	b.ReportMetric(per10k(backends), "cpu-pg-ms/10k-rows")
	b.ReportMetric(per10k(self), "cpu-self-ms/10k-rows")
	b.ReportMetric(float64(n*b.N)/wall.Seconds(), "rows/s-unpaused")
}

func backendPID(b *testing.B, pool *pgxpool.Pool) int {
	b.Helper()
	var pid int
	require.NoError(b, pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid))
	return pid
}

// backendCPU is the user+system time of the processes, from /proc/<pid>/stat.
func backendCPU(b *testing.B, pids []int) time.Duration {
	b.Helper()
	var ticks int64
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		require.NoError(b, err, "the backend must run on this machine")
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		for _, i := range []int{11, 12} { // utime, stime
			v, err := strconv.ParseInt(f[i], 10, 64)
			require.NoError(b, err)
			ticks += v
		}
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
