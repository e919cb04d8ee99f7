package metrics_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kpgtx/coordinator/metrics"
	"github.com/kpgtx/coordinator/retention"
	"github.com/kpgtx/coordinator/txlog"
)

type fakeRetention struct {
	keep    time.Duration
	size    txlog.Size
	sampled bool
}

func (f fakeRetention) Retention() time.Duration { return f.keep }
func (fakeRetention) Totals() retention.Totals {
	return retention.Totals{Passes: 4, Failures: 1, Removed: 2500, Events: 30, Kept: 2}
}
func (f fakeRetention) LastSize() (txlog.Size, bool) { return f.size, f.sampled }

// The log's size and the retention's progress: counters from the start, the size and the lag
// once a pass sampled them.
func TestRetentionExposition(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		r    fakeRetention
		want []string
		not  []string
	}{
		{name: "before the first pass", r: fakeRetention{keep: time.Hour},
			want: []string{`kpgtx_retention_removed_total{table="transactions"} 2500`, `kpgtx_retention_removed_total{table="events"} 30`,
				`kpgtx_retention_kept_total 2`, `kpgtx_retention_passes_total 4`, `kpgtx_retention_pass_failures_total 1`,
				`kpgtx_retention_seconds 3600`},
			not: []string{"kpgtx_log_rows", "kpgtx_log_bytes", "kpgtx_retention_lag_seconds"}},
		{name: "behind", r: fakeRetention{keep: time.Hour, sampled: true,
			size: txlog.Size{Rows: 1e6, Events: 10, Bytes: 5e8, OldestFinal: now.Add(-90 * time.Minute), Now: now}},
			want: []string{`kpgtx_log_rows{table="transactions"} 1e+06`, `kpgtx_log_rows{table="events"} 10`,
				`kpgtx_log_bytes 5e+08`, `kpgtx_log_oldest_final_age_seconds 5400`, `kpgtx_retention_lag_seconds 1800`}},
		{name: "keeping everything", r: fakeRetention{sampled: true,
			size: txlog.Size{OldestFinal: now.Add(-90 * time.Minute), Now: now}},
			want: []string{`kpgtx_retention_seconds 0`, `kpgtx_log_oldest_final_age_seconds 5400`, `kpgtx_retention_lag_seconds 0`}},
		{name: "no final row", r: fakeRetention{keep: time.Hour, sampled: true, size: txlog.Size{Now: now}},
			want: []string{`kpgtx_log_oldest_final_age_seconds 0`, `kpgtx_retention_lag_seconds 0`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := metrics.New()
			m.WatchRetention(c.r)
			out := scrape(t, m)
			for _, w := range c.want {
				assert.Contains(t, out, w+"\n")
			}
			for _, n := range c.not {
				assert.NotContains(t, out, n+"{")
				assert.NotContains(t, out, n+" ")
			}
		})
	}
}
