package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Prepared is a transaction prepared on every participant that waits for its caller's decision
// (Client.Prepare): its rows and records are written but not visible (no row to other
// sessions, no record to read_committed consumers) until Commit; Rollback, or DecideBy passing
// without a decision, aborts it on both sides.
//
// A process that loses its Prepared (a crash) decides with the ID and PreparedState it kept:
// Client.Commit(ctx, id, preparedState) or Client.Rollback(ctx, id).
type Prepared struct {
	c *Client
	// ID is the transaction's id (the request's, or the one Prepare generated).
	ID string
	// PreparedState is what Commit presents: the Kafka transaction's "producerId:epoch", or
	// "-1:-1" when the request has no Kafka side.
	PreparedState string
	// DecideBy is when the coordinator aborts the transaction without a decision.
	DecideBy time.Time
	// Transaction is the transaction as Prepare's answer gave it: state prepared and Waiting,
	// or already final when the id was decided before (a Prepare sent again after its Commit
	// or Rollback).
	Transaction *Transaction
}

// Prepare runs phase 1 of req and leaves the outcome to the caller ("decision": "external"
// of operation createTransaction): the statements run and every database prepares, the
// records are flushed in an open Kafka transaction, the consumer offsets are sent, and the
// transaction is logged, waiting. Nothing is visible until Commit; without a decision
// within the window it is aborted. Use it when a step of a saga, a workflow engine or a
// transaction manager decides: reserve now, commit after a payment is approved, roll back
// when it is declined.
//
// within is the window to decide in (at least 100ms, at most what the coordinator can hold:
// beyond it the answer is ErrInvalid naming decide_within_ms); 0 is that bound itself.
// req.Decision and req.DecideWithinMS are set by Prepare; req.KafkaOffsets.After cannot be
// used (a chained batch cannot wait).
//
// Prepare sends and retries as Submit does (an empty req.ID is filled with NewID; 429, 503
// and failed connections are sent again with the same id and body within the retry window;
// 202 is polled until the transaction waits), so set req.ID yourself to be able to roll back
// by id after an error that leaves the outcome unknown. Errors are Submit's: ErrAborted when
// phase 1 failed (nothing stays prepared), ErrUnavailable also when too many transactions
// already wait for their caller's decision (a setting of the server bounds them).
func (c *Client) Prepare(ctx context.Context, req TransactionRequest, within time.Duration) (*Prepared, error) {
	if within < 0 {
		return nil, fmt.Errorf("client: Prepare within %s: must not be negative", within)
	}
	if req.ID == "" {
		req.ID = NewID()
	}
	req.Decision, req.DecideWithinMS = DecisionExternal, 0
	if within > 0 {
		req.DecideWithinMS = int64((within + time.Millisecond - 1) / time.Millisecond)
	}
	since := c.now()
	// Decided means waiting, or already final (a resend of an id decided since): what a
	// resent Prepare answers.
	decided := func(t *Transaction) bool { return t.Waiting || t.State == StateCommitted }
	t, err := c.sendUntil(ctx, req.ID, req, since, decided)
	if err != nil {
		return nil, err
	}
	return c.prepared(req.ID, t), nil
}

func (c *Client) prepared(id string, t *Transaction) *Prepared {
	p := &Prepared{c: c, ID: id, PreparedState: t.PreparedState, Transaction: t}
	if t.ID != "" {
		p.ID = t.ID
	}
	if t.DecideBy != nil {
		p.DecideBy = *t.DecideBy
	}
	return p
}

// Commit commits the prepared transaction on both sides (Client.Commit with its id and
// prepared_state).
func (p *Prepared) Commit(ctx context.Context) (*Transaction, error) {
	return p.c.Commit(ctx, p.ID, p.PreparedState)
}

// Rollback aborts the prepared transaction on both sides (Client.Rollback with its id).
func (p *Prepared) Rollback(ctx context.Context) (*Transaction, error) {
	return p.c.Rollback(ctx, p.ID)
}

// Commit is a caller's decision to commit a transaction that waits for it (operation
// commitTransaction; the role that may submit): it returns the committed transaction.
// preparedState is the one Prepare answered (Prepared.PreparedState, Transaction's
// prepared_state); one that does not match aborts the transaction.
//
// The errors: ErrAborted when the transaction ended aborted instead (the prepared_state did
// not match, DecideBy had passed, or it was rolled back before: the error says which),
// ErrNotAllowed when the transaction is not one its caller decides or is not prepared yet,
// ErrNotFound, ErrInvalid; ErrInDoubt (with ctx's error) when ctx ends before the outcome is
// known, ErrHeuristic.
//
// Commit may be sent again safely, to any instance sharing the log: it is sent again after
// 429, 503 and failed connections (after the server's Retry-After, at most WithRetries times
// and within the retry window), a repeat answers the outcome, and on 202 (commit accepted,
// outcome not known within the call) Commit polls the transaction as Submit does.
func (c *Client) Commit(ctx context.Context, id, preparedState string) (*Transaction, error) {
	return c.decide(ctx, id, "commit", CommitRequest{PreparedState: preparedState}, StateCommitted)
}

// Rollback is a caller's decision to abort a transaction that waits for it (operation
// rollbackTransaction; the role that may submit): it returns the aborted transaction. A
// transaction already aborted (rolled back before, or DecideBy passed) is returned as it is.
//
// The errors: ErrDecided when its commit was already taken (the error's Transaction is
// committed, or still finishing its commit: it will commit), ErrNotAllowed, ErrNotFound,
// ErrInDoubt and ErrHeuristic as for Commit. It is sent again and polls as Commit does.
func (c *Client) Rollback(ctx context.Context, id string) (*Transaction, error) {
	return c.decide(ctx, id, "rollback", nil, StateAborted)
}

// decide sends a caller's decision and returns the transaction once it is in state want.
func (c *Client) decide(ctx context.Context, id, action string, body any, want State) (*Transaction, error) {
	if id == "" {
		return nil, fmt.Errorf("client: %s: no transaction id", action)
	}
	path := "/v1/transactions/" + url.PathEscape(id) + "/" + action
	a, err := c.do(ctx, call{method: http.MethodPost, path: path, body: body, retry503: true, outcomes: true, since: c.now()})
	if err == nil {
		return transactionOf(a)
	}
	var e *Error
	if !errors.As(err, &e) {
		return nil, fmt.Errorf("transaction %s: %s: %w", id, action, err)
	}
	if e.Status == http.StatusAccepted && e.Err == nil && (e.Transaction == nil || !e.Transaction.State.Heuristic()) {
		return c.waitFor(ctx, id, func(t *Transaction) bool { return t.State == want })
	}
	return nil, err
}
