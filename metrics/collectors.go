package metrics

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/recovery"
)

// PoolUsage is what the pool collector reads (kafkatxn.Pool).
type PoolUsage interface {
	Usage() (free, leased, quarantined int)
}

// WatchPool exports the transactional-id pool's usage at every scrape.
func (m *Metrics) WatchPool(p PoolUsage, size int) {
	m.register(&poolCollector{pool: p, size: float64(size)})
}

var (
	poolIDsDesc = prometheus.NewDesc(Namespace+"_kafka_pool_transactional_ids",
		"Transactional ids of this instance's pool by status: free (ready), leased (a request holds it), quarantined (its transaction is in doubt; withheld until recovery resolves it), hanging (held: a transaction of its hangs on a partition until it is repaired).",
		[]string{"status"}, nil)
	poolSizeDesc = prometheus.NewDesc(Namespace+"_kafka_pool_size",
		"Configured transactional ids (KAFKA_POOL_SIZE): the most concurrent Kafka transactions.", nil, nil)
)

// HangingPool is what the pool collector also reads when the pool offers it (kafkatxn.Pool):
// ids held for hanging transactions, whether the pool runs low, repairs.
type HangingPool interface {
	Detail() kafkatxn.PoolUsage
	HangingTransactions() []kafkatxn.Hanging
	RepairedTotal() int64
}

var (
	poolLowDesc = prometheus.NewDesc(Namespace+"_kafka_pool_low",
		"1 when fewer than a quarter of the pool's transactional ids can serve (free or leased): most are quarantined or held for hanging transactions. The pool heals as recovery resolves and repairs them.",
		nil, nil)
	hangingDesc = prometheus.NewDesc(Namespace+"_kafka_hanging_transactions",
		"Transactions of this pool's ids left open on a partition while Kafka's transaction coordinator completed them (a broker skipped the marker, KAFKA-20734), by status: found, waiting (the log's decision is pending), cannot_repair (an operator must look).",
		[]string{"status"}, nil)
	hangingRepairedDesc = prometheus.NewDesc(Namespace+"_kafka_hanging_repaired_total",
		"Hanging transactions repaired by writing the marker the broker skipped, following the coordinator log's decision.",
		nil, nil)
)

type poolCollector struct {
	pool PoolUsage
	size float64
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolIDsDesc
	ch <- poolSizeDesc
	if _, ok := c.pool.(HangingPool); ok {
		ch <- poolLowDesc
		ch <- hangingDesc
		ch <- hangingRepairedDesc
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	hp, ok := c.pool.(HangingPool)
	if !ok {
		free, leased, quarantined := c.pool.Usage()
		gauge(poolIDsDesc, float64(free), "free")
		gauge(poolIDsDesc, float64(leased), "leased")
		gauge(poolIDsDesc, float64(quarantined), "quarantined")
		gauge(poolSizeDesc, c.size)
		return
	}
	u := hp.Detail()
	gauge(poolIDsDesc, float64(u.Free), "free")
	gauge(poolIDsDesc, float64(u.Leased), "leased")
	gauge(poolIDsDesc, float64(u.Quarantined), "quarantined")
	gauge(poolIDsDesc, float64(u.Hanging), "hanging")
	gauge(poolSizeDesc, c.size)
	low := 0.0
	if u.Low {
		low = 1
	}
	gauge(poolLowDesc, low)
	byStatus := map[string]float64{kafkatxn.HangingFound: 0, kafkatxn.HangingWaiting: 0, kafkatxn.HangingCannotRepair: 0}
	for _, h := range hp.HangingTransactions() {
		byStatus[h.Status]++
	}
	for st, n := range byStatus {
		gauge(hangingDesc, n, st)
	}
	ch <- prometheus.MustNewConstMetric(hangingRepairedDesc, prometheus.CounterValue, float64(hp.RepairedTotal()))
}

// RecoveryStats is what the recovery collector reads (recovery.Loop).
type RecoveryStats interface {
	Passes() int64
	Failures() int64
	Totals() recovery.Stats
}

// WatchRecovery exports the recovery loop's counters at every scrape.
func (m *Metrics) WatchRecovery(l RecoveryStats) {
	m.register(&recoveryCollector{loop: l})
}

func counterDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(Namespace+"_recovery_"+name, help, nil, nil)
}

var (
	recPassesDesc   = counterDesc("passes_total", "Recovery passes (startup, periodic, on demand).")
	recFailuresDesc = counterDesc("pass_failures_total", "Recovery passes that ended with an error (the loop retries).")
	recResolvedDesc = counterDesc("resolved_total", "Transactions recovery brought to a final state.")
	recAttemptsDesc = counterDesc("attempt_failures_total", "Resolution attempts that failed and were rescheduled after backoff.")
	recOrphansDesc  = counterDesc("orphans_total", "Orphan prepared transactions (no log row) rolled back.")
	recMarkersDesc  = counterDesc("markers_deleted_total", "Marker rows deleted once they proved nothing any more.")
	recTakeoverDesc = counterDesc("takeovers_total", "Dead instances whose in-doubt transactions this instance took over.")
	// Not under _recovery_: it counts what callers left undecided, which recovery only ends.
	waitingDeadlineDesc = prometheus.NewDesc(Namespace+"_waiting_deadline_aborts_total",
		"Transactions waiting for their caller's decision that reached decide_by without a commit or rollback and were aborted by this instance's recovery passes (presumed abort). A caller that prepares and never decides, or decides too late.",
		nil, nil)
)

type recoveryCollector struct{ loop RecoveryStats }

func (c *recoveryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{recPassesDesc, recFailuresDesc, recResolvedDesc, recAttemptsDesc,
		recOrphansDesc, recMarkersDesc, recTakeoverDesc, waitingDeadlineDesc} {
		ch <- d
	}
}

func (c *recoveryCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.loop.Totals()
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	counter(recPassesDesc, float64(c.loop.Passes()))
	counter(recFailuresDesc, float64(c.loop.Failures()))
	counter(recResolvedDesc, float64(t.Resolved))
	counter(recAttemptsDesc, float64(t.Failed))
	counter(recOrphansDesc, float64(t.Orphans))
	counter(recMarkersDesc, float64(t.Markers))
	counter(recTakeoverDesc, float64(t.TakenOver))
	counter(waitingDeadlineDesc, float64(t.Deadlines))
}

// Querier runs the in-doubt query (the log's pgxpool.Pool).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// WatchLog exports, at every scrape, the log's unresolved transactions by state and the age of
// the oldest, from one query in database time, bounded by timeout.
func (m *Metrics) WatchLog(q Querier, timeout time.Duration) {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	m.register(&logCollector{q: q, timeout: timeout})
}

// inDoubtSQL counts the rows that are not final (active, prepared, committing) and those that
// wait for an operator (heuristic, heuristic_mixed), with the age of the oldest of each state,
// in database time. Both indexes of the table cover the filter (the partial in-doubt index and
// (state, created_at)), so it reads only those rows. A waiting row (its caller decides it
// until decide_by) is not in doubt and not counted here: waitingSQL counts it.
const inDoubtSQL = `SELECT state, count(*), EXTRACT(EPOCH FROM now() - min(created_at))::float8
FROM coordinator_transactions
WHERE state IN ('active', 'aborting', 'prepared', 'committing', 'heuristic', 'heuristic_mixed')
GROUP BY state`

// waitingSQL counts the rows waiting for their caller's decision, of every instance, and the
// time from now to the earliest decide_by (negative once reached), in database time; the
// partial index on decide_by WHERE state = 'waiting' covers it.
const waitingSQL = `SELECT count(*), COALESCE(EXTRACT(EPOCH FROM min(decide_by) - now())::float8, 0)
FROM coordinator_transactions
WHERE state = 'waiting'`

var (
	waitingDesc = prometheus.NewDesc(Namespace+"_waiting_transactions",
		"Transactions waiting for their caller's commit or rollback until their decide_by (every instance sharing the log: aggregate with max, not sum). Not in doubt; each holds its prepared SQL transactions and its Kafka transaction open.",
		nil, nil)
	waitingDeadlineInDesc = prometheus.NewDesc(Namespace+"_waiting_oldest_deadline_seconds",
		"Seconds (database time) from now to the earliest decide_by of a waiting transaction, 0 when none waits; negative once reached: the next recovery pass aborts it (presumed abort).",
		nil, nil)
	inDoubtDesc = prometheus.NewDesc(Namespace+"_in_doubt_transactions",
		"Transactions in the log that are not final, by state (every instance sharing the log: aggregate with max, not sum). An active row is either in flight or left by a crash; recovery resolves the latter.",
		[]string{"state"}, nil)
	inDoubtAgeDesc = prometheus.NewDesc(Namespace+"_in_doubt_oldest_age_seconds",
		"Age (database time) of the oldest transaction in the log that is not final, 0 when none. Above the largest request budget plus a few recovery intervals, recovery is not getting through.",
		nil, nil)
	heuristicDesc = prometheus.NewDesc(Namespace+"_heuristic_transactions",
		"Transactions in the log that wait for an operator, by state (heuristic: undecidable; heuristic_mixed: a participant was resolved by hand against the decision).",
		[]string{"state"}, nil)
	logUpDesc = prometheus.NewDesc(Namespace+"_log_up",
		"1 when this scrape's query of the coordinator log succeeded (the in-doubt gauges are absent otherwise).",
		nil, nil)
)

type logCollector struct {
	q       Querier
	timeout time.Duration
}

func (c *logCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inDoubtDesc
	ch <- inDoubtAgeDesc
	ch <- heuristicDesc
	ch <- logUpDesc
	ch <- waitingDesc
	ch <- waitingDeadlineInDesc
}

func (c *logCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]float64{"active": 0, "prepared": 0, "committing": 0, "heuristic": 0, "heuristic_mixed": 0}
	oldest, err := c.query(counts)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(logUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(logUpDesc, prometheus.GaugeValue, 1)
	for _, s := range []string{"active", "prepared", "committing"} {
		ch <- prometheus.MustNewConstMetric(inDoubtDesc, prometheus.GaugeValue, counts[s], s)
	}
	for _, s := range []string{"heuristic", "heuristic_mixed"} {
		ch <- prometheus.MustNewConstMetric(heuristicDesc, prometheus.GaugeValue, counts[s], s)
	}
	ch <- prometheus.MustNewConstMetric(inDoubtAgeDesc, prometheus.GaugeValue, oldest)
	if n, in, err := c.waiting(); err == nil {
		ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, n)
		ch <- prometheus.MustNewConstMetric(waitingDeadlineInDesc, prometheus.GaugeValue, in)
	}
}

// waiting returns the waiting rows and the seconds to the earliest decide_by (0: none).
func (c *logCollector) waiting() (n, in float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rows, err := c.q.Query(ctx, waitingSQL)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	var count int64
	for rows.Next() {
		if err := rows.Scan(&count, &in); err != nil {
			return 0, 0, err
		}
	}
	return float64(count), in, rows.Err()
}

// WatchWaitingMax exports this instance's bound on transactions waiting for their callers
// (COORDINATOR_MAX_WAITING); a request over it is refused with 503.
func (m *Metrics) WatchWaitingMax(max int) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: Namespace + "_waiting_max",
		Help: "This instance's bound on transactions waiting for their caller's decision (COORDINATOR_MAX_WAITING); a request that would wait beyond it is refused with 503."})
	g.Set(float64(max))
	m.register(g)
}

// query fills counts by state and returns the oldest age among the non-final states.
func (c *logCollector) query(counts map[string]float64) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rows, err := c.q.Query(ctx, inDoubtSQL)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var oldest float64
	for rows.Next() {
		var state string
		var n int64
		var age float64
		if err := rows.Scan(&state, &n, &age); err != nil {
			return 0, err
		}
		counts[state] = float64(n)
		if state != "heuristic" && state != "heuristic_mixed" && age > oldest {
			oldest = age
		}
	}
	return oldest, rows.Err()
}
