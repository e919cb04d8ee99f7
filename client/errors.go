package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Sentinels: every answer other than a success is an *Error, and errors.Is tells the cases
// apart by the answer's status (and, for 409, what it carries).
var (
	// ErrAborted: the transaction ended aborted on both sides (409 with the transaction; its
	// Error says which participant refused and why). Sending it again with the same id returns
	// the same outcome.
	ErrAborted = errors.New("transaction aborted")
	// ErrInDoubt: the outcome is not known yet (202): the transaction is still running or in
	// recovery, or it is heuristic and waits for an operator (ErrHeuristic too). Get tells later.
	ErrInDoubt = errors.New("transaction outcome not known yet")
	// ErrHeuristic: the transaction is heuristic or heuristic_mixed; an operator resolves it.
	ErrHeuristic = errors.New("transaction heuristic: an operator must resolve it")
	// ErrInvalid: the request is malformed or too large (400, 413, 415); nothing was run.
	// Error.Field names the field at fault.
	ErrInvalid = errors.New("invalid request")
	// ErrConflict: the id was used before with another body (422); nothing was run.
	ErrConflict = errors.New("transaction id already used with another request")
	// ErrNotAllowed: an operator action the transaction's state does not allow, or a caller's
	// Commit or Rollback of a transaction that does not wait for one (the coordinator decides
	// it, or its phase 1 is still running) (409 not_allowed); nothing was changed.
	ErrNotAllowed = errors.New("action not allowed")
	// ErrDecided: a caller's Rollback of a transaction whose commit was already taken (409 with
	// the transaction, committed or still finishing its commit, class decided). Nothing was
	// rolled back; the commit stands.
	ErrDecided = errors.New("transaction already decided the other way")
	// ErrNotFound: no such transaction (404).
	ErrNotFound = errors.New("transaction not found")
	// ErrUnavailable: a dependency of the server is down and nothing was left prepared (503).
	ErrUnavailable = errors.New("coordinator unavailable")
	// ErrOverloaded: the server is at its bound of requests or memory (429); nothing was run.
	ErrOverloaded = errors.New("coordinator overloaded")
	// ErrUnauthorized: a missing or unknown token (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: the token lacks the operation's role (403).
	ErrForbidden = errors.New("forbidden")
	// ErrRetryWindow: the retry window of an id passed (WithRetryWindow) before its outcome was
	// known: the id is not sent again, since the server may have forgotten it by then and would
	// run it as a new transaction. The outcome is unknown (Get tells, while the server keeps
	// the row); the error also matches the last answer's sentinel.
	ErrRetryWindow = errors.New("retry window of the transaction id passed")
	// ErrGroupFenced: the consumer group refused the request's offsets because the member is no
	// longer the one it knows (a rebalance moved on: 409 with participant kafka_group and class
	// fenced). Nothing of the request committed; the caller drops its batch and rejoins.
	// ErrAborted matches too.
	ErrGroupFenced = errors.New("consumer group fenced the offset commit")
)

// Error is an answer other than a success. For an outcome (409 aborted, 202 in doubt, 503 with
// the transaction) Transaction is the server's transaction and Class, Participant, Message and
// SQLState come from its error; otherwise they come from the error body.
type Error struct {
	// Status is the HTTP status of the answer. An outcome learnt by polling (Submit waiting on
	// 202) has the status submitting would have given: 409 aborted, 202 still in doubt.
	Status int
	// Class is the error's class: the body's (invalid_request, id_conflict, not_allowed, …) or,
	// for an outcome, the participant's (retriable, abortable, fenced, …, or ClassDecided).
	Class string
	// Field names the request field at fault (400).
	Field       string
	Message     string
	Participant string
	SQLState    string
	// Transaction is the transaction the answer carried, if any.
	Transaction *Transaction
	// RetryAfter is the server's Retry-After (429, 503); 0 when absent.
	RetryAfter time.Duration
	// Err is the cause when the answer was not final: the context's error when Submit stopped
	// waiting on an in-doubt transaction.
	Err error
}

func (e *Error) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Participant != "" {
		msg = e.Participant + ": " + msg
	}
	if e.SQLState != "" && !strings.Contains(msg, e.SQLState) {
		msg += " [SQLSTATE " + e.SQLState + "]"
	}
	if e.Transaction != nil {
		msg = fmt.Sprintf("transaction %s %s: %s", e.Transaction.ID, e.Transaction.State, msg)
	}
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	class := e.Class
	if class == "" {
		class = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, class, msg)
}

// Unwrap returns the cause (Err).
func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinels.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrAborted:
		return e.Status == http.StatusConflict && e.Transaction != nil && !e.decided()
	case ErrDecided:
		return e.Status == http.StatusConflict && e.Transaction != nil && e.decided()
	case ErrNotAllowed:
		return e.Status == http.StatusConflict && e.Transaction == nil
	case ErrInDoubt:
		return e.Status == http.StatusAccepted
	case ErrHeuristic:
		return e.Status == http.StatusAccepted && e.Transaction != nil && e.Transaction.State.Heuristic()
	case ErrInvalid:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge ||
			e.Status == http.StatusUnsupportedMediaType
	case ErrConflict:
		return e.Status == http.StatusUnprocessableEntity
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	case ErrOverloaded:
		return e.Status == http.StatusTooManyRequests
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrGroupFenced:
		return e.Status == http.StatusConflict && e.Transaction != nil &&
			e.Participant == ParticipantKafkaGroup && e.Class == "fenced"
	}
	return false
}

// ClassDecided is the error class of a 409 that refuses a rollback because the commit was
// already taken (ErrDecided).
const ClassDecided = "decided"

// decided: a 409's transaction tells that its commit was taken (a refused rollback), not an
// abort.
func (e *Error) decided() bool {
	s := e.Transaction.State
	return e.Class == ClassDecided || s == StateCommitted || s == StateCommitting
}

// outcomeError is the *Error of a transaction that did not commit, with the status POST gives
// for its state.
func outcomeError(status int, t *Transaction, retryAfter time.Duration) *Error {
	e := &Error{Status: status, Transaction: t, RetryAfter: retryAfter}
	if t.Error != nil {
		e.Class, e.Participant, e.Message, e.SQLState = t.Error.Class, t.Error.Participant, t.Error.Message, t.Error.SQLState
	}
	if e.Message == "" {
		switch {
		case t.State.Heuristic():
			e.Message = "heuristic: an operator must resolve it"
		case t.State == StateCommitted || t.State == StateCommitting:
			// A rollback that learnt by polling that the commit was taken.
			e.Message = "its commit was taken: it cannot be rolled back"
		default:
			e.Message = "outcome not known yet"
		}
	}
	return e
}

// statusOfOutcome is the status POST /v1/transactions answers for a transaction in state s.
func statusOfOutcome(s State) int {
	switch s {
	case StateCommitted:
		return http.StatusOK
	case StateAborted:
		return http.StatusConflict
	}
	return http.StatusAccepted
}
