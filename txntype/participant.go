package txntype

import (
	"context"
	"time"
)

// Kafka is the Kafka participant: a pool of transactional producers plus the ability to finish a
// transaction from its ids alone (kafkatxn.Pool).
type Kafka interface {
	// Acquire leases one transactional.id for one global transaction (I1).
	Acquire(ctx context.Context) (KafkaTxn, error)
	// EndTxn finishes an open transaction by its ids (raw EndTxn), used when the producer's own
	// EndTransaction had no clear answer, and by recovery. It returns nil when Kafka committed
	// (or aborted, for commit=false), ErrKafkaAborted when Kafka reports the transaction aborted,
	// and any other error when the outcome is still unknown.
	EndTxn(ctx context.Context, ids KafkaIDs, commit bool) error
	// CheckRecords checks that every record's topic and partition exist (a request sharing a
	// Kafka transaction is checked before it joins, so its mistake stays its own).
	CheckRecords(ctx context.Context, recs []Record) error
	// CheckSizes refuses a resolved record larger than its topic takes (max.message.bytes, and
	// the producer's batch bound) with an error matching ErrInvalidRequest that names it; records
	// of topics it cannot look up are left to CheckRecords.
	CheckSizes(ctx context.Context, recs []Record) error
}

// KafkaTxn is one Kafka transaction on a leased transactional.id.
type KafkaTxn interface {
	TransactionalID() string
	// Begin starts the transaction and produces the records asynchronously.
	Begin(ctx context.Context, recs []Record) error
	// Add produces more records in the open transaction: another request's, sharing it. The
	// offsets Prepare returns follow the order of Begin and the Adds.
	Add(ctx context.Context, recs []Record) error
	// CommitOffsets commits a consumer group's offsets in the open transaction
	// (TxnOffsetCommit, after AddOffsetsToTxn before transactions v2): they become the group's
	// when the transaction commits. Its error names the group; a fenced member is
	// ParticipantKafkaGroup with ClassFenced. Called after Begin, before Prepare.
	CommitOffsets(ctx context.Context, oc *OffsetCommit) error
	// Prepare flushes, checks every record's result and returns the ids and offsets: the Kafka
	// side of phase 1. Any record error fails it.
	Prepare(ctx context.Context) (KafkaState, error)
	// Commit sends EndTxn(commit): the global decision. Errors as for Kafka.EndTxn.
	Commit(ctx context.Context) error
	// Abort aborts the open transaction (before the decision only: I3).
	Abort(ctx context.Context) error
	// Release returns the id to the pool. keep=false quarantines it: its transaction is still
	// in doubt and the id must not serve another transaction (I1).
	Release(keep bool)
}

// SQL is the PostgreSQL participant: named databases (sqltxn.Databases).
type SQL interface {
	Has(database string) bool
	// Run opens a transaction on the database, runs the statements in order, writes the marker
	// row for gid and then either runs PREPARE TRANSACTION gid (phase 1) or, with onePhase,
	// commits. On error nothing of it is left open, except that a PREPARE whose answer was lost
	// may have prepared: RollbackPrepared clears that.
	// afterWork, when not nil, is called once the statements' results are in, before the
	// PREPARE's (or COMMIT's) answer is read (a fault point for tests).
	Run(ctx context.Context, database string, stmts []Statement, gid string, onePhase bool, afterWork func()) ([]SQLResult, error)
	// CommitPrepared and RollbackPrepared are idempotent (I4): a gid that no longer exists is
	// resolved with the marker row; ErrHeuristic reports a gid that ended the other way.
	CommitPrepared(ctx context.Context, database, gid string) error
	// CommitPreparedMany commits several gids of one database in one round trip; errs[i] is
	// gids[i]'s outcome, and a failed one is left to CommitPrepared.
	CommitPreparedMany(ctx context.Context, database string, gids []string) (errs []error)
	RollbackPrepared(ctx context.Context, database, gid string) error
	// RunShared runs several requests' statements on one database in one transaction, each
	// request inside a savepoint of its own with the session's settings reset after it, then
	// the marker row for gid and PREPARE TRANSACTION gid (docs/batching.md section 12). A
	// request whose statement fails is rolled back to its savepoint and left out; the others go
	// on without it. afterWork is called as in Run.
	RunShared(ctx context.Context, database string, members [][]Statement, gid string, afterWork func()) SharedRun
	// SettleOnePhase decides a one-phase transaction from evidence, for good: a marker row
	// committed by the transaction means committed; otherwise a fencing marker (aborted) is
	// written under the same key, which makes a late marker insert, and so a late COMMIT, of that
	// transaction fail. A transaction still running holds the key: the call waits for it to end
	// (or for ctx). committed=false is definite.
	SettleOnePhase(ctx context.Context, database, gid string) (committed bool, err error)
}

// Oracle reads a prepared transaction's outcome back from Kafka (I7): committed, aborted, or
// an error matching ErrUndecidable when the records cannot tell (gone, not ours).
type Oracle interface {
	Outcome(ctx context.Context, ids KafkaIDs, records []RecordOffset) (committed bool, err error)
}

// Ownership says whether this instance holds its instance lock, and the epoch it holds
// (recovery.Ownership). Fence returns an error matching ErrNotOwner while the lock is lost.
type Ownership interface {
	Fence() (Fence, error)
}

// Log is the durable coordinator log (txlog.Log). Every write is a compare-and-set on the
// state the writer read (t.State) and on the row's owner (t.Owner at t.OwnerEpoch, which must
// still be that instance's current epoch); a write that finds otherwise changes nothing and
// returns an error matching ErrMovedOn.
type Log interface {
	// Begin records a new transaction in state active, owned by t.Owner at t.OwnerEpoch. When
	// the request id exists already it returns the stored transaction and created=false.
	Begin(ctx context.Context, t *Transaction) (stored *Transaction, created bool, err error)
	// Prepared makes the Kafka ids, offsets and SQL gids durable with state prepared (I2).
	Prepared(ctx context.Context, t *Transaction) error
	// PreparedBatch is Prepared for every transaction of a shared Kafka transaction, all or
	// nothing, in one durable write (B2): it changes nothing and returns an error matching
	// ErrMovedOn unless every row is still active and owned as its writer last saw it.
	// shared registers the PostgreSQL transactions shared by several of them (S2, sharedsql.go)
	// in the same write; a registration (or a sweep's tombstone) of the same gid already there
	// refuses the whole write the same way. A transaction with RowDeferred has no row yet: the
	// write inserts it prepared, and a row of its request id or gid already there refuses the
	// write the same way; at least one transaction must be without it (S8: the anchor).
	PreparedBatch(ctx context.Context, ts []*Transaction, shared []SharedGID) error
	// Existing returns those of the request ids that have a row (S8: a member that joined with
	// no row is left out of its batch when its id was seen before).
	Existing(ctx context.Context, ids []string) (map[string]bool, error)
	// CommittedBatch logs prepared transactions committed in one write, each row its own
	// compare-and-set: done[i] says whether ts[i] was written. err: every outcome unknown. at is
	// every row's updated_at and finished_at, the time the members' answers said (finals.go);
	// zero: the server's clock.
	CommittedBatch(ctx context.Context, ts []*Transaction, at time.Time) (done []bool, err error)
	// Committed is Transition to committed with at as the row's updated_at and finished_at
	// (zero: the server's clock).
	Committed(ctx context.Context, t *Transaction, at time.Time) error
	// Transition moves the transaction to a new state, storing results and error.
	Transition(ctx context.Context, t *Transaction, to State) error
	// Claim makes the row by's and moves it to state to (claim before act): the resolver's
	// first write, before it touches any participant.
	Claim(ctx context.Context, t *Transaction, by Fence, to State) error
	// ClaimMany claims several rows for by in one write (C1, page.go), each row its own
	// compare-and-set on the state, owner and epoch read in ts, each keeping its state
	// (ClaimState of a prepared or committing row); claimed are the rows it made by's, as
	// they are now. err: no row is known to be claimed.
	ClaimMany(ctx context.Context, ts []*Transaction, by Fence) (claimed []*Transaction, err error)
	Get(ctx context.Context, id string) (*Transaction, error)
	// Waiting (X1) stores what Prepared stores with state waiting and its decide_by: the
	// log's now plus within, never later than the row's creation plus bound.
	Waiting(ctx context.Context, t *Transaction, within, bound time.Duration) error
	// DecideWaiting takes d on the waiting row gid in one conditional write (X2-X4) and returns
	// the row as it left it: prepared or committing (a commit accepted), or aborting with the
	// reason as its error. ErrMovedOn when the row was not waiting: nothing was written.
	DecideWaiting(ctx context.Context, gid string, d Decision) (*Transaction, error)
}

// Clock is the time source for budgets; tests may replace it.
type Clock func() time.Time

// SharedRun is the outcome of SQL.RunShared.
type SharedRun struct {
	// Results[i] are member i's statement results, when it is in the transaction.
	Results [][]SQLResult
	// Excluded[i] is why member i is not in the transaction: its statement failed and its work
	// was rolled back to its savepoint (nothing of it is left), or, matching
	// ErrConfinementBreach, a statement ended the transaction while member i's work was in it.
	Excluded []error
	// Err: the transaction is not prepared, or its PREPARE's answer was lost; the caller rolls
	// gid back before any member runs again. The members not excluded were never run or were
	// rolled back with it.
	Err error
}
