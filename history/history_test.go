package history

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSamplesAreRatesBetweenReadings: counters become rates per second over the interval,
// latencies quantiles of the interval's observations only, gauges are read as they are, and a
// family the registry lacks is NaN.
func TestSamplesAreRatesBetweenReadings(t *testing.T) {
	reg := prometheus.NewRegistry()
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricTransactions}, []string{"state", "class"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricPhaseDuration,
		Buckets: []float64{0.001, 0.01, 0.1, 1}}, []string{"phase"})
	notFinal := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricInDoubt}, []string{"state"})
	reg.MustRegister(outcomes, lat, notFinal)

	now := time.Unix(1000, 0)
	s := New(reg, Options{Interval: 5 * time.Second, Window: 15 * time.Second, Now: func() time.Time { return now }})
	lat.WithLabelValues("total").Observe(0.5) // before the first reading: not in any interval
	s.Sample()
	require.Empty(t, s.Samples(), "one reading is no interval")

	outcomes.WithLabelValues("committed", "none").Add(50)
	outcomes.WithLabelValues("aborted", "abortable").Add(10)
	outcomes.WithLabelValues("prepared", "retriable").Add(5)
	for range 99 {
		lat.WithLabelValues("total").Observe(0.005)
	}
	lat.WithLabelValues("total").Observe(0.05)
	notFinal.WithLabelValues("prepared").Set(3)
	notFinal.WithLabelValues("active").Set(1)
	now = now.Add(5 * time.Second)
	s.Sample()

	got := s.Samples()
	require.Len(t, got, 1)
	sm := got[0]
	assert.InDelta(t, 10, sm.Commits, 1e-9)
	assert.InDelta(t, 2, sm.Aborts, 1e-9)
	assert.InDelta(t, 2, sm.AbortsBy["abortable"], 1e-9)
	assert.InDelta(t, 1, sm.InDoubt, 1e-9)
	assert.Greater(t, sm.LatencyP50, 0.001)
	assert.Less(t, sm.LatencyP50, 0.01, "the 0.5 s observation came before the interval")
	assert.Greater(t, sm.LatencyP99, 0.001)
	assert.InDelta(t, 0.01, sm.LatencyP99, 1e-9, "the 99th of 100 is the last in the 10 ms bucket")
	assert.InDelta(t, 4, sm.NotFinal, 1e-9)
	assert.True(t, math.IsNaN(sm.KafkaLeased), "no Kafka pool exported")

	// An interval without transactions has no latency; the ring keeps the last Window.
	for range 5 {
		now = now.Add(5 * time.Second)
		s.Sample()
	}
	got = s.Samples()
	require.Len(t, got, 3)
	assert.True(t, math.IsNaN(got[2].LatencyP50))
	assert.Zero(t, got[2].Commits)
	assert.True(t, got[0].At.Before(got[1].At) && got[1].At.Before(got[2].At), "oldest first")
}

// TestStartStopsWithItsContext: the loop takes a reading at once and ends when Start's ctx
// is done.
func TestStartStopsWithItsContext(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := New(reg, Options{Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	cancel()
	s.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.NotNil(t, s.last, "the first reading was taken at once")
}
