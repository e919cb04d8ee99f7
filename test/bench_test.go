package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/service"
)

// BenchmarkCommit measures committed requests through the coordinator's REST API next to the
// same SQL + Kafka work done by hand without a coordinator (a plain SQL commit and a plain
// transactional produce, run concurrently: the fastest non-atomic way), in the same run, at
// concurrency 1 and 16. It reports p50/p99 latency and throughput.
//
//	bash scripts/bench.sh      (starts the services, then runs this)
func BenchmarkCommit(b *testing.B) {
	e := newEnv(b, envOpts{poolSize: 32})
	// The same coordinator with every log write its own statement: what group commit buys.
	single := newEnv(b, envOpts{poolSize: 32, configure: func(c *service.Config) { c.NoGroupCommit = true }})
	// Warm up the broker's JIT, the connections and the pools, so that whichever variant runs
	// first is not charged for it.
	for _, env := range []*env{e, single} {
		warmUp(b, env, 400)
	}
	for _, c := range []int{1, 16} {
		b.Run(fmt.Sprintf("coordinator/c=%d", c), func(b *testing.B) {
			benchCoordinator(b, e, c)
		})
		b.Run(fmt.Sprintf("coordinator-no-group-commit/c=%d", c), func(b *testing.B) {
			benchCoordinator(b, single, c)
		})
		b.Run(fmt.Sprintf("by-hand/c=%d", c), func(b *testing.B) {

			// A pool of producers as large as the coordinator's: reusing one transactional id
			// back to back makes the next transaction wait for the previous one's markers
			// (CONCURRENT_TRANSACTIONS), which would slow the baseline unfairly.
			producers := make(chan *kgo.Client, 32)
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
			run(b, c, func(_ int, id string) error {
				cl := <-producers
				defer func() { producers <- cl }()
				return byHand(e.db, cl, e.topic, id)
			})
		})
	}
}

// warmUp sends n committed requests from 8 clients, untimed.
func warmUp(b *testing.B, e *env, n int) {
	b.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				body, _ := json.Marshal(order(e, fmt.Sprintf("warm-%s-%d", e.prefix, i), 1))
				if resp, err := client.Post(e.srv.URL+"/v1/transactions", "application/json", bytes.NewReader(body)); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
}

// benchCoordinator posts committed requests to the coordinator's API from c clients.
func benchCoordinator(b *testing.B, e *env, c int) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	run(b, c, func(_ int, id string) error {
		body, _ := json.Marshal(order(e, id, 1))
		resp, err := client.Post(e.srv.URL+"/v1/transactions", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d: %s", resp.StatusCode, raw)
		}
		return nil
	})
}

// byHand is the baseline: the same insert and record, committed separately and concurrently.
func byHand(db *pgxpool.Pool, cl *kgo.Client, topic, id string) error {
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		_, err := db.Exec(ctx, "INSERT INTO orders (id, total) VALUES ($1, $2)", id, 1)
		errc <- err
	}()
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	rec := &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(`{"total":1}`),
		Headers: []kgo.RecordHeader{{Key: "source", Value: []byte("test")}}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return err
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return err
	}
	return <-errc
}

// run calls op b.N times from c workers and reports latency percentiles and throughput.
func run(b *testing.B, c int, op func(worker int, id string) error) {
	b.Helper()
	var next atomic.Int64
	lat := make([]time.Duration, b.N)
	prefix := fmt.Sprintf("b%d-%s-", c, randHex(3))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	b.ResetTimer()
	start := time.Now()
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := op(w, prefix+fmt.Sprint(i)); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	require.NoError(b, firstErr)
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(float64(len(lat)-1)*p)].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "txn/s")
}
