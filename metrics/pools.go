package metrics

import (
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// ConnPools lists the PostgreSQL connection pools by database name (the log is "log"), read at
// every scrape.
type ConnPools func() map[string]*pgxpool.Pool

// WatchConnPools exports the connection pools' use at every scrape.
func (m *Metrics) WatchConnPools(pools ConnPools) {
	m.register(&connCollector{pools: pools})
}

var (
	dbConnsDesc = prometheus.NewDesc(Namespace+"_db_connections",
		"PostgreSQL connections of this process's pools, by database (log: the coordinator log) and state: acquired (a transaction or a query holds it), idle.",
		[]string{"database", "state"}, nil)
	dbConnsMaxDesc = prometheus.NewDesc(Namespace+"_db_connections_max",
		"The most connections a pool opens (COORDINATOR_DB_MAX_CONNS), by database: acquired at this bound, requests wait for a connection.",
		[]string{"database"}, nil)
)

type connCollector struct{ pools ConnPools }

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- dbConnsDesc
	ch <- dbConnsMaxDesc
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	pools := c.pools()
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st := pools[n].Stat()
		ch <- prometheus.MustNewConstMetric(dbConnsDesc, prometheus.GaugeValue, float64(st.AcquiredConns()), n, "acquired")
		ch <- prometheus.MustNewConstMetric(dbConnsDesc, prometheus.GaugeValue, float64(st.IdleConns()), n, "idle")
		ch <- prometheus.MustNewConstMetric(dbConnsMaxDesc, prometheus.GaugeValue, float64(st.MaxConns()), n)
	}
}

// WatchInstanceLock exports whether this instance holds its instance lock (held reports it,
// recovery.Ownership): without it the instance starts no transaction and is not ready.
func (m *Metrics) WatchInstanceLock(held func() bool) {
	m.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "instance_lock_held",
		Help: "1 when this instance holds its instance lock (I8); 0: it lost the lock's session and starts no transaction (not ready) until it has claimed the lock again.",
	}, func() float64 {
		if held() {
			return 1
		}
		return 0
	}))
}
