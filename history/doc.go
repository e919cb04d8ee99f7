// Package history keeps a short, in-memory history of the coordinator's own metrics for the
// console's overview page (GET /v1/history): every Interval (5 s by default) the sampler
// gathers the service's Prometheus registry and keeps, for the last Window (one hour), the
// rates of the counters between two samples (commits, aborts by class, transactions left in
// doubt, heuristic outcomes, recovery passes, resolutions and failures), the p50 and p99 of the
// requests' total latency over the interval (from the histogram's buckets), and the gauges as
// read (the log's transactions not final and the oldest age, the Kafka pool's ids, the
// database connections).
//
// The history belongs to one process: it starts empty at every start and says nothing about
// other instances (Prometheus, with deploy/grafana's dashboard, keeps the long history of
// all of them). It reads only the registry, so it shows exactly what /metrics exports.
package history
