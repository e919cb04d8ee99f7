package sqltxn

import (
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kpgtx/coordinator/coord"
)

// Sentinels of this package.
var (
	// ErrNoPreparedTransactions: the server's max_prepared_transactions is 0, so every PREPARE
	// TRANSACTION would fail. Refused at startup.
	ErrNoPreparedTransactions = errors.New("max_prepared_transactions is 0")
	// ErrUnknownDatabase: a statement names a database that is not configured.
	ErrUnknownDatabase = errors.New("unknown database")
	// ErrNamespaceTaken: another log holds this log's namespace (gid prefix) in a participant
	// database; refused at startup.
	ErrNamespaceTaken = errors.New("namespace held by another log")
)

// SQLSTATEs the package acts on.
const (
	sqlstateUndefinedObject      = "42704" // COMMIT/ROLLBACK PREPARED of a gid that does not exist
	sqlstateSerializationFailure = "40001"
	sqlstateDeadlockDetected     = "40P01"
	sqlstateDuplicateObject      = "42710" // PREPARE TRANSACTION with a gid already in use
)

// classify turns a pgx error into a coord.Failure: the SQLSTATE is passed through; serialization
// failures, deadlocks and lost connections before PREPARE are retriable for the caller.
func classify(database string, err error) *coord.Failure {
	f := &coord.Failure{Participant: coord.ParticipantSQL + ":" + database, Class: coord.ClassAbortable, Err: err}
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe):
		f.SQLState = pe.Code
		class := pe.Code
		if len(class) > 2 {
			class = class[:2]
		}
		switch {
		case pe.Code == sqlstateSerializationFailure || pe.Code == sqlstateDeadlockDetected:
			f.Class = coord.ClassRetriable
		case class == "08" || class == "57" || class == "53":
			// connection exception, operator intervention (shutdown), insufficient resources
			f.Class, f.Unavailable = coord.ClassRetriable, true
		case class == "28" || pe.Code == "42501":
			// invalid authorization, insufficient privilege
			f.Class = coord.ClassInvalidConfig
		}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// Out of budget: abortable. (Before isConnError: DeadlineExceeded is a net.Error too.)
		f.Class = coord.ClassAbortable
	case isConnError(err):
		f.Class, f.Unavailable = coord.ClassRetriable, true
	}
	return f
}

func isConnError(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) ||
		pgconn.SafeToRetry(err)
}

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
