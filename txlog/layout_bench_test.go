package txlog_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/pgtest"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// layouts are the table layouts BenchmarkLogLayout weighs (docs/decisions.md, "Retention"):
// the migrated one, with a (created_at, gid) index for the newest-first listing, fillfactor 80 alone, fillfactor 80 with the (state, created_at, gid) index
// made partial on the states that are not committed or aborted, and fillfactor 80 without any
// index that names the state (what HOT updates would need: PostgreSQL makes an update HOT only
// when no indexed column changes, and a partial index's predicate counts as indexed).
var layouts = []struct{ name, ddl string }{
	{"current", ""},
	{"current-created", `CREATE INDEX coordinator_transactions_created ON coordinator_transactions (created_at, gid)`},
	{"ff80", `ALTER TABLE coordinator_transactions SET (fillfactor = 80)`},
	{"ff80-partial", `ALTER TABLE coordinator_transactions SET (fillfactor = 80);
DROP INDEX coordinator_transactions_state_created;
CREATE INDEX coordinator_transactions_open_created ON coordinator_transactions (state, created_at, gid)
    WHERE state NOT IN ('committed', 'aborted');
CREATE INDEX coordinator_transactions_created ON coordinator_transactions (created_at, gid)`},
	{"ff80-nostate", `ALTER TABLE coordinator_transactions SET (fillfactor = 80);
DROP INDEX coordinator_transactions_state_created;
DROP INDEX coordinator_transactions_in_doubt;
CREATE INDEX coordinator_transactions_created ON coordinator_transactions (created_at, gid)`},
}

// BenchmarkLogLayout runs the log's own writes of a request (Begin, Prepared with the Kafka
// ids and offsets, Committed), group commit on, from 16 goroutines, on each layout, in
// LAYOUT_ROUNDS rounds (default 2) of alternating order. It reports the throughput, the CPU
// of the PostgreSQL backends that served the log's pool (read from /proc by their pids:
// other load on the server does not count), the share of HOT updates
// (pg_stat_user_tables.n_tup_hot_upd / n_tup_upd) and the table's size per 100,000 requests.
//
//	go test ./txlog -run '^$' -bench BenchmarkLogLayout -benchtime 20000x
func BenchmarkLogLayout(b *testing.B) {
	rounds := 2
	if s := os.Getenv("LAYOUT_ROUNDS"); s != "" {
		var err error
		rounds, err = strconv.Atoi(s)
		require.NoError(b, err, "LAYOUT_ROUNDS")
	}
	chosen := layouts
	if s := os.Getenv("LAYOUTS"); s != "" { // a space-separated choice, e.g. "current current-created"
		chosen = nil
		for _, name := range strings.Fields(s) {
			for _, l := range layouts {
				if l.name == name {
					chosen = append(chosen, l)
				}
			}
		}
		require.NotEmpty(b, chosen, "LAYOUTS")
	}
	for r := range rounds {
		for i := range chosen {
			layout := chosen[i]
			if r%2 == 1 {
				layout = chosen[len(chosen)-1-i]
			}
			b.Run(fmt.Sprintf("%s/round=%d", layout.name, r+1), func(b *testing.B) { benchLayout(b, layout.ddl) })
		}
	}
}

func benchLayout(b *testing.B, ddl string) {
	ctx := context.Background()
	schema, dsn, admin := pgtest.Schema(b)
	app := "layout_" + schema
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(b, err)
	txlog.ConfigurePool(cfg)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MinConns, cfg.MaxConns = 20, 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(b, err)
	l := txlog.New(pool, txlog.Options{GroupCommit: true})
	require.NoError(b, txlog.Migrate(ctx, l, "up"))
	if ddl != "" {
		_, err = pool.Exec(ctx, ddl)
		require.NoError(b, err)
	}
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(b, err)
	request := func(id string) error {
		t := &txntype.Transaction{ID: id, GID: "p_" + id, Instance: "a", State: txntype.StateActive, Owner: "a",
			OwnerEpoch: epoch, Digest: []byte(id), SQLGIDs: []txntype.SQLGID{{Database: "default", GID: "p_" + id + "@default"}}}
		live, _, err := l.Begin(ctx, t)
		if err != nil {
			return err
		}
		live.Kafka = &txntype.KafkaState{KafkaIDs: txntype.KafkaIDs{TransactionalID: "p-a-1", ProducerID: 1000, ProducerEpoch: 5},
			PreparedState: "1000:5", Records: []txntype.RecordOffset{{Topic: "orders", Partition: 1, Offset: 12345}}}
		live.SQL = []txntype.SQLResult{{RowsAffected: 1}}
		if err := l.Prepared(ctx, live); err != nil {
			return err
		}
		return l.Committed(ctx, live, time.Time{})
	}
	for i := range 200 { // warm up, untimed
		require.NoError(b, request(fmt.Sprint("warm-", i)))
	}
	pids := func() []int {
		rows, err := admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
		require.NoError(b, err)
		p, err := pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(b, err)
		return p
	}
	conns := make([]*pgxpool.Conn, cfg.MaxConns) // every connection open before the pids are read
	for i := range conns {
		conns[i], err = pool.Acquire(ctx)
		require.NoError(b, err)
	}
	for _, c := range conns {
		c.Release()
	}
	before := pids()
	require.Len(b, before, int(cfg.MaxConns))
	cpu0 := backendsCPU(b, before)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	b.ResetTimer()
	start := time.Now()
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := request(fmt.Sprint("r-", i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	require.NoError(b, <-errs)
	require.ElementsMatch(b, before, pids(), "the same backends served the run")
	cpu := backendsCPU(b, before) - cpu0
	l.Close()
	pool.Close() // the backends exit and report their statistics
	var upd, hot, size int64
	require.Eventually(b, func() bool {
		require.NoError(b, admin.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd, pg_total_relation_size(relid)
FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'coordinator_transactions'`, schema).Scan(&upd, &hot, &size))
		return upd >= int64(2*(b.N+200))
	}, 10*time.Second, 100*time.Millisecond, "the statistics of every update")
	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(cpu.Microseconds())/1000/n, "cpu-pg-ms/req")
	b.ReportMetric(100*float64(hot)/float64(upd), "hot-%")
	b.ReportMetric(float64(size)/1e6/(n+200)*100000, "MB/100k-req")
}

// backendsCPU is the user+system time of the processes, from /proc/<pid>/stat.
func backendsCPU(b *testing.B, pids []int) time.Duration {
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
