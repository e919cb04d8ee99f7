// Package metrics holds the coordinator's Prometheus instruments, served at /metrics.
//
// The service creates one Metrics (a registry of its own, never the global default) and hands
// it down: to coord as its coord.Observer (phase timings and outcomes; coord does not import
// Prometheus), to txlog as its txlog.Observer (log writes and group commits), to the API (HTTP
// requests, and the /metrics handler), and it registers collectors that read the Kafka pool,
// the recovery loop and the log at scrape time. Instruments on a hot path are resolved once,
// so an observation does not allocate.
//
// # Metrics
//
// Transactions (this process):
//
//	kpgtx_transactions_total{state,class}         counter  outcomes: committed, aborted, heuristic_mixed, or the
//	                                                        state left to recovery (active, prepared, committing:
//	                                                        answered 202); class: none, retriable, abortable,
//	                                                        fenced, invalid_configuration, internal
//	kpgtx_phase_duration_seconds{phase}           histogram log_begin, phase1, sql (per database), kafka,
//	                                                        pool_acquire, log_prepared, log_committing, endtxn,
//	                                                        phase2, abort, log_final, total; once per shared
//	                                                        Kafka transaction: slot_wait (its leader waiting
//	                                                        for KAFKA_SHARED_CONCURRENCY), await_begins (its
//	                                                        members' active rows)
//
// The log (every instance sharing it sees the same values; aggregate with max):
//
//	kpgtx_in_doubt_transactions{state}            gauge    rows not final: active, prepared, committing (not
//	                                                        waiting: a row waiting for its caller is not in doubt)
//	kpgtx_in_doubt_oldest_age_seconds             gauge    age of the oldest of them, in database time
//	kpgtx_heuristic_transactions{state}           gauge    rows waiting for an operator: heuristic, heuristic_mixed
//	kpgtx_waiting_transactions                    gauge    rows waiting for their caller's commit or rollback
//	kpgtx_waiting_oldest_deadline_seconds         gauge    seconds from now to the earliest decide_by: negative
//	                                                        once reached (recovery aborts it), 0 when none waits
//	kpgtx_log_up                                  gauge    1 when the scrape's query of the log succeeded
//	kpgtx_log_write_duration_seconds              histogram one state write as its writer waited for it
//	kpgtx_log_batch_size                          histogram writes per group commit
//	kpgtx_log_batch_duration_seconds              histogram database time of one group commit
//
// Kafka pool and recovery:
//
//	kpgtx_kafka_pool_transactional_ids{status}    gauge    free, leased, quarantined, hanging
//	kpgtx_kafka_pool_size                         gauge    KAFKA_POOL_SIZE
//	kpgtx_kafka_pool_low                          gauge    1: fewer than a quarter of the ids can serve
//	kpgtx_kafka_hanging_transactions{status}      gauge    found, waiting, cannot_repair
//	kpgtx_kafka_hanging_repaired_total            counter  hanging transactions repaired
//	kpgtx_recovery_passes_total                   counter  passes (startup, periodic, on demand)
//	kpgtx_recovery_pass_failures_total            counter  passes that ended with an error
//	kpgtx_recovery_resolved_total                 counter  transactions brought to a final state
//	kpgtx_recovery_attempt_failures_total         counter  attempts rescheduled after backoff
//	kpgtx_recovery_orphans_total                  counter  orphan prepared transactions rolled back
//	kpgtx_recovery_markers_deleted_total          counter  marker rows deleted
//	kpgtx_recovery_takeovers_total                counter  dead instances taken over
//
// Transactions their callers decide (this instance):
//
//	kpgtx_waiting_max                             gauge    COORDINATOR_MAX_WAITING: this instance's bound on
//	                                                        waiting transactions (over it a request is a 503)
//	kpgtx_waiting_deadline_aborts_total           counter  waiting transactions that reached decide_by without a
//	                                                        decision, aborted by this instance's recovery passes
//
// Connections and the instance lock:
//
//	kpgtx_db_connections{database,state}          gauge    acquired, idle; database "log" is the log's pool
//	kpgtx_db_connections_max{database}            gauge    COORDINATOR_DB_MAX_CONNS
//	kpgtx_instance_lock_held                      gauge    1 while this instance holds its instance lock (I8)
//
// HTTP:
//
//	kpgtx_http_requests_total{method,route,code}  counter  route is the router's pattern ("unmatched": no
//	                                                        route, or refused before routing, e.g. 401)
//	kpgtx_http_request_duration_seconds{method,route} histogram
//	kpgtx_http_requests_in_flight                 gauge
//
// Plus the Go runtime (go_*), process (process_*) and go_build_info collectors.
//
// The alert rules shipped in deploy/prometheus/alerts.yaml and the Grafana dashboard in
// deploy/grafana name only these (test/alerts_test.go checks it, with Families); what to do
// when one fires is in docs/runbook.md. The console's overview (history, GET /v1/history)
// samples the same registry.
package metrics
