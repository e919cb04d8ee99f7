package test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/client"
)

// BenchmarkPipeline measures a consume-transform-write pipeline end to end: b.N input records
// on 6 partitions, each turned into one insert and one output record, batches as the consumer
// polls them, by 1 and 3 members of one consumer group:
//
//   - pipeline: client.RunPipeline through the coordinator binary (its own process): every
//     batch one atomic request with the batch's offsets, fenced by the member's generation;
//   - pipeline-by-hand: the same without atomicity: per batch a SQL commit, a produce of the
//     records (acks=all) and then commitSync of the offsets (kgo CommitRecords).
//
// The clock runs from the members holding their partitions until the group's committed offsets
// reach the input's end. txn/s is records per second; p50/p99 the latency of one batch.
// scripts/bench.sh puts the rows in its one table ("1m", "3m": members), with the ratio to
// pipeline-by-hand.
func BenchmarkPipeline(b *testing.B) {
	printPhaseReports(b)
	cpu := servicePIDs(b)
	// newShipments is a log of its own with the pipeline's table.
	newShipments := func() *env {
		e := newStore(b, envOpts{})
		_, err := e.db.Exec(context.Background(), `CREATE TABLE shipments (order_id text NOT NULL, input_partition int NOT NULL, input_offset bigint NOT NULL)`)
		require.NoError(b, err)
		return e
	}
	settings := []string{"KAFKA_POOL_SIZE=16", "COORDINATOR_RECOVERY_INTERVAL=2s", "COORDINATOR_INSTANCE_LEASE=10s"}
	e := newShipments()
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	base, coordPID := startBenchCoordinator(b, e, "bench-pipeline", append(slices.Clone(settings), "COORDINATOR_PPROF_LISTEN="+pprofAddr))
	var err error
	// BENCH_PPROF_C=1m or 3m profiles the coordinator over that run (BENCH_PPROF_SECONDS).
	profiledMembers := 0
	if s := os.Getenv("BENCH_PPROF_C"); strings.HasSuffix(s, "m") {
		profiledMembers, err = strconv.Atoi(strings.TrimSuffix(s, "m"))
		require.NoError(b, err, "BENCH_PPROF_C")
	}
	c, err := client.New(base)
	require.NoError(b, err)
	pool := e.db
	// BENCH_BASELINE_BINARY (scripts/bench.sh BENCH_BASELINE=<revision>): another build of the
	// coordinator, on a log of its own, as the row pipeline-baseline of the same run.
	var cBaseline *client.Client
	baselinePID := 0
	if bin := os.Getenv("BENCH_BASELINE_BINARY"); bin != "" {
		var baseBaseline string
		baseBaseline, baselinePID = startBenchBinary(b, bin, newShipments(), "bench-pipeline-baseline", settings)
		cBaseline, err = client.New(baseBaseline)
		require.NoError(b, err)
	}

	type variant struct {
		name   string
		pid    int
		member func(ctx context.Context, p *benchPipeline, i int, lat func(time.Duration)) error
	}
	// The members' settings, each a number from the environment (0: the client's default):
	//   - a member's window of batches in flight (O4): BENCH_INFLIGHT for the row pipeline,
	//     BENCH_BASELINE_INFLIGHT for pipeline-baseline (default 1: a build from before chained
	//     batches refuses kafka_offsets.after);
	//   - a batch gathered from several polls (client.Pipeline.MaxBatchRecords): BENCH_GATHER for
	//     the row pipeline, BENCH_BASELINE_GATHER for pipeline-baseline (default 100, one poll: a
	//     build from before gathered batches refuses more than 100 statements in a request).
	setting := func(name string, def int) int {
		n, err := strconv.Atoi(cmp.Or(os.Getenv(name), strconv.Itoa(def)))
		require.NoError(b, err, name)
		return n
	}
	through := func(c *client.Client, inFlight, gather int) func(ctx context.Context, p *benchPipeline, i int, lat func(time.Duration)) error {
		return func(ctx context.Context, p *benchPipeline, i int, lat func(time.Duration)) error {
			var mu sync.Mutex
			starts := map[string]time.Time{}
			key := func(r *kgo.Record) string { return fmt.Sprintf("%d/%d", r.Partition, r.Offset) }
			pl := client.Pipeline{Brokers: e.brokers, Group: p.group, Topics: []string{p.in}, MaxPollRecords: 100, InFlight: inFlight, MaxBatchRecords: gather,
				Options: p.memberOpts(i, false), OnRevoked: p.track(i, -1),
				Transform: func(ctx context.Context, batch []*kgo.Record) ([]client.Statement, []client.Record, error) {
					mu.Lock()
					starts[key(batch[0])] = time.Now()
					mu.Unlock()
					return p.transform(ctx, batch)
				},
				OnCommit: func(batch []*kgo.Record, _ *client.Transaction) {
					mu.Lock()
					lat(time.Since(starts[key(batch[0])]))
					mu.Unlock()
				}}
			return c.RunPipeline(ctx, pl)
		}
	}
	variants := []variant{
		{"pipeline", coordPID, through(c, setting("BENCH_INFLIGHT", 0), setting("BENCH_GATHER", 0))},
		{"pipeline-by-hand", os.Getpid(), func(ctx context.Context, p *benchPipeline, i int, lat func(time.Duration)) error {
			return p.byHand(ctx, pool, i, lat)
		}},
	}
	if cBaseline != nil {
		variants = append(variants, variant{"pipeline-baseline", baselinePID, through(cBaseline, setting("BENCH_BASELINE_INFLIGHT", 1), setting("BENCH_BASELINE_GATHER", 100))})
	}
	if os.Getenv("BENCH_ORDER") == "reverse" {
		slices.Reverse(variants)
	}
	for _, members := range []int{1, 3} {
		for _, v := range variants {
			b.Run(fmt.Sprintf("%s/c=%dm", v.name, members), func(b *testing.B) {
				p := newBenchPipeline(b, e)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var mu sync.Mutex
				var lats []time.Duration
				lat := func(d time.Duration) { mu.Lock(); lats = append(lats, d); mu.Unlock() }
				var wg sync.WaitGroup
				errs := make([]error, members)
				for i := range members {
					wg.Go(func() { errs[i] = v.member(ctx, p, i, lat) })
				}
				p.waitAssigned(b, members)
				var metrics0 series
				if v.pid == coordPID && os.Getenv("BENCH_PHASES") != "" {
					metrics0 = scrapeURL(b, base+"/metrics")
				}
				var profiled <-chan struct{}
				if v.pid == coordPID && members == profiledMembers && b.N > 1 {
					profiled = profileCoordinator(b, pprofAddr)
				}
				before := cpu.sample(b, v.pid)
				b.ResetTimer()
				start := time.Now()
				p.produce(b, b.N)
				wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
				for !p.done(wctx) {
					require.NoError(b, wctx.Err(), "the group did not consume the input")
					time.Sleep(20 * time.Millisecond)
				}
				wcancel()
				elapsed := time.Since(start)
				b.StopTimer()
				after := cpu.sample(b, v.pid)
				if metrics0 != nil {
					logPhases(b, metrics0, scrapeURL(b, base+"/metrics"))
				}
				if profiled != nil {
					<-profiled
				}
				cancel()
				wg.Wait()
				for _, err := range errs {
					require.NoError(b, err)
				}
				slices.Sort(lats)
				if len(lats) > 0 {
					b.ReportMetric(float64(lats[(len(lats)-1)/2].Microseconds())/1000, "p50-ms")
					b.ReportMetric(float64(lats[(len(lats)-1)*99/100].Microseconds())/1000, "p99-ms")
				}
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "txn/s")
				n := float64(b.N)
				b.ReportMetric(after.self.Sub(before.self)/n, "cpu-coord-ms/txn")
				b.ReportMetric(after.postgres.Sub(before.postgres)/n, "cpu-pg-ms/txn")
				b.ReportMetric(after.kafka.Sub(before.kafka)/n, "cpu-kafka-ms/txn")
			})
		}
	}
}

// benchPipeline is one run's input and output topics and group, and its members' assignments.
type benchPipeline struct {
	pipelineEnv
	mu       sync.Mutex
	assigned map[int]int // member → partitions it holds
}

const benchPartitions = 6

func newBenchPipeline(b *testing.B, e *env) *benchPipeline {
	b.Helper()
	suffix := randHex(3)
	p := &benchPipeline{pipelineEnv: pipelineEnv{e: e, in: e.prefix + "-bin-" + suffix, out: e.prefix + "-bout-" + suffix,
		group: e.prefix + "-bg-" + suffix, table: "shipments"}, assigned: map[int]int{}}
	e.createTopic(p.in, benchPartitions)
	e.createTopic(p.out, benchPartitions)
	return p
}

// track counts member i's partitions up (delta 1, assigned) or down (-1, revoked or lost).
func (p *benchPipeline) track(i, delta int) func(context.Context, *kgo.Client, map[string][]int32) {
	return func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, ps := range m {
			p.assigned[i] += delta * len(ps)
		}
	}
}

// memberOpts are the consumer options of member i: its assignment is tracked (revocations too,
// unless the pipeline helper owns that callback: then client.Pipeline.OnRevoked).
func (p *benchPipeline) memberOpts(i int, revoked bool) []kgo.Opt {
	opts := []kgo.Opt{kgo.OnPartitionsAssigned(p.track(i, 1)), kgo.OnPartitionsLost(p.track(i, -1))}
	if revoked {
		opts = append(opts, kgo.OnPartitionsRevoked(p.track(i, -1)))
	}
	return opts
}

// waitAssigned waits until every member holds partitions and all of them are held.
func (p *benchPipeline) waitAssigned(b *testing.B, members int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		p.mu.Lock()
		total, holders := 0, 0
		for _, n := range p.assigned {
			total += n
			if n > 0 {
				holders++
			}
		}
		p.mu.Unlock()
		if total == benchPartitions && holders == members {
			return
		}
		require.NoError(b, ctx.Err(), "the members did not get the input's partitions (%d held by %d)", total, holders)
		time.Sleep(20 * time.Millisecond)
	}
}

// produce writes n orders round-robin over the partitions.
func (p *benchPipeline) produce(b *testing.B, n int) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(2*time.Millisecond))
	require.NoError(b, err)
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range n {
		recs[i] = &kgo.Record{Topic: p.in, Partition: int32(i % benchPartitions), Key: []byte(fmt.Sprintf("o-%06d", i)), Value: []byte("{}")}
	}
	require.NoError(b, cl.ProduceSync(context.Background(), recs...).FirstErr())
}

// byHandPoll is the by-hand loop's records per poll, and so per commit (BENCH_BYHAND_POLL,
// default 100, the pipeline's MaxPollRecords).
var byHandPoll = func() int {
	n, err := strconv.Atoi(cmp.Or(os.Getenv("BENCH_BYHAND_POLL"), "100"))
	if err != nil || n < 1 {
		panic("BENCH_BYHAND_POLL: a positive number of records")
	}
	return n
}()

// byHand is one member of the pipeline without atomicity: per polled batch a SQL commit of the
// inserts, a produce of the records, then commitSync of the batch's offsets.
func (p *benchPipeline) byHand(ctx context.Context, pool *pgxpool.Pool, i int, lat func(time.Duration)) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.e.brokers...), kgo.ConsumerGroup(p.group),
		kgo.ConsumeTopics(p.in), kgo.DisableAutoCommit(), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0)}, p.memberOpts(i, true)...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		f := cl.PollRecords(ctx, byHandPoll)
		if ctx.Err() != nil {
			return nil
		}
		batch := f.Records()
		if len(batch) == 0 {
			continue
		}
		t0 := time.Now()
		sb := &pgx.Batch{}
		out := make([]*kgo.Record, 0, len(batch))
		for _, r := range batch {
			sb.Queue("INSERT INTO shipments (order_id, input_partition, input_offset) VALUES ($1, $2, $3)", string(r.Key), r.Partition, r.Offset)
			out = append(out, &kgo.Record{Topic: p.out, Key: r.Key, Value: []byte("shipped")})
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, sb).Close() }); err != nil {
			return err
		}
		if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
			return err
		}
		if err := cl.CommitRecords(ctx, batch...); err != nil {
			return err
		}
		lat(time.Since(t0))
	}
}
