package test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/service"
	"github.com/kpgtx/coordinator/txntype"
)

// BenchmarkRecovery measures one recovery pass over 10,000 in-doubt transactions, each left
// exactly as a coordinator killed after logging prepared leaves it (SQL prepared with its
// marker row, Kafka transaction open and flushed, the log row prepared with the ids), at
// parallelism 1 (one Kafka transaction after the other) and 16 (the default), and at 16 with
// every EndTxn on the one admin connection (endtxn-conns=1, kafkatxn/enders.go: the broker
// answers one request per connection at a time) against the default 8 connections. mates is
// how many requests share each Kafka transaction and each SQL transaction: 1, every request
// alone (each its own transactional id and gid); 16, the members of batches, as a coordinator
// killed at c=64 leaves them (docs/batching.md). The prepared rows are resolved by the page
// (C1): one claim and one final write per page, one EndTxn per Kafka transaction, each gid
// once; page=false resolves every row alone, as passes did before (the baseline, in the same
// run). BENCH_RECOVERY=par/conns/mates/page,… chooses the runs (page 1 or 0; default
// 16/8/1/0,16/8/1/1,16/8/16/0,16/8/16/1).
// Setting them up is not timed; it is reported as setup-s.
//
// PostgreSQL must hold 10,000 prepared transactions at once: scripts/services.sh sets
// max_prepared_transactions = 12000 (a server started before it must be restarted).
//
//	bash scripts/bench.sh
func BenchmarkRecovery(b *testing.B) {
	const inDoubt = 10000
	cpu := servicePIDs(b)
	runs := "16/8/1/0,16/8/1/1,16/8/16/0,16/8/16/1"
	if s := os.Getenv("BENCH_RECOVERY"); s != "" {
		runs = s
	}
	for _, r := range strings.Split(runs, ",") {
		var par, conns, mates, page int
		_, err := fmt.Sscanf(r, "%d/%d/%d/%d", &par, &conns, &mates, &page)
		require.NoError(b, err, "BENCH_RECOVERY=%q: parallelism/connections/mates/page,…", runs)
		b.Run(fmt.Sprintf("in-doubt=%d/parallelism=%d/endtxn-conns=%d/mates=%d/page=%t", inDoubt, par, conns, mates, page == 1), func(b *testing.B) {
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
				makeInDoubt(b, e, inDoubt, mates)
				setup += time.Since(began)
				e.svc.Kafka.SetEndTxnConns(conns)
				loop := recovery.New(recovery.Config{Instance: e.cfg.Instance, GIDPrefix: e.cfg.GIDPrefix,
					Parallelism: par, RowByRow: page == 0, Logger: slog.New(slog.DiscardHandler)}, e.svc.Ownership, e.svc.Log, e.svc.SQL, e.svc.Kafka, e.svc.Coord)
				before := cpu.sample(b, os.Getpid())
				b.StartTimer()
				st, err := loop.RunOnce(context.Background())
				b.StopTimer()
				after := cpu.sample(b, os.Getpid())
				used.self += after.self - before.self
				used.postgres += after.postgres - before.postgres
				used.kafka += after.kafka - before.kafka
				require.NoError(b, err)
				if st.Resolved != inDoubt { // only then is what the rows met worth a query
					require.Equal(b, inDoubt, st.Resolved, "the pass: %+v; rows left in doubt, by their last error: %v", st, leftErrors(b, e))
				}
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

// leftErrors counts the rows not committed by the error their last attempt recorded: what a
// pass that fell short of resolving every row met.
func leftErrors(b *testing.B, e *env) map[string]int {
	b.Helper()
	rows, err := e.db.Query(context.Background(),
		`SELECT coalesce(last_error, '(none)'), count(*) FROM coordinator_transactions WHERE state <> 'committed' GROUP BY 1`)
	require.NoError(b, err)
	left := map[string]int{}
	var msg string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&msg, &n}, func() error { left[msg] = n; return nil })
	require.NoError(b, err)
	return left
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
// after logging prepared leaves them. mates=1: each has its own transactional id (one open
// transaction per id) and its own gid, outside the pool; more: groups of mates share one Kafka
// transaction and one SQL transaction, as a batch's members do.
func makeInDoubt(b *testing.B, e *env, n, mates int) {
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
	for i := 0; i < n; i += mates {
		if mates <= 1 {
			g.Go(func() error { return prepareOne(ctx, e, pool, fmt.Sprintf("rb%05d", i)) })
			continue
		}
		g.Go(func() error { return prepareMates(ctx, e, pool, i, min(mates, n-i)) })
	}
	require.NoError(b, g.Wait())
}

// prepareMates leaves k requests (rb<first>…) as a batch's members that died after the batch's
// prepared write: each logged with the batch's Kafka ids and its own record, their SQL work in
// one shared prepared transaction registered with them (S2), the Kafka transaction open.
func prepareMates(ctx context.Context, e *env, pool *pgxpool.Pool, first, k int) error {
	fence, err := e.svc.Ownership.Fence()
	if err != nil {
		return err
	}
	// A shared gid as coord names one (sharedsql.go): <prefix>_+<instance>+<hex>@<database>.
	sqlGID := fmt.Sprintf("%s_+%s+%016x@%s", e.cfg.GIDPrefix, e.cfg.Instance, first, txntype.DefaultDatabase)
	ts := make([]*txntype.Transaction, k)
	shared := txntype.SharedGID{Database: txntype.DefaultDatabase, GID: sqlGID}
	work := "BEGIN;\n"
	for j := range ts {
		id := fmt.Sprintf("rb%05d", first+j)
		gid := e.svc.Coord.GID(id)
		ts[j] = &txntype.Transaction{ID: id, GID: gid, Instance: e.cfg.Instance, State: txntype.StateActive,
			Owner: fence.Instance, OwnerEpoch: fence.Epoch, Digest: []byte(id),
			SQLGIDs: []txntype.SQLGID{{Database: txntype.DefaultDatabase, GID: sqlGID}}}
		if _, _, err := e.svc.Log.Begin(ctx, ts[j]); err != nil {
			return err
		}
		shared.Members = append(shared.Members, gid)
		work += fmt.Sprintf("INSERT INTO orders (id, total) VALUES ('%s', 1);\n", id)
	}
	work += fmt.Sprintf("INSERT INTO coordinator_markers (gid) VALUES ('%s');\nPREPARE TRANSACTION '%s'", sqlGID, sqlGID)
	if _, err := pool.Exec(ctx, work); err != nil {
		return fmt.Errorf("prepare %s: %w", sqlGID, err)
	}
	ks, err := openDeadTxnWith(ctx, e, fmt.Sprintf("%s-dead-batch-%05d", e.prefix, first), k)
	if err != nil {
		return err
	}
	for j, t := range ts {
		t.Kafka = &txntype.KafkaState{KafkaIDs: ks.KafkaIDs, PreparedState: ks.PreparedState,
			Records: ks.Records[j : j+1]}
	}
	return e.svc.Log.PreparedBatch(ctx, ts, []txntype.SharedGID{shared})
}

func prepareOne(ctx context.Context, e *env, pool *pgxpool.Pool, id string) error {
	gid := e.svc.Coord.GID(id)
	sqlGID := txntype.SQLGIDFor(gid, txntype.DefaultDatabase)
	fence, err := e.svc.Ownership.Fence()
	if err != nil {
		return err
	}
	t := &txntype.Transaction{ID: id, GID: gid, Instance: e.cfg.Instance, State: txntype.StateActive,
		Owner: fence.Instance, OwnerEpoch: fence.Epoch,
		Digest: []byte(id), SQLGIDs: []txntype.SQLGID{{Database: txntype.DefaultDatabase, GID: sqlGID}}}
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
func openDeadTxn(ctx context.Context, e *env, txnID string) (*txntype.KafkaState, error) {
	return openDeadTxnWith(ctx, e, txnID, 1)
}

// openDeadTxnWith is openDeadTxn with n records, one per member of a batch.
func openDeadTxnWith(ctx context.Context, e *env, txnID string, n int) (*txntype.KafkaState, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(e.cfg.KafkaTxnTimeout))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return nil, err
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: e.topic, Key: []byte(fmt.Sprintf("%s-%d", txnID, i)), Value: []byte("v")}
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		return nil, fmt.Errorf("produce as %s: %w", txnID, err)
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return nil, err
	}
	k := &txntype.KafkaState{KafkaIDs: txntype.KafkaIDs{TransactionalID: txnID, ProducerID: pid, ProducerEpoch: epoch}}
	for _, r := range res {
		k.Records = append(k.Records, txntype.RecordOffset{Topic: r.Record.Topic, Partition: r.Record.Partition, Offset: r.Record.Offset})
	}
	k.PreparedState = k.KafkaIDs.PreparedState()
	return k, nil
}
