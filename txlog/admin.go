package txlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/kpgtx/coordinator/txntype"
)

// The operator's side of the log: the in-doubt rows with their recovery bookkeeping, listings
// by age, admin events (who did what, and why) and the operator's decision on a heuristic row.

// Row is a log row with its recovery bookkeeping.
type Row struct {
	*txntype.Transaction
	Attempts      int
	LastError     string
	NextAttemptAt time.Time
}

// extraRow scans the common columns, then more.
type extraRow struct {
	pgx.Row
	extra []any
}

func (r extraRow) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.extra...)...) }

// inDoubtStates are the states an operator may have to look at: not final, or heuristic.
var inDoubtStates = []string{
	string(txntype.StateActive), string(txntype.StateAborting), string(txntype.StateWaiting), string(txntype.StatePrepared),
	string(txntype.StateCommitting), string(txntype.StateHeuristic), string(txntype.StateHeuristicMixed),
}

// InDoubt returns every row that is not final or ended heuristic, with its attempts, last error
// and next attempt, oldest first.
func (l *Log) InDoubt(ctx context.Context) ([]Row, error) {
	rows, err := l.pool.Query(ctx, `SELECT `+columns+`, attempts, last_error, next_attempt_at
FROM coordinator_transactions WHERE state = ANY($1) ORDER BY created_at, gid`, inDoubtStates)
	if err != nil {
		return nil, fmt.Errorf("txlog: in-doubt rows: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		var last *string
		t, err := scan(extraRow{Row: rows, extra: []any{&r.Attempts, &last, &r.NextAttemptAt}})
		if err != nil {
			return nil, fmt.Errorf("txlog: in-doubt rows: %w", err)
		}
		r.Transaction = t
		if last != nil {
			r.LastError = *last
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("txlog: in-doubt rows: %w", err)
	}
	return out, nil
}

// GetGID returns the transaction with the global id.
func (l *Log) GetGID(ctx context.Context, gid string) (*txntype.Transaction, error) {
	return l.getBy(ctx, "gid", gid)
}

// EncodeCursor and DecodeCursor are the listing's opaque page cursor, (time, key), for views
// built outside this package (the in-doubt view).
func EncodeCursor(at time.Time, key string) string { return encodeCursor(at, key) }

// DecodeCursor reads a cursor of EncodeCursor; a bad one is an invalid "after" parameter.
func DecodeCursor(c string) (time.Time, string, error) { return decodeCursor(c) }

// AdminAction is one operator action, recorded in the event history.
type AdminAction struct {
	Action string `json:"action"` // retry, abort, resolve
	By     string `json:"by"`     // the caller (the token's name)
	Reason string `json:"reason,omitempty"`
	// Result is the state the transaction was left in, or "refused".
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
	// Outcome is the operator's decision (resolve).
	Outcome txntype.State `json:"outcome,omitempty"`
	// Finished lists SQL gids the action committed or rolled back (resolve).
	Finished []txntype.SQLGID `json:"finished,omitempty"`
	// Previous is the state before the action, and PreviousError its error (the evidence).
	Previous      txntype.State `json:"previous,omitempty"`
	PreviousError string        `json:"previous_error,omitempty"`
}

// AdminEvent appends an operator action to the transaction's event history, with the row's
// current state.
func (l *Log) AdminEvent(ctx context.Context, gid string, a AdminAction) error {
	detail, err := json.Marshal(a)
	if err != nil {
		return err
	}
	tag, err := l.pool.Exec(ctx, `INSERT INTO coordinator_events (gid, state, detail)
SELECT gid, state, $2 FROM coordinator_transactions WHERE gid = $1`, gid, detail)
	if err != nil {
		return fmt.Errorf("txlog: admin event of %s: %w", gid, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %q", txntype.ErrNotFound, gid)
	}
	return nil
}

// Decide records an operator's decision on a heuristic row as its final state (committed or
// aborted), with the action in the event history, in one statement. It is a compare-and-set on
// the state the caller read (t.State) and on its owner (the operator's instance claimed the
// row first, Claim): a row someone else resolved or claimed meanwhile is not overwritten
// (ErrStateChanged). A committed decision clears the row's error; an aborted one
// says who aborted it and why. The heuristic evidence stays in the events.
func (l *Log) Decide(ctx context.Context, t *txntype.Transaction, to txntype.State, a AdminAction) error {
	if !t.State.Final() || t.State == txntype.StateCommitted || t.State == txntype.StateAborted {
		return fmt.Errorf("txlog: decide %s: %s is not a heuristic state", t.GID, t.State)
	}
	var ep, ec, em *string
	if to == txntype.StateAborted {
		p, c := txntype.ParticipantCoordinator, string(txntype.ClassAbortable)
		m := fmt.Sprintf("resolved as aborted by operator %s: %s", a.By, a.Reason)
		ep, ec, em = &p, &c, &m
	}
	a.Previous = t.State
	if t.Error != nil {
		a.PreviousError = t.Error.Message
	}
	a.Result = string(to)
	a.Outcome = to
	detail, err := json.Marshal(a)
	if err != nil {
		return err
	}
	var updated time.Time
	var finished *time.Time
	err = l.pool.QueryRow(ctx, `
WITH upd AS (
    UPDATE coordinator_transactions SET state = $2, updated_at = now(), finished_at = now(),
        error_participant = $4, error_class = $5, error_message = $6, error_sqlstate = NULL
    WHERE gid = $1 AND state = $3 AND owner_instance = $8 AND owner_epoch = $9 AND `+fenced(8, 9)+`
    RETURNING gid, state, updated_at, finished_at
), ev AS (
    INSERT INTO coordinator_events (gid, state, detail) SELECT gid, state, $7 FROM upd
)
SELECT updated_at, finished_at FROM upd`,
		t.GID, string(to), string(t.State), ep, ec, em, detail, t.Owner, t.OwnerEpoch).Scan(&updated, &finished)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("txlog: %s -> %s: %w", t.GID, to, ErrStateChanged)
	}
	if err != nil {
		return fmt.Errorf("txlog: %s -> %s: %w", t.GID, to, err)
	}
	t.State, t.UpdatedAt, t.FinishedAt = to, updated, finished
	t.Error = nil
	if em != nil {
		t.Error = &txntype.ErrorDetail{Participant: *ep, Class: txntype.Class(*ec), Message: *em}
	}
	return nil
}
