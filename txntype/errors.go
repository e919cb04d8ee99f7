package txntype

import (
	"errors"
	"fmt"
)

// Class groups participant errors the way KIP-1050 groups the transactional producer's, so a
// caller knows what to do next. It appears as error.class in the API.
type Class string

const (
	// ClassRetriable: transient; the coordinator retried what it could. When it reaches the caller
	// nothing was committed and the same request may be sent again.
	ClassRetriable Class = "retriable"
	// ClassAbortable: this transaction cannot commit (bad record, SQL error, Kafka abort); the
	// participant stays usable.
	ClassAbortable Class = "abortable"
	// ClassFenced: another producer took the transactional.id (application-recoverable); the
	// producer is recreated and the cause must be found (two owners?).
	ClassFenced Class = "fenced"
	// ClassInvalidConfig: a setting or permission is wrong; retrying will not help.
	ClassInvalidConfig Class = "invalid_configuration"
	// ClassInternal: the coordinator's own fault (log write failed, bug).
	ClassInternal Class = "internal"
)

// Participant names.
const (
	ParticipantKafka       = "kafka"
	ParticipantSQL         = "sql"
	ParticipantCoordinator = "coordinator"
	// ParticipantSchemaRegistry is the Schema Registry records are encoded against (P1): never
	// a participant of the transaction, but a dependency whose outage is a 503.
	ParticipantSchemaRegistry = "schema_registry"
)

// Sentinels. The API maps each to one HTTP status (api/errors.go).
var (
	// ErrInvalidRequest: the request is malformed; nothing was run.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrIDConflict: the id was used before with another body.
	ErrIDConflict = errors.New("transaction id already used with a different request")
	// ErrNotFound: no transaction with that id.
	ErrNotFound = errors.New("transaction not found")
	// ErrAborted: a participant said no; both sides are rolled back.
	ErrAborted = errors.New("transaction aborted")
	// ErrUnavailable: a dependency is down and nothing was left prepared: safe to retry.
	ErrUnavailable = errors.New("dependency unavailable")
	// ErrInDoubt: the outcome was not known within the time budget; poll GET.
	ErrInDoubt = errors.New("transaction outcome not yet known")
	// ErrNotAllowed: an operator action that the transaction's state does not allow (it would
	// break atomicity, or another process owns the transaction right now); nothing was changed
	// unless the message says so.
	ErrNotAllowed = errors.New("action not allowed")
	// ErrPredecessorUncommitted: a chained request (O4, OffsetCommit.After) was aborted because
	// the request it names did not commit: it aborted, was never logged, or had no known
	// outcome when this one had to decide.
	ErrPredecessorUncommitted = errors.New("its predecessor did not commit")
	// ErrNotWaiting: a caller's commit or rollback of a transaction that does not wait for one:
	// the coordinator decides it, or its phase 1 is still running (409, nothing changed).
	ErrNotWaiting = errors.New("the transaction does not wait for its caller's decision")
	// ErrDecided: a caller's decision that contradicts the one already taken (a rollback after
	// its commit was accepted); the answer carries the transaction with the outcome (409).
	ErrDecided = errors.New("the transaction was already decided the other way")
	// ErrWaitingFull: as many transactions wait for their caller as the setting allows; nothing
	// was run (503, safe to retry once some are decided).
	ErrWaitingFull = errors.New("too many transactions wait for their caller's decision")
	// ErrMovedOn: a log write's compare-and-set failed: the row left the state the writer read,
	// or it is no longer the writer's (claimed by a resolver, or the writer's instance lost the
	// epoch of its lock). The writer re-reads and answers from the stored state.
	ErrMovedOn = errors.New("transaction moved on: its state or owner changed")
	// ErrLogRefused: the log's database answered a write with an error of its own and rolled
	// the write's transaction back (a lock it waited on past the log's lock timeout, a
	// constraint): nothing of the write is durable and the row is as the writer last saw it.
	// Unlike a lost answer, this is knowledge: a prepared write refused so leaves the request
	// free to abort (I3), since no EndTxn(commit) can ever follow it.
	ErrLogRefused = errors.New("the log refused the write; nothing of it was written")
	// ErrLogUnsent: a log write provably never reached the log's server (nothing was sent on
	// the connection, no connection could be made, the log was closed, or the caller's budget
	// ended before the write was queued): nothing of it is durable. Unlike a write whose answer
	// was lost (sent, then the connection dropped), which may have landed: a Begin lost so is
	// in doubt (its row may exist), a Begin unsent is safe to retry.
	ErrLogUnsent = errors.New("the log write never reached the log's server; nothing of it was written")
	// ErrNotOwner: this instance cannot confirm that it still holds its instance lock (the lock
	// session died: PostgreSQL restarted, the backend was terminated, the network cut); it
	// starts no transaction until it has claimed the lock again (503).
	ErrNotOwner = errors.New("instance does not hold its lock")
)

// InvalidError names the request field that is wrong.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Reason }

// Is makes every InvalidError match ErrInvalidRequest.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalidRequest }

func Invalid(field, reason string) error { return &InvalidError{Field: field, Reason: reason} }

// Failure is a participant's refusal or breakdown, already classified by the participant's own
// errors.go (kafkatxn.classify, sqltxn.classify).
type Failure struct {
	Participant string
	Class       Class
	SQLState    string
	// Unavailable marks connection-level failures (the dependency is down or unreachable), which
	// the API answers with 503 when nothing was left prepared.
	Unavailable bool
	Err         error
}

func (f *Failure) Error() string {
	return fmt.Sprintf("%s (%s): %v", f.Participant, f.Class, f.Err)
}

func (f *Failure) Unwrap() error { return f.Err }

// Detail is the API form of the failure.
func (f *Failure) Detail() *ErrorDetail {
	return &ErrorDetail{Participant: f.Participant, Class: f.Class, Message: f.Err.Error(), SQLState: f.SQLState}
}

// AsFailure finds the classified failure in err, or classifies an unknown error as the
// coordinator's own.
func AsFailure(err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	return &Failure{Participant: ParticipantCoordinator, Class: ClassInternal, Err: err}
}

// OutcomeError carries the transaction record with the sentinel that says how it ended, so the
// API can answer 409/202/503 with the body.
type OutcomeError struct {
	Sentinel error
	Txn      *Transaction
	Cause    error
}

func (e *OutcomeError) Error() string {
	if e.Cause != nil {
		return e.Sentinel.Error() + ": " + e.Cause.Error()
	}
	return e.Sentinel.Error()
}

func (e *OutcomeError) Is(target error) bool { return target == e.Sentinel }
func (e *OutcomeError) Unwrap() error        { return e.Cause }

// Participant outcomes that the protocol acts on.
var (
	// ErrKafkaAborted: Kafka reports that the transaction was aborted (timeout, fencing before
	// the commit); the global outcome is abort (I3: the only way to abort after prepared).
	ErrKafkaAborted = errors.New("kafka aborted the transaction")
	// ErrHeuristic: a prepared SQL transaction ended the other way than the decision, by
	// someone else's hand (found through the marker row, I4).
	ErrHeuristic = errors.New("participant resolved against the decision")
	// ErrConfinementBreach: a client statement ended or left the participant's transaction
	// (I13's second line of defence fired). What it did before may be committed on that
	// database, so the outcome is heuristic, for an operator, with the evidence.
	ErrConfinementBreach = errors.New("a client statement left the coordinator's transaction")
	// ErrUndecidable: the outcome oracle cannot read a prepared transaction's outcome back
	// from Kafka (records gone, not ours); the row is parked heuristic, never guessed.
	ErrUndecidable = errors.New("kafka outcome cannot be read back")
	// ErrCommitUnknown: a one-phase COMMIT was sent and its answer lost (connection cut,
	// budget expired, backend terminated): it may have committed. The row stays in doubt until
	// the marker decides (SQL.SettleOnePhase).
	ErrCommitUnknown = errors.New("one-phase commit sent, answer lost")
	// ErrPrepareMayLand: a PREPARE was sent, its answer was lost, and the backend that ran it
	// could not be seen to exit: the PREPARE may still land later, so a ROLLBACK PREPARED that
	// finds no such gid does not prove it gone (a shared transaction's members are then not run
	// again, sharedsql.go S5; the sweep rolls it back once it appears).
	ErrPrepareMayLand = errors.New("prepare sent, answer lost, backend not seen to exit")
)
