// Package recovery resolves in-doubt transactions: at startup (before the transactional-id pool
// serves), periodically, and on demand (POST /v1/recovery/run). It also rolls back orphan
// prepared transactions, deletes marker rows that no longer prove anything, and takes over the
// in-doubt transactions of dead coordinator instances.
//
// An operator can act on one transaction (retry.go; POST /v1/transactions/{id}/retry, /abort,
// /resolve): retry applies the rules below at once; abort is granted only where it cannot break
// atomicity (active, or prepared once Kafka no longer has it open and its outcome is aborted);
// resolve records an operator's decision on a heuristic row. A row of another instance is
// touched only while that instance's lock is free, as in a takeover.
//
// # State Model
//
// A transaction that is not final and not in flight in this process is resolved by its logged
// state (DESIGN.md I5):
//
//	active      → presumed abort: ROLLBACK PREPARED every SQL gid; a visible marker row
//	              (only the one-phase path commits before prepared) means committed
//	prepared    → EndTxn(commit) with the stored (transactionalId, producerId, epoch):
//	                committed      → COMMIT PREPARED every gid → committed
//	                Kafka aborted  → ROLLBACK PREPARED every gid → aborted (why: e.g. timeout)
//	                fenced         → outcome oracle (I7): read the logged offsets back with
//	                                 read_committed; undecidable → heuristic (never guess)
//	                unclear        → retry after backoff
//	committing  → COMMIT PREPARED every gid → committed
//
// A gid found resolved the other way by someone else makes the row heuristic_mixed, with the
// evidence in its error. Only after the final state is durable is the transactional id returned
// to the pool (I1).
//
// Instances (I8): each holds a session-level advisory lock on a dedicated connection, keyed by
// schema and instance id. A second process with the same id cannot take it and is refused. An
// instance whose heartbeat is older than the lease and whose lock is free is dead: another
// instance takes its lock, resolves its rows and re-initialises its transactional ids, then lets
// go. A restart after kill -9 finds the lock free at once.
//
// # Failure Handling
//
// Every attempt that fails is recorded on the row (attempts, last_error) and retried after an
// exponential backoff with jitter, scheduled in database time. Every state change is a
// compare-and-set on the state that was read, so a recovery pass never overwrites a live
// request's progress or another instance's resolution. Orphan gids with no log row are rolled
// back; leftover gids of final rows follow the logged outcome.
package recovery
