package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// Namespace starts every metric name of the coordinator.
const Namespace = "kpgtx"

// Metrics holds the coordinator's instruments on a registry of its own (never the global
// default one, so several coordinators in one process, as in the tests, do not collide). It
// implements coord.Observer and txlog.Observer; the instruments a hot path touches are resolved
// up front, so an observation allocates nothing.
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler

	phases   [coord.NumPhases]prometheus.Observer
	outcomes *prometheus.CounterVec
	breaches prometheus.Counter
	outMu    sync.RWMutex
	outCache map[outcomeKey]prometheus.Counter

	logWrite     prometheus.Observer
	logBatchSize prometheus.Observer
	logBatchTime prometheus.Observer
	kafkaBatch   prometheus.Histogram
	sqlShared    prometheus.Histogram

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	httpInFlight prometheus.Gauge

	collMu     sync.Mutex
	collectors []prometheus.Collector // everything registered (Families)
}

type outcomeKey struct {
	state txntype.State
	class txntype.Class
}

var (
	_ coord.Observer = (*Metrics)(nil)
	_ txlog.Observer = (*Metrics)(nil)
)

// durationBuckets span 0.5 ms to about 33 s, doubling: a local fsync to a request's budget.
var durationBuckets = prometheus.ExponentialBuckets(0.0005, 2, 17)

// New returns the instruments on a new registry, with the Go runtime, process and build-info
// collectors. The dependencies' collectors are added with WatchPool, WatchRecovery, WatchLog.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg, outCache: map[outcomeKey]prometheus.Counter{}}
	m.register(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
	)

	phase := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "phase_duration_seconds",
		Help:    "Duration of one phase of a global transaction run by this process (phase: log_begin, phase1, sql (per database), kafka, pool_acquire, log_prepared, log_committing, endtxn, phase2, abort, log_final, total; per shared Kafka transaction: slot_wait, await_begins).",
		Buckets: durationBuckets,
	}, []string{"phase"})
	for p := coord.Phase(0); p < coord.NumPhases; p++ {
		m.phases[p] = phase.WithLabelValues(p.String())
	}
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "transactions_total",
		Help: "Global transactions run by this process, by outcome: the final state, or the state a transaction was left in for recovery (answered 202); class is the error class (none, retriable, abortable, fenced, invalid_configuration, internal).",
	}, []string{"state", "class"})
	for _, k := range []outcomeKey{
		{txntype.StateCommitted, coord.ClassNone},
		{txntype.StateAborted, txntype.ClassAbortable},
		{txntype.StateAborted, txntype.ClassRetriable},
	} {
		m.outCache[k] = m.outcomes.WithLabelValues(string(k.state), string(k.class))
	}

	m.breaches = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "sql_confinement_breaches_total",
		Help: "Client statements that ended or left the coordinator's transaction although validation accepted them (ALERT: each such transaction ends heuristic and needs an operator).",
	})

	logWrite := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "log_write_duration_seconds",
		Help:    "Duration of one coordinator-log state write as its writer waited for it (group-commit queueing included).",
		Buckets: durationBuckets,
	})
	logBatchSize := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "log_batch_size",
		Help:    "State writes carried by one group commit of the coordinator log.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 9),
	})
	logBatchTime := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "log_batch_duration_seconds",
		Help:    "Database time of one group commit of the coordinator log.",
		Buckets: durationBuckets,
	})
	m.logWrite, m.logBatchSize, m.logBatchTime = logWrite, logBatchSize, logBatchTime
	m.kafkaBatch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "kafka_shared_transaction_members",
		Help:    "Requests carried by one shared Kafka transaction (one EndTxn for all of them).",
		Buckets: prometheus.ExponentialBuckets(2, 2, 8),
	})
	m.sqlShared = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "sql_shared_transaction_members",
		Help:    "Requests whose work one shared PostgreSQL transaction held when it was prepared (one PREPARE and one COMMIT PREPARED for all of them).",
		Buckets: prometheus.ExponentialBuckets(2, 2, 8),
	})

	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "http_requests_total",
		Help: "HTTP requests answered, by method, route pattern and status code.",
	}, []string{"method", "route", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "http_request_duration_seconds",
		Help:    "Duration of HTTP requests, by method and route pattern.",
		Buckets: durationBuckets,
	}, []string{"method", "route"})
	m.httpInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "http_requests_in_flight",
		Help: "HTTP requests being served.",
	})

	m.register(phase, m.outcomes, m.breaches, logWrite, logBatchSize, logBatchTime, m.kafkaBatch, m.sqlShared,
		m.httpRequests, m.httpDuration, m.httpInFlight)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:            reg, // promhttp_metric_handler_errors_total
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
	return m
}

// Registry is the registry the instruments are on (to add more, or to gather in tests).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats (/metrics).
func (m *Metrics) Handler() http.Handler { return m.handler }

// ObservePhase implements coord.Observer.
func (m *Metrics) ObservePhase(p coord.Phase, d time.Duration) {
	if p < coord.NumPhases {
		m.phases[p].Observe(d.Seconds())
	}
}

// ObserveOutcome implements coord.Observer.
func (m *Metrics) ObserveOutcome(s txntype.State, class txntype.Class) {
	if class == "" {
		class = coord.ClassNone
	}
	k := outcomeKey{s, class}
	m.outMu.RLock()
	c, ok := m.outCache[k]
	m.outMu.RUnlock()
	if !ok {
		c = m.outcomes.WithLabelValues(string(s), string(class))
		m.outMu.Lock()
		m.outCache[k] = c
		m.outMu.Unlock()
	}
	c.Inc()
}

// ObserveConfinementBreach implements coord.Observer.
func (m *Metrics) ObserveConfinementBreach() { m.breaches.Inc() }

// ObserveKafkaBatch implements coord.Observer.
func (m *Metrics) ObserveKafkaBatch(members int) { m.kafkaBatch.Observe(float64(members)) }

// ObserveSQLShared implements coord.Observer.
func (m *Metrics) ObserveSQLShared(members int) { m.sqlShared.Observe(float64(members)) }

// ObserveLogWrite implements txlog.Observer.
func (m *Metrics) ObserveLogWrite(d time.Duration) { m.logWrite.Observe(d.Seconds()) }

// ObserveLogBatch implements txlog.Observer.
func (m *Metrics) ObserveLogBatch(writes int, d time.Duration) {
	m.logBatchSize.Observe(float64(writes))
	m.logBatchTime.Observe(d.Seconds())
}

// HTTPStarted and HTTPDone count the requests being served.
func (m *Metrics) HTTPStarted() { m.httpInFlight.Inc() }

// HTTPDone is the counterpart of HTTPStarted.
func (m *Metrics) HTTPDone() { m.httpInFlight.Dec() }

// ObserveHTTP records one answered request. route is the router's pattern
// ("/v1/transactions/{id}"), never the raw path, so the label's values stay few.
func (m *Metrics) ObserveHTTP(method, route string, code int, d time.Duration) {
	method = knownMethod(method)
	if route == "" {
		route = "unmatched"
	}
	m.httpRequests.WithLabelValues(method, route, strconv.Itoa(code)).Inc()
	m.httpDuration.WithLabelValues(method, route).Observe(d.Seconds())
}

// knownMethod keeps the method label to the standard methods.
func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}
