package api

import (
	"math"
	"net/http"

	"github.com/kpgtx/coordinator/history"
	"github.com/kpgtx/coordinator/txntype"
)

// GET /v1/history: the in-memory history of this process's metrics for the console's overview
// (history.Sampler), one column per series, oldest first: times[i] is the end of interval i (Unix
// seconds) and series[name][i] its value; null where the figure was not exported (no Kafka, the
// log's query failed) or, for the latencies, nothing ended in the interval.

type historyBody struct {
	Instance        string                `json:"instance"`
	IntervalSeconds float64               `json:"interval_seconds"`
	WindowSeconds   float64               `json:"window_seconds"`
	Times           []float64             `json:"times"`
	Series          map[string][]*float64 `json:"series"`
}

// abortClasses are the error classes the history has a series of (aborts_<class>_per_second);
// any other class counts in aborts_other_per_second.
var abortClasses = []txntype.Class{txntype.ClassAbortable, txntype.ClassRetriable, txntype.ClassFenced,
	txntype.ClassInvalidConfig, txntype.ClassInternal}

// historySeries are the series of GET /v1/history and how each is read from a sample.
var historySeries = []struct {
	name string
	of   func(history.Sample) float64
}{
	{"commits_per_second", func(s history.Sample) float64 { return s.Commits }},
	{"aborts_per_second", func(s history.Sample) float64 { return s.Aborts }},
	{"aborts_abortable_per_second", byClass(txntype.ClassAbortable)},
	{"aborts_retriable_per_second", byClass(txntype.ClassRetriable)},
	{"aborts_fenced_per_second", byClass(txntype.ClassFenced)},
	{"aborts_invalid_configuration_per_second", byClass(txntype.ClassInvalidConfig)},
	{"aborts_internal_per_second", byClass(txntype.ClassInternal)},
	{"aborts_other_per_second", func(s history.Sample) float64 {
		v := s.Aborts
		for _, c := range abortClasses {
			v -= s.AbortsBy[string(c)]
		}
		return math.Max(0, v)
	}},
	{"in_doubt_per_second", func(s history.Sample) float64 { return s.InDoubt }},
	{"heuristic_per_second", func(s history.Sample) float64 { return s.Heuristic }},
	{"latency_p50_seconds", func(s history.Sample) float64 { return s.LatencyP50 }},
	{"latency_p99_seconds", func(s history.Sample) float64 { return s.LatencyP99 }},
	{"not_final", func(s history.Sample) float64 { return s.NotFinal }},
	{"oldest_not_final_age_seconds", func(s history.Sample) float64 { return s.OldestAgeSec }},
	{"heuristic", func(s history.Sample) float64 { return s.HeuristicRows }},
	{"recovery_passes_per_second", func(s history.Sample) float64 { return s.RecoveryPasses }},
	{"recovery_resolved_per_second", func(s history.Sample) float64 { return s.RecoveryResolve }},
	{"recovery_failures_per_second", func(s history.Sample) float64 { return s.RecoveryFailed }},
	{"kafka_ids_size", func(s history.Sample) float64 { return s.KafkaSize }},
	{"kafka_ids_free", func(s history.Sample) float64 { return s.KafkaFree }},
	{"kafka_ids_leased", func(s history.Sample) float64 { return s.KafkaLeased }},
	{"kafka_ids_quarantined", func(s history.Sample) float64 { return s.KafkaQuarantined }},
	{"kafka_ids_hanging", func(s history.Sample) float64 { return s.KafkaHanging }},
	{"db_connections_acquired", func(s history.Sample) float64 { return s.DBAcquired }},
	{"db_connections_max", func(s history.Sample) float64 { return s.DBMax }},
}

func byClass(c txntype.Class) func(history.Sample) float64 {
	return func(s history.Sample) float64 { return s.AbortsBy[string(c)] }
}

// HistorySeries names the series of GET /v1/history (the spec's test reads it).
func HistorySeries() []string {
	out := make([]string, len(historySeries))
	for i, s := range historySeries {
		out[i] = s.name
	}
	return out
}

func (s *Server) history(w http.ResponseWriter, _ *http.Request) error {
	body := historyBody{Times: []float64{}, Series: map[string][]*float64{}}
	var samples []history.Sample
	if h := s.deps.History; h != nil {
		body.IntervalSeconds, body.WindowSeconds = h.Interval().Seconds(), h.Window().Seconds()
		samples = h.Samples()
	}
	if s.recovery != nil {
		body.Instance = s.recovery.Instance()
	}
	for _, sm := range samples {
		body.Times = append(body.Times, float64(sm.At.UnixMilli())/1000)
	}
	for _, sr := range historySeries {
		col := make([]*float64, len(samples))
		for i, sm := range samples {
			if v := sr.of(sm); !math.IsNaN(v) && !math.IsInf(v, 0) {
				col[i] = &v
			}
		}
		body.Series[sr.name] = col
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, body)
	return nil
}
