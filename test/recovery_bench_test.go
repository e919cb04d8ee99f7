package test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/service"
)

// BenchmarkRecovery measures one recovery pass over 1,000 in-doubt transactions, each left
// exactly as a coordinator killed after logging prepared leaves it (SQL prepared with its
// marker row, Kafka transaction open and flushed, the log row prepared with the ids), at
// parallelism 1 (the baseline: one transaction after the other) and 16 (the default).
//
//	bash scripts/bench.sh
func BenchmarkRecovery(b *testing.B) {
	const inDoubt = 1000
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("in-doubt=%d/parallelism=%d", inDoubt, par), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				// The service's own loop must not run meanwhile: it would resolve (presume
				// abort of) the rows while they are being set up.
				e := newEnv(b, envOpts{configure: func(c *service.Config) {
					c.RecoveryInterval, c.InstanceLease = time.Hour, 3*time.Hour
				}})
				makeInDoubt(b, e, inDoubt)
				loop := recovery.New(recovery.Config{Instance: e.cfg.Instance, GIDPrefix: e.cfg.GIDPrefix,
					Parallelism: par, Logger: slog.New(slog.DiscardHandler)}, e.svc.Ownership, e.svc.Log, e.svc.SQL, e.svc.Kafka, e.svc.Coord)
				b.StartTimer()
				st, err := loop.RunOnce(context.Background())
				b.StopTimer()
				require.NoError(b, err)
				require.Equal(b, inDoubt, st.Resolved)
				var committed int
				require.NoError(b, e.db.QueryRow(context.Background(),
					`SELECT count(*) FROM coordinator_transactions WHERE state = 'committed'`).Scan(&committed))
				require.Equal(b, inDoubt, committed)
				require.Empty(b, e.preparedLeft())
			}
			b.ReportMetric(float64(inDoubt), "txns/pass")
		})
	}
}

// makeInDoubt creates n transactions in state prepared, the way a coordinator that died right
// after logging prepared leaves them. Each has its own transactional id (one open transaction
// per id), outside the pool.
func makeInDoubt(b *testing.B, e *env, n int) {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- prepareOne(ctx, e, fmt.Sprintf("rb%04d", i))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
}

func prepareOne(ctx context.Context, e *env, id string) error {
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
	// SQL: work, marker, PREPARE — what sqltxn.Run does.
	conn, err := e.db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for _, q := range []string{"BEGIN",
		fmt.Sprintf("INSERT INTO orders (id, total) VALUES ('%s', 1)", id),
		fmt.Sprintf("INSERT INTO coordinator_markers (gid) VALUES ('%s')", sqlGID),
		fmt.Sprintf("PREPARE TRANSACTION '%s'", sqlGID)} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	// Kafka: an open, flushed transaction, its client closed (Close does not abort).
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.TransactionalID(e.prefix+"-dead-"+id),
		kgo.TransactionTimeout(e.cfg.KafkaTxnTimeout))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: e.topic, Key: []byte(id), Value: []byte("v")}).First()
	if err != nil {
		return err
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return err
	}
	t.Kafka = &coord.KafkaState{
		KafkaIDs: coord.KafkaIDs{TransactionalID: e.prefix + "-dead-" + id, ProducerID: pid, ProducerEpoch: epoch},
		Records:  []coord.RecordOffset{{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}},
	}
	t.Kafka.PreparedState = t.Kafka.KafkaIDs.PreparedState()
	return e.svc.Log.Prepared(ctx, t)
}
