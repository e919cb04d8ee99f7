// Package retention keeps the coordinator log from growing forever: final rows (committed or
// aborted) whose last change is older than the retention (COORDINATOR_RETENTION, 7 days by
// default, Kafka's transactional.id.expiration.ms; 0 keeps everything) are removed with their
// events, in the background, in batches with a pause between them (a bounded rate).
//
// # Rules (R1–R3)
//
// A row is removed only when nothing needs it any more:
//
//   - it is committed or aborted: never a row in doubt (active, aborting, prepared, committing),
//     nor a heuristic one (an operator's evidence);
//   - no shared transaction's registration names it (S2: the members' states decide the shared
//     transaction; txlog.Expired and txlog.Remove check it);
//   - no participant database holds a marker or a prepared transaction of its gids (a marker
//     would never be swept; a prepared gid without its row is an orphan and would be rolled back,
//     I6);
//   - Kafka holds none of its records open (R2): the partitions its records went to are asked,
//     at removal, whether a transaction of its producer is open there from at or before its
//     highest offset (a hanging transaction whose repair reads the row's decision,
//     recovery/hanging.go). A partition that does not answer keeps its rows; without Kafka,
//     rows naming records are kept.
//
// The last check happens in the DELETE itself, under the row's lock, for what the log holds
// (state, age, registrations): a row reset for a retry meanwhile stays. The participants'
// references cannot appear for a final row meanwhile: only a transaction of the same gid makes
// them, and that needs the row to be new (Begin) or reset; and a final row's producer writes no
// more of its records. The DELETE records the highest offset it removed per transactional id and
// partition (R3, coordinator_pruned), which the hanging repair reads (H2).
//
// # State Model
//
// A candidate is final and older than the retention; it is kept while a participant references
// it and removed once none does. Nothing is kept in memory between passes: every pass asks the
// log, the databases and Kafka again, so the service behaves the same at startup, after failed
// passes, and on every instance (each may remove any row).
//
// # After Removal
//
// The gid is derived from the request id (coord.Coordinator.GID): a request that reuses an id
// after its row was removed is a new transaction, run again. Idempotency holds within the
// retention.
//
// # Failure Handling
//
// Any error of the log or of a database ends the pass (nothing is removed on a guess: a database
// that cannot be asked keeps the batch's rows); the next pass starts from the oldest rows again.
// A Kafka partition that does not answer keeps only the rows that wrote to it, and the pass goes
// on. Every instance runs it, over every row: two instances may remove the same rows at once,
// which is safe: each removal re-checks its conditions, and deleting a deleted row changes
// nothing.
package retention
