// Package retention keeps the coordinator log from growing forever: final rows (committed or
// aborted) whose last change is older than the retention (COORDINATOR_RETENTION, 7 days by
// default, Kafka's transactional.id.expiration.ms; 0 keeps everything) are removed with their
// events, in the background, in batches with a pause between them (a bounded rate).
//
// # Rules (R1)
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
//   - no hanging Kafka transaction of its producer is known (the repair reads the log's
//     decision for the records it holds, recovery/hanging.go). Only an instance knows the
//     hanging transactions on its ids, so each instance removes the rows it ran, and the rows
//     of dead instances (silent for longer than COORDINATOR_INSTANCE_LEASE).
//
// The last check happens in the DELETE itself, under the row's lock, for what the log holds
// (state, age, registrations): a row reset for a retry meanwhile stays. The participants'
// references cannot appear for a final row meanwhile: only a transaction of the same gid makes
// them, and that needs the row to be new (Begin) or reset.
//
// # After Removal
//
// The gid is derived from the request id (coord.Coordinator.GID): a request that reuses an id
// after its row was removed is a new transaction, run again. Idempotency holds within the
// retention.
//
// # Failure Handling
//
// Any error ends the pass (nothing is removed on a guess: a database that cannot be asked keeps
// the batch's rows); the next pass starts from the oldest rows again. Every instance runs it: the live
// ones remove disjoint rows (their own); a dead instance's rows may be removed by several at
// once, which is safe: each removal re-checks its conditions, and deleting a deleted row changes
// nothing.
package retention
