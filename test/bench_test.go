package test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
