package history

// The metric families the samples are made of (metrics/): a test checks each against the
// registry's descriptors, as it checks the alert rules and the dashboard.
const (
	MetricTransactions     = "kpgtx_transactions_total"
	MetricPhaseDuration    = "kpgtx_phase_duration_seconds"
	MetricInDoubt          = "kpgtx_in_doubt_transactions"
	MetricInDoubtAge       = "kpgtx_in_doubt_oldest_age_seconds"
	MetricHeuristic        = "kpgtx_heuristic_transactions"
	MetricRecoveryPasses   = "kpgtx_recovery_passes_total"
	MetricRecoveryResolved = "kpgtx_recovery_resolved_total"
	MetricRecoveryFailures = "kpgtx_recovery_pass_failures_total"
	MetricKafkaIDs         = "kpgtx_kafka_pool_transactional_ids"
	MetricKafkaSize        = "kpgtx_kafka_pool_size"
	MetricDBConnections    = "kpgtx_db_connections"
	MetricDBConnectionsMax = "kpgtx_db_connections_max"
)

// Metrics lists them.
var Metrics = []string{MetricTransactions, MetricPhaseDuration, MetricInDoubt, MetricInDoubtAge,
	MetricHeuristic, MetricRecoveryPasses, MetricRecoveryResolved, MetricRecoveryFailures,
	MetricKafkaIDs, MetricKafkaSize, MetricDBConnections, MetricDBConnectionsMax}
