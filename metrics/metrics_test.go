package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/metrics"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/txntype"
)

type fakePool struct{ free, leased, quarantined int }

func (p fakePool) Usage() (int, int, int) { return p.free, p.leased, p.quarantined }

type fakeLoop struct{}

func (fakeLoop) Passes() int64          { return 7 }
func (fakeLoop) Failures() int64        { return 2 }
func (fakeLoop) Totals() recovery.Stats { return recovery.Stats{Resolved: 3, Orphans: 1, Deadlines: 2} }

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	b, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	return string(b)
}

func TestExposition(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.ObservePhase(coord.PhaseEndTxn, 3*time.Millisecond)
	m.ObserveOutcome(txntype.StateCommitted, coord.ClassNone)
	m.ObserveOutcome(txntype.StateAborted, txntype.ClassFenced)
	m.ObserveOutcome(txntype.StatePrepared, "") // left to recovery without a class
	m.ObserveLogWrite(time.Millisecond)
	m.ObserveLogBatch(4, time.Millisecond)
	m.ObserveHTTP("BREW", "", 404, time.Millisecond)
	m.WatchPool(fakePool{free: 5, leased: 2, quarantined: 1}, 8)
	m.WatchRecovery(fakeLoop{})
	m.WatchWaitingMax(6)

	out := scrape(t, m)
	for _, want := range []string{
		`kpgtx_phase_duration_seconds_count{phase="endtxn"} 1`,
		`kpgtx_phase_duration_seconds_count{phase="log_begin"} 0`, // every phase is exported from the start
		`kpgtx_transactions_total{class="none",state="committed"} 1`,
		`kpgtx_transactions_total{class="fenced",state="aborted"} 1`,
		`kpgtx_transactions_total{class="none",state="prepared"} 1`,
		`kpgtx_log_write_duration_seconds_count 1`,
		`kpgtx_log_batch_size_sum 4`,
		`kpgtx_http_requests_total{code="404",method="other",route="unmatched"} 1`,
		`kpgtx_kafka_pool_transactional_ids{status="free"} 5`,
		`kpgtx_kafka_pool_transactional_ids{status="leased"} 2`,
		`kpgtx_kafka_pool_transactional_ids{status="quarantined"} 1`,
		`kpgtx_kafka_pool_size 8`,
		`kpgtx_recovery_passes_total 7`,
		`kpgtx_recovery_pass_failures_total 2`,
		`kpgtx_recovery_resolved_total 3`,
		`kpgtx_recovery_orphans_total 1`,
		`kpgtx_waiting_deadline_aborts_total 2`,
		`kpgtx_waiting_max 6`,
		`go_goroutines `,
	} {
		assert.Contains(t, out, want)
	}
	assert.False(t, strings.Contains(out, "kpgtx_phase_duration_seconds_count{phase=\"unknown\"}"))
}

// TestWaitingFamilies: the waiting gauges are registered with the log's collector, whether or
// not the log answers a scrape.
func TestWaitingFamilies(t *testing.T) {
	m := metrics.New()
	m.WatchLog(nil, time.Second)
	m.WatchRecovery(fakeLoop{})
	m.WatchWaitingMax(8)
	fams := m.Families()
	for _, name := range []string{"kpgtx_waiting_transactions", "kpgtx_waiting_oldest_deadline_seconds",
		"kpgtx_waiting_max", "kpgtx_waiting_deadline_aborts_total", "kpgtx_in_doubt_transactions"} {
		assert.Contains(t, fams, name)
	}
}

// TestRegistriesAreSeparate: two services in one process (as in the tests) do not share series.
func TestRegistriesAreSeparate(t *testing.T) {
	t.Parallel()
	a, b := metrics.New(), metrics.New()
	a.ObserveOutcome(txntype.StateCommitted, coord.ClassNone)
	assert.Contains(t, scrape(t, a), `kpgtx_transactions_total{class="none",state="committed"} 1`)
	assert.Contains(t, scrape(t, b), `kpgtx_transactions_total{class="none",state="committed"} 0`)
}

// TestHotPathAllocs: the observations the protocol makes per transaction allocate nothing.
func TestHotPathAllocs(t *testing.T) {
	m := metrics.New()
	var o coord.Observer = m
	o.ObserveOutcome(txntype.StateAborted, txntype.ClassAbortable)
	allocs := testing.AllocsPerRun(1000, func() {
		o.ObservePhase(coord.PhaseSQL, time.Millisecond)
		o.ObserveOutcome(txntype.StateCommitted, coord.ClassNone)
		o.ObserveOutcome(txntype.StateAborted, txntype.ClassAbortable)
		m.ObserveLogWrite(time.Millisecond)
		m.ObserveLogBatch(3, time.Millisecond)
	})
	assert.Zero(t, allocs)
}

// TestFamiliesIncludeFamiliesWithoutSamples: a vector without children has no sample to
// gather, and still counts as registered.
func TestFamiliesIncludeFamiliesWithoutSamples(t *testing.T) {
	m := metrics.New()
	fams := m.Families()
	assert.Contains(t, fams, "kpgtx_transactions_total")
	assert.Contains(t, fams, "kpgtx_http_requests_total")
	assert.Contains(t, fams, "go_goroutines")
	gathered, err := m.Registry().Gather()
	require.NoError(t, err)
	for _, f := range gathered {
		assert.NotEqual(t, "kpgtx_http_requests_total", f.GetName(), "no request yet: no sample")
	}
}
