package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kpgtx/coordinator/retention"
	"github.com/kpgtx/coordinator/txlog"
)

// RetentionStats is what the retention collector reads (retention.Service): its counters and
// the log's size, sampled at each of its passes (a scrape reads no table).
type RetentionStats interface {
	Retention() time.Duration
	Totals() retention.Totals
	LastSize() (txlog.Size, bool)
}

// WatchRetention exports the log's size and the retention's progress at every scrape.
func (m *Metrics) WatchRetention(r RetentionStats) {
	m.register(&retentionCollector{r: r})
}

var (
	logRowsDesc = prometheus.NewDesc(Namespace+"_log_rows",
		"Rows of the coordinator log by table (transactions, events): PostgreSQL's estimate (pg_class.reltuples), sampled at each retention pass.",
		[]string{"table"}, nil)
	logBytesDesc = prometheus.NewDesc(Namespace+"_log_bytes",
		"Disk space of the coordinator log's tables with their indexes (pg_total_relation_size), sampled at each retention pass.",
		nil, nil)
	retentionSecondsDesc = prometheus.NewDesc(Namespace+"_retention_seconds",
		"COORDINATOR_RETENTION: committed and aborted rows whose last change is older are removed; 0 keeps everything.",
		nil, nil)
	oldestFinalDesc = prometheus.NewDesc(Namespace+"_log_oldest_final_age_seconds",
		"Age (database time, at the last retention pass) of the oldest committed or aborted row's creation; 0 when none. Well above the retention: the retention falls behind, or rows are kept for a participant's reference (kpgtx_retention_kept_total).",
		nil, nil)
	retentionLagDesc = prometheus.NewDesc(Namespace+"_retention_lag_seconds",
		"How far the oldest final row is past the retention (its age minus COORDINATOR_RETENTION, at least 0; 0 when everything is kept).",
		nil, nil)
	retentionRemovedDesc = prometheus.NewDesc(Namespace+"_retention_removed_total",
		"Final rows the retention removed from the log, by table (transactions, events).",
		[]string{"table"}, nil)
	retentionKeptDesc = prometheus.NewDesc(Namespace+"_retention_kept_total",
		"Expired rows the retention kept because a participant still referenced them (a marker, a prepared gid, a Kafka transaction still holding its records open or a partition that did not answer: R2); they are looked at again at the next pass.",
		nil, nil)
	retentionPassesDesc = prometheus.NewDesc(Namespace+"_retention_passes_total",
		"Retention passes.", nil, nil)
	retentionFailuresDesc = prometheus.NewDesc(Namespace+"_retention_pass_failures_total",
		"Retention passes that ended with an error (the next pass starts again from the oldest rows).", nil, nil)
)

type retentionCollector struct{ r RetentionStats }

func (c *retentionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{logRowsDesc, logBytesDesc, retentionSecondsDesc, oldestFinalDesc,
		retentionLagDesc, retentionRemovedDesc, retentionKeptDesc, retentionPassesDesc, retentionFailuresDesc} {
		ch <- d
	}
}

func (c *retentionCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	t := c.r.Totals()
	counter(retentionRemovedDesc, t.Removed, "transactions")
	counter(retentionRemovedDesc, t.Events, "events")
	counter(retentionKeptDesc, t.Kept)
	counter(retentionPassesDesc, t.Passes)
	counter(retentionFailuresDesc, t.Failures)
	keep := c.r.Retention()
	gauge(retentionSecondsDesc, keep.Seconds())
	size, ok := c.r.LastSize()
	if !ok {
		return // no sample yet
	}
	gauge(logRowsDesc, float64(size.Rows), "transactions")
	gauge(logRowsDesc, float64(size.Events), "events")
	gauge(logBytesDesc, float64(size.Bytes))
	var age float64
	if !size.OldestFinal.IsZero() {
		age = max(size.Now.Sub(size.OldestFinal).Seconds(), 0)
	}
	gauge(oldestFinalDesc, age)
	lag := 0.0
	if keep > 0 {
		lag = max(age-keep.Seconds(), 0)
	}
	gauge(retentionLagDesc, lag)
}
