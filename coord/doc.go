// Package coord is the protocol engine of the two-phase commit between PostgreSQL and Apache
// Kafka: the transitions between the states of a global transaction, the request's steps, the
// rules every resolver takes (I5), and batches. Its vocabulary (states, rows, requests, records,
// errors, and the participant and log interfaces it drives, implemented by kafkatxn, sqltxn and
// txlog) is the package txntype, below it.
//
// Kafka has no usable prepare (KIP-939 is stubbed in every release), so Kafka decides last: a
// Kafka transaction is "prepared" when all its records are flushed and its (transactionalId,
// producerId, epoch) are durable in the log, and its EndTxn(commit) is the global decision.
//
// # State Model
//
//	        Begin (log insert)
//	              │
//	              ▼
//	┌──────────► active ───────────────────────────────┐
//	│             │ phase 1: SQL work ∥ Kafka produce   │ any failure before the decision:
//	│             │ PREPARE each db ∥ flush             │ abort Kafka, ROLLBACK PREPARED
//	│             │                                     ▼
//	│   one db,   ├── no Kafka, several dbs ──► committing ──► committed
//	│   no Kafka: │        (durable decision)        │
//	│   COMMIT ───┼──────────────────────────────────┼──────► committed
//	│             ▼                                  │
//	│          prepared  (I2: Kafka ids durable)      │
//	│             │ EndTxn(commit) = the decision     │
//	│             ├── Kafka committed ─► COMMIT PREPARED ─► committed
//	│             ├── Kafka aborted ───► ROLLBACK PREPARED ► aborted
//	│             └── no answer ───────► stays prepared (202; recovery resends EndTxn)
//	│
//	└── retry of an aborted-retriable request with the same body (503 said "safe to retry")
//
//	active ──claim──► aborting ──► aborted   (a resolver's claim fixes the outcome, rules.go;
//	                      └──────► committed  only a one-phase row's marker can still say commit)
//
// A participant resolved by hand against the decision ends heuristic_mixed; an outcome that
// cannot be decided ends heuristic. Both wait for an operator.
//
// # Request paths
//
// A request takes one of three paths (path.go), each a type whose methods are its steps, chosen
// by Coordinator.route and run by Coordinator.drive in one order: begin (log the row active),
// phase 1, decide, then the answer at the decision (D1, decided.go) or phase 2 with its final
// write (finals.go). Every step that ends the request returns an ended: its answer, and whether
// the final write behind that answer now owns the request's place in flight.
//
//   - alone (alone.go): begin; phase 1, the SQL side ∥ the Kafka side, where a one-phase
//     request ends (its COMMIT is the decision); decide, the committing row without Kafka or
//     prepared logged then EndTxn(commit); phase 2.
//   - member (member.go): begin; phase 1, its SQL side prepared on its own (B1), then the batch
//     (batch.go), which decides and may answer it; a batch that did not carry it sends it on as
//     alone, from its Kafka side or (rerun, S5) from its SQL phase; decide, the batch's;
//     phase 2, its own unless the batch's answered it.
//   - joined (joined.go): a member whose SQL runs in its batch's shared SQL transaction
//     (sharedsql.go); its begin joins the batch and logs the row meanwhile (S7), or, joining
//     while every slot is taken, leaves the row to the batch's prepared write (S8); then a
//     member's steps from what the batch told it.
//
// # Ownership and fencing
//
// Every row has an owner: the instance allowed to write it, and the epoch of that instance's
// lock when it took the row (Transaction.Owner, OwnerEpoch). An instance's epoch grows every
// time its lock is taken (its start, its own re-claim after the lock's session died, a
// takeover, an operator acting for it). Every log write is a compare-and-set on the state the
// writer read, on the owner and epoch, and on that epoch still being the instance's; a write
// that fails so (ErrMovedOn) changes nothing, and the writer answers from the stored row
// (Answer). So:
//
//   - a resolver (recovery, a takeover, an operator) first claims the row (Log.Claim, ClaimState)
//     and only then touches a participant; claiming an active row moves it to aborting, after
//     which the request's own prepared write fails and nothing can commit Kafka;
//   - an instance that lost its lock's session starts no transaction (ErrNotOwner, 503) until it
//     has claimed the lock again, with a new epoch; its requests in flight then write nothing.
//
// The one-phase path (one database, no Kafka) commits without prepared: the database's COMMIT
// is the decision. A lost COMMIT answer (cut connection, expired budget, terminated backend) is
// ErrCommitUnknown and leaves the row active (202); the resolver's SQL.SettleOnePhase reads the
// marker, or fences the gid so that the COMMIT can no longer happen, and logs what it proves.
//
// # Shared Kafka transactions
//
// While other requests are in flight, a two-phase request with records takes the shared path
// (batch.go, docs/batching.md): its SQL side is prepared first and alone (B1), then it joins a
// batch whose leader produces every member's records in one Kafka transaction, logs every
// member prepared in one all-or-nothing write (B2, Log.PreparedBatch), sends one EndTxn, and
// runs phase 2 for all members at once. The states of each member's row are the ones above.
// The shared id goes back to the pool after the last member (B3); an id quarantined before the
// prepared write was known is released by recovery after the last member that remembered it
// (B4, quarantineLease). A batch that fails before its prepared write is aborted in Kafka and
// every member then runs the Kafka side of an unshared request.
//
// # Invariants (docs/design.md section 3), and where they are enforced
//
//   - I1 a transactional.id serves one global transaction at a time and is not reused until
//     that transaction's final state is durable: kafkatxn.Pool (free list, quarantine) and
//     Coordinator.finishWith (release only after the final log write).
//   - I2 prepared, with the Kafka ids, is durable before EndTxn(commit): alone.decide, and
//     Coordinator.runBatch for every member of a shared transaction.
//   - I3 after prepared the coordinator never aborts on its own; only Kafka's answer can abort:
//     Coordinator.decide (no abort call after prepared; a lost answer leaves the row prepared).
//   - I4 SQL phase 2 follows the decision and is idempotent; a missing gid is resolved with the
//     marker row: sqltxn.Databases.CommitPrepared / RollbackPrepared.
//   - I5 presumed abort before prepared, resume by the stored ids after it, phase 2 following
//     the decision: Rules (rules.go), the one place both the request path and every resolver
//     take them from.
//   - Claim before act: Rules.Resolve claims (Log.Claim) before Decide touches a participant;
//     the request path's writes are fenced by its epoch (txlog.Log.update).
//   - A one-phase outcome comes from evidence only: sqltxn.Databases.Run reports a lost COMMIT
//     answer as ErrCommitUnknown (never aborted), alone.phase1 leaves it in doubt, and
//     Rules.presumedAbort settles it by the marker (SQL.SettleOnePhase).
//   - I6–I8 (orphans, the outcome oracle, instance ownership) belong to the recovery loop; the
//     log keeps everything it needs (txlog).
//
// # Failure Handling
//
// Before the decision every failure aborts every participant (presumed abort), Kafka first. A
// failure of a dependency that leaves nothing prepared is reported as ErrUnavailable (503, safe
// to retry with the same id). The row's Begin is safe to retry only when it provably wrote
// nothing: never sent (ErrLogUnsent), refused by the server (ErrLogRefused), or fenced
// (ErrNotOwner); a Begin sent whose answer was lost may have logged the row, and is ErrInDoubt
// (202) until recovery resolves the row or its absence shows; a participant's refusal as ErrAborted (409) with the participant,
// its error class (KIP-1050 groups) and SQLSTATE. After prepared, an unclear EndTxn answer is
// retried with a raw EndTxn by the stored ids within the caller's budget, then left to recovery
// (ErrInDoubt, 202) with the transactional.id quarantined. Phase 2 and the final log write run
// to completion even when the caller has gone. A write refused because someone else now owns
// the row makes the request answer from the stored row: committed 200; aborted, or aborting
// and not one-phase, 409 (its own participants are rolled back at once); anything else 202. A
// one-phase COMMIT whose answer was lost is 202, never 409 or 503: only the marker can tell.
// A request whose id is in flight on this instance (its row perhaps not logged yet) waits for
// that run's outcome within its own budget, and is in doubt (202) when the budget ends first;
// never "not found" (flight.go).
package coord
