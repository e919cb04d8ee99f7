package test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/service"
)

// BenchmarkRecovery measures one recovery pass over 10,000 in-doubt transactions, each left
// exactly as a coordinator killed after logging prepared leaves it (SQL prepared with its
// marker row, Kafka transaction open and flushed, the log row prepared with the ids), at
// parallelism 1 (the baseline: one transaction after the other) and 16 (the default), and at 16
// with every EndTxn on the one admin connection (endtxn-conns=1, kafkatxn/enders.go: the
// broker answers one request per connection at a time) against the default 8 connections.
// BENCH_RECOVERY=par/conns,… chooses the runs (default 1/8,16/1,16/8). Setting them up is not
// timed; it is reported as setup-s.
//
// PostgreSQL must hold 10,000 prepared transactions at once: scripts/services.sh sets
// max_prepared_transactions = 12000 (a server started before it must be restarted).
//
//	bash scripts/bench.sh
func BenchmarkRecovery(b *testing.B) {
	const inDoubt = 10000
	cpu := servicePIDs(b)
	runs := "1/8,16/1,16/8"
	if s := os.Getenv("BENCH_RECOVERY"); s != "" {
		runs = s
	}
	for _, r := range strings.Split(runs, ",") {
		var par, conns int
		_, err := fmt.Sscanf(r, "%d/%d", &par, &conns)
		require.NoError(b, err, "BENCH_RECOVERY=%q: parallelism/connections,…", runs)
		b.Run(fmt.Sprintf("in-doubt=%d/parallelism=%d/endtxn-conns=%d", inDoubt, par, conns), func(b *testing.B) {
			var setup time.Duration
			var used cpuSample // CPU of the timed passes: the loop (this process), PostgreSQL, the broker
			for range b.N {
				b.StopTimer()
				// The service's own loop must not run meanwhile: it would resolve (presume
				// abort of) the rows while they are being set up. Kafka must not abort the
				// first transactions (its timeout) before the last one is set up and the
				// serial pass reaches them: the broker's largest timeout is 15 minutes.
				e := newEnv(b, envOpts{configure: func(c *service.Config) {
					c.RecoveryInterval, c.InstanceLease = time.Hour, 3*time.Hour
					c.KafkaTxnTimeout = 14 * time.Minute
				}})
				requirePreparedSlots(b, e, inDoubt)
				began := time.Now()
				makeInDoubt(b, e, inDoubt)
				setup += time.Since(began)
				e.svc.Kafka.SetEndTxnConns(conns)
				loop := recovery.New(recovery.Config{Instance: e.cfg.Instance, GIDPrefix: e.cfg.GIDPrefix,
					Parallelism: par, Logger: slog.New(slog.DiscardHandler)}, e.svc.Ownership, e.svc.Log, e.svc.SQL, e.svc.Kafka, e.svc.Coord)
				before := cpu.sample(b, os.Getpid())
				b.StartTimer()
				st, err := loop.RunOnce(context.Background())
				b.StopTimer()
				after := cpu.sample(b, os.Getpid())
				used.self += after.self - before.self
				used.postgres += after.postgres - before.postgres
				used.kafka += after.kafka - before.kafka
				require.NoError(b, err)
				require.Equal(b, inDoubt, st.Resolved)
				var committed int
				require.NoError(b, e.db.QueryRow(context.Background(),
					`SELECT count(*) FROM coordinator_transactions WHERE state = 'committed'`).Scan(&committed))
				require.Equal(b, inDoubt, committed)
				require.Empty(b, e.preparedLeft())
			}
			b.ReportMetric(float64(inDoubt), "txns/pass")
			b.ReportMetric(float64(inDoubt*b.N)/b.Elapsed().Seconds(), "txn/s")
			b.ReportMetric(setup.Seconds()/float64(b.N), "setup-s")
			// CPU per resolved transaction: with the machine's cores, the pass's bound.
			n := float64(inDoubt * b.N)
			b.ReportMetric(float64(used.self)/n, "cpu-loop-ms/txn")
			b.ReportMetric(float64(used.postgres)/n, "cpu-pg-ms/txn")
			b.ReportMetric(float64(used.kafka)/n, "cpu-kafka-ms/txn")
		})
	}
}

// requirePreparedSlots stops the benchmark with what to do when PostgreSQL cannot hold n
// prepared transactions at once (PREPARE would fail midway through the setup).
func requirePreparedSlots(b *testing.B, e *env, n int) {
	b.Helper()
	var slots int
	require.NoError(b, e.db.QueryRow(context.Background(),
		"SELECT current_setting('max_prepared_transactions')::int").Scan(&slots))
	require.GreaterOrEqual(b, slots, n, "max_prepared_transactions = %d holds fewer than the "+
		"benchmark's %d in-doubt transactions: restart PostgreSQL with scripts/services.sh "+
		"(stop-postgres, start-postgres), which sets 12000", slots, n)
}

// setupWorkers bounds the in-doubt transactions being set up at once: as many database
// connections, and Kafka clients alive (each is closed once its transaction is open).
const setupWorkers = 16

// makeInDoubt creates n transactions in state prepared, the way a coordinator that died right
// after logging prepared leaves them. Each has its own transactional id (one open transaction
// per id), outside the pool.
func makeInDoubt(b *testing.B, e *env, n int) {
	b.Helper()
	// A pool of its own: one connection per worker (the test's pool has a handful).
	pc, err := pgxpool.ParseConfig(e.cfg.DatabaseURL)
	require.NoError(b, err)
	pc.MaxConns = setupWorkers
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(b, err)
	defer pool.Close()
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(setupWorkers)
	for i := range n {
		g.Go(func() error { return prepareOne(ctx, e, pool, fmt.Sprintf("rb%05d", i)) })
	}
	require.NoError(b, g.Wait())
}

func prepareOne(ctx context.Context, e *env, pool *pgxpool.Pool, id string) error {
	gid := e.svc.Coord.GID(id)
	sqlGID := coord.SQLGIDFor(gid, coord.DefaultDatabase)
	fence, err := e.svc.Ownership.Fence()
	if err != nil {
		return err
	}
	t := &coord.Transaction{ID: id, GID: gid, Instance: e.cfg.Instance, State: coord.StateActive,
		Owner: fence.Instance, OwnerEpoch: fence.Epoch,
		Digest: []byte(id), SQLGIDs: []coord.SQLGID{{Database: coord.DefaultDatabase, GID: sqlGID}}}
	if _, _, err := e.svc.Log.Begin(ctx, t); err != nil {
		return err
	}
	// SQL: work, marker, PREPARE — what sqltxn.Run does, in one round trip.
	if _, err := pool.Exec(ctx, fmt.Sprintf(`BEGIN;
INSERT INTO orders (id, total) VALUES ('%s', 1);
INSERT INTO coordinator_markers (gid) VALUES ('%s');
PREPARE TRANSACTION '%s'`, id, sqlGID, sqlGID)); err != nil {
		return fmt.Errorf("prepare %s: %w", sqlGID, err)
	}
	if t.Kafka, err = openDeadTxn(ctx, e, e.prefix+"-dead-"+id); err != nil {
		return err
	}
	return e.svc.Log.Prepared(ctx, t)
}

// openDeadTxn leaves a Kafka transaction open and flushed under its own transactional id, one
// record in it, as a dead producer leaves it: its client is closed before this returns. Closing
// a kgo client sends no EndTxn (it only drops its connections), so the broker keeps the
// transaction open until its timeout; the benchmark's check that every row ends committed
// (EndTxn(commit) by the stored ids succeeded) relies on it.
func openDeadTxn(ctx context.Context, e *env, txnID string) (*coord.KafkaState, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(e.cfg.KafkaTxnTimeout))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return nil, err
	}
	r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: e.topic, Key: []byte(txnID), Value: []byte("v")}).First()
	if err != nil {
		return nil, fmt.Errorf("produce as %s: %w", txnID, err)
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return nil, err
	}
	k := &coord.KafkaState{
		KafkaIDs: coord.KafkaIDs{TransactionalID: txnID, ProducerID: pid, ProducerEpoch: epoch},
		Records:  []coord.RecordOffset{{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}},
	}
	k.PreparedState = k.KafkaIDs.PreparedState()
	return k, nil
}
