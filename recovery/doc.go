// Package recovery resolves in-doubt transactions: at startup (before the transactional-id pool
// serves), periodically, and on demand (POST /v1/recovery/run). It also rolls back orphan
// prepared transactions, deletes marker rows that no longer prove anything, and takes over the
// in-doubt transactions of dead coordinator instances.
//
// What an operator sees (the in-doubt, hanging and status views) and can do (retry, abort,
// resolve one transaction) is package operator: it reads this loop's counters and decisions
// and drives its resolving machinery (Loop.ResolveOne, LockFor) for one row at a time.
//
// # State Model
//
// A transaction that is not final and not in flight in this process is resolved by its logged
// state (docs/design.md, I5), with the rules of coord.Rules, after claiming it: a compare-and-set that
// makes the row this instance's at its current epoch (txlog.Log.Claim) comes before any
// participant is touched, so a live writer (the request itself, or the process of an instance
// being taken over) can no longer log prepared or anything else:
//
//	active      → claim: aborting (the outcome is fixed)
//	aborting    → presumed abort: ROLLBACK PREPARED every SQL gid → aborted; a one-phase row is
//	              settled by its marker instead (present: committed; absent: a fencing marker
//	              takes its key, so the COMMIT can no longer happen → aborted)
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
// The prepared rows of a page of due rows are resolved together (C1, page.go and
// coord.Rules.ResolvePage): one claim for all of them, one EndTxn per Kafka transaction (the
// members of a shared one are decided by one answer), every SQL gid once, one final write; a row
// that is not a clean commit goes the one-row way after its claim.
//
// Instances (I8): each holds a session-level advisory lock on a dedicated connection, keyed by
// schema and instance id, and taking it bumps the instance's epoch (owner.go): every log write
// of the instance is fenced by the epoch it holds. A second process with the same id cannot take
// the lock and is refused. The lock's session is checked every second or so (Ownership.Keep);
// when it is lost (PostgreSQL restarted, the backend terminated, the network cut) the instance
// stops starting transactions (503, /readyz not ready, no heartbeat) and claims the lock again,
// with a new epoch, as soon as it can. The heartbeat is written every Interval on a ticker of its
// own (Loop.beat), whatever a pass is doing, and only informs: liveness is the lock. An instance
// whose heartbeat is older than the lease and whose lock is free is dead (or alive without its
// lock): another instance takes its lock and
// bumps its epoch (so that such a process writes nothing more), claims and resolves its rows —
// active rows only once older than the largest request budget plus the finish bound
// (TakeoverGuard), which spares requests that may still be running — re-initialises its
// transactional ids, then lets go. A restart after kill -9 finds the lock free at once.
//
// # Failure Handling
//
// Every attempt that fails is recorded on the row (attempts, last_error) and retried after an
// exponential backoff with jitter, scheduled in database time. Every state change is a
// compare-and-set on the state and owner that were read, so a recovery pass never overwrites a
// live request's progress or another instance's resolution. Orphan gids with no log row are
// rolled back; leftover gids of final rows follow the logged outcome. Both sweeps act only in
// this log's namespace (its gid prefix, claimed in every participant database at startup by
// sqltxn.ClaimNamespace; a second log asking for it is refused). Marker rows are deleted
// only for rows of this log whose final state, committed or aborted, is durable; a fencing
// marker also stays while any transaction older than it runs on its database.
package recovery
