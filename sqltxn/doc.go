// Package sqltxn is the PostgreSQL participant: named databases, statements with positional
// arguments (rows_affected and RETURNING rows), the marker row, PREPARE TRANSACTION, and the
// idempotent COMMIT PREPARED / ROLLBACK PREPARED.
//
// # State Model
//
// A database's part of a global transaction runs in one pipelined round trip: BEGIN, the
// statements, INSERT of the marker row (gid), then PREPARE TRANSACTION gid (or COMMIT on the
// one-phase path). Once prepared, the transaction belongs to the server, not to a connection:
// it survives disconnects and restarts until COMMIT PREPARED or ROLLBACK PREPARED.
//
// From the enter statement to RESET ALL the transaction is the client's: kpgtx.xid is set, the
// guards compare it with the transaction after each statement, and the coordinator's own tables
// refuse writes (owntables.go, a trigger created at startup where it is missing).
//
// # Failure Handling
//
// A failing statement makes PostgreSQL skip the rest of the batch, so nothing is prepared. A
// connection cut off mid-batch has its server backend terminated (and waited for) before Run
// returns, so a PREPARE cannot complete after the coordinator has looked for it. COMMIT PREPARED
// or ROLLBACK PREPARED of a gid that no longer exists is resolved with the marker row: present
// means committed, absent means rolled back (I4); an outcome against the decision is reported as
// txntype.ErrHeuristic. Client code that writes a coordinator table fails its statement with
// SQLSTATE KP001 (abortable). A one-phase batch that failed without the server answering ERROR (a cut
// connection, an expired budget, a terminated backend's FATAL) may have committed: the error
// matches txntype.ErrCommitUnknown, and SettleOnePhase later decides it from the marker, fencing
// the key (a marker row with aborted = true) when the transaction did not commit, so that it
// never can. SQLSTATEs pass through; serialization failures, deadlocks and lost
// connections are retriable for the caller. A server with max_prepared_transactions = 0 is
// refused at startup with the setting to change.
package sqltxn
