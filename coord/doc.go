// Package coord is the two-phase-commit protocol between PostgreSQL and Apache Kafka: the states
// of a global transaction, the transitions between them, and the participant and log interfaces
// it drives (declared here, implemented by kafkatxn, sqltxn and txlog).
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
// A participant resolved by hand against the decision ends heuristic_mixed; an outcome that
// cannot be decided ends heuristic. Both wait for an operator.
//
// # Invariants (DESIGN.md section 3), and where they are enforced
//
//   - I1 a transactional.id serves one global transaction at a time and is not reused until
//     that transaction's final state is durable: kafkatxn.Pool (free list, quarantine) and
//     Coordinator.finishWith (release only after the final log write).
//   - I2 prepared, with the Kafka ids, is durable before EndTxn(commit): Coordinator.run.
//   - I3 after prepared the coordinator never aborts on its own; only Kafka's answer can abort:
//     Coordinator.decide (no abort call after prepared; a lost answer leaves the row prepared).
//   - I4 SQL phase 2 follows the decision and is idempotent; a missing gid is resolved with the
//     marker row: sqltxn.Databases.CommitPrepared / RollbackPrepared.
//   - I5–I8 (recovery, orphans, the outcome oracle, instance ownership) belong to the recovery
//     loop; the log keeps everything it needs (txlog).
//
// # Failure Handling
//
// Before the decision every failure aborts every participant (presumed abort), Kafka first. A
// failure of a dependency that leaves nothing prepared is reported as ErrUnavailable (503, safe
// to retry with the same id); a participant's refusal as ErrAborted (409) with the participant,
// its error class (KIP-1050 groups) and SQLSTATE. After prepared, an unclear EndTxn answer is
// retried with a raw EndTxn by the stored ids within the caller's budget, then left to recovery
// (ErrInDoubt, 202) with the transactional.id quarantined. Phase 2 and the final log write run
// to completion even when the caller has gone.
package coord
