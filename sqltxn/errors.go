package sqltxn

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/kpgtx/coordinator/txntype"
)

// Sentinels of this package.
var (
	// ErrNoPreparedTransactions: the server's max_prepared_transactions is 0, so every PREPARE
	// TRANSACTION would fail. Refused at startup.
	ErrNoPreparedTransactions = errors.New("max_prepared_transactions is 0")
	// ErrUnknownDatabase: a statement names a database that is not configured.
	ErrUnknownDatabase = errors.New("unknown database")
	// ErrStatementRole: the configured statement role cannot be taken, or could reach the
	// coordinator's tables. Refused at startup.
	ErrStatementRole = errors.New("statement role")
	// ErrNamespaceTaken: another log holds this log's namespace (gid prefix) in a participant
	// database; refused at startup.
	ErrNamespaceTaken = errors.New("namespace held by another log")
)

// SQLSTATEs the package acts on.
const (
	sqlstateUndefinedObject      = "42704" // COMMIT/ROLLBACK PREPARED of a gid that does not exist
	sqlstateReadOnly             = "25006" // a write in a read-only transaction
	sqlstateSerializationFailure = "40001"
	sqlstateDeadlockDetected     = "40P01"
	sqlstateDuplicateObject      = "42710" // PREPARE TRANSACTION with a gid already in use
	sqlstateProtocolViolation    = "08P01" // e.g. a statement given the wrong number of arguments
	sqlstateQueryCanceled        = "57014" // statement_timeout, or the budget's cancel request
)

// classify turns a pgx error into a txntype.Failure: the SQLSTATE is passed through; serialization
// failures, deadlocks and lost connections before PREPARE are retriable for the caller.
func classify(database string, err error) *txntype.Failure {
	f := &txntype.Failure{Participant: txntype.ParticipantSQL + ":" + database, Class: txntype.ClassAbortable, Err: err}
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, txntype.ErrConfinementBreach):
		f.Class = txntype.ClassInternal
		if errors.As(err, &pe) {
			f.SQLState = pe.Code
		}
	case errors.As(err, &pe):
		f.SQLState = pe.Code
		class := pe.Code
		if len(class) > 2 {
			class = class[:2]
		}
		switch {
		case pe.Code == sqlstateSerializationFailure || pe.Code == sqlstateDeadlockDetected:
			f.Class = txntype.ClassRetriable
		case pe.Code == sqlstateProtocolViolation || pe.Code == sqlstateQueryCanceled:
			// The client's statement does not fit its arguments ("bind message supplies 1
			// parameters, but prepared statement requires 2"): the request's fault, abortable,
			// never "unavailable, safe to retry" although its class is 08. Likewise a statement
			// cancelled by its statement_timeout or by the request's budget (57014).
			f.Class = txntype.ClassAbortable
		case class == "08" || class == "57" || class == "53":
			// connection exception, operator intervention (shutdown), insufficient resources
			f.Class, f.Unavailable = txntype.ClassRetriable, true
		case class == "28" || pe.Code == "42501":
			// invalid authorization, insufficient privilege
			f.Class = txntype.ClassInvalidConfig
		}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// Out of budget: abortable. (Before isConnError: DeadlineExceeded is a net.Error too.)
		f.Class = txntype.ClassAbortable
	case isConnError(err):
		f.Class, f.Unavailable = txntype.ClassRetriable, true
	}
	return f
}

func isConnError(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) ||
		pgconn.SafeToRetry(err)
}

// isGuardFailure: the guard after a client statement found the connection outside the
// coordinator's transaction (run.go).
func isGuardFailure(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == sqlstateUndefinedObject && strings.Contains(pe.Message, guardLeft)
}

// isReadOnlyGuard: the guard after a client statement found the transaction read-only (run.go).
func isReadOnlyGuard(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == sqlstateUndefinedObject && strings.Contains(pe.Message, guardReadOnly)
}

// errReadOnly: a client statement made the transaction read-only (SET TRANSACTION READ ONLY in
// a function, say). The coordinator writes its marker row in the transaction, so the request
// cannot commit; nothing of it does (classified abortable: the statement's fault).
var errReadOnly = errors.New("it made the transaction read-only; the coordinator writes its marker row in the " +
	"transaction, which must stay read-write")

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
