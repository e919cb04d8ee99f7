package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// Operator actions on one transaction (POST /v1/transactions/{id}/retry, /abort, /resolve).
// They apply the same rules as the recovery loop, now and to one row (recovery.Loop.ResolveOne),
// and refuse where acting could break atomicity: after prepared only Kafka decides (I3), and a
// row that another live process owns is left to that process (I8). Refusals wrap a sentinel of
// errors.go (each wraps txntype.ErrNotAllowed) and change nothing unless they say so; a failed
// attempt wraps txntype.ErrUnavailable and is retried by the loop.

// Retry runs the recovery rules for one transaction now (I4, I5, I7), whatever its backoff,
// and returns the row as it is afterwards. A final row is returned as is; a heuristic one is
// refused (an operator decides it with Resolve).
func (d *Desk) Retry(ctx context.Context, gid string) (*txntype.Transaction, error) {
	t, err := d.log.GetGID(ctx, gid)
	if err != nil {
		return nil, err
	}
	switch t.State {
	case txntype.StateCommitted, txntype.StateAborted:
		return t, nil
	case txntype.StateHeuristic, txntype.StateHeuristicMixed:
		return t, fmt.Errorf("%w: %s ended %s: the coordinator cannot decide it; an operator records the outcome with a reason (POST /v1/transactions/{id}/resolve)",
			ErrHeuristic, t.ID, t.State)
	case txntype.StateWaiting:
		return t, waitingRefusal(ctx, d, t, "retry")
	}
	return d.resolveNow(ctx, t, nil, nil)
}

// Abort aborts one transaction, only where that cannot break atomicity:
//
//   - active (not in flight): presumed abort, always safe before prepared (I5) — except that a
//     visible marker row shows the one-phase commit happened, which is reported (committed);
//   - prepared, when Kafka no longer has the transaction open under the logged producer id:
//     the recovery rules then only read Kafka's outcome (EndTxn(commit) cannot commit a
//     transaction that is no longer open), and the abort is granted if that outcome is aborted;
//   - waiting for its caller's decision (X1, before or past its decide_by): the same claim as
//     the caller's rollback (X3, recovery.Loop.AbortWaiting), taken from any instance; a
//     commit that lands first wins, and the abort is then refused.
//
// Everything else is refused: a prepared transaction still open in Kafka (the decision is
// still commit, I3), committing (commit is decided), heuristic states (resolve), committed.
// An aborted row is returned as is.
func (d *Desk) Abort(ctx context.Context, gid, by, reason string) (*txntype.Transaction, error) {
	t, err := d.log.GetGID(ctx, gid)
	if err != nil {
		return nil, err
	}
	var guard func(context.Context, *txntype.Transaction) error
	switch t.State {
	case txntype.StateAborted:
		return t, nil
	case txntype.StateCommitted:
		return t, fmt.Errorf("%w: %s is committed: there is nothing to abort", ErrNotAbortable, t.ID)
	case txntype.StateHeuristic, txntype.StateHeuristicMixed:
		return t, fmt.Errorf("%w: %s ended %s: record the outcome with a reason instead (POST /v1/transactions/{id}/resolve)",
			ErrHeuristic, t.ID, t.State)
	case txntype.StateCommitting:
		return t, fmt.Errorf("%w: committing: the decision was commit and it is durable; abort would break atomicity (retry finishes the commit)",
			ErrNotAbortable)
	case txntype.StatePrepared:
		guard = d.kafkaStillOpen
	case txntype.StateWaiting:
		return d.abortWaiting(ctx, t, by, reason)
	}
	reword := func(to txntype.State, d *txntype.ErrorDetail) *txntype.ErrorDetail {
		if to != txntype.StateAborted {
			return d
		}
		msg := "aborted by operator " + by
		if reason != "" {
			msg += " (" + reason + ")"
		}
		if d == nil {
			return &txntype.ErrorDetail{Participant: txntype.ParticipantCoordinator, Class: txntype.ClassAbortable, Message: msg}
		}
		out := *d
		out.Message = msg + ": " + d.Message
		return &out
	}
	before := t.State
	t, err = d.resolveNow(ctx, t, guard, reword)
	if err != nil {
		return t, err
	}
	switch {
	case t.State == txntype.StateAborted:
		return t, nil
	case t.State == txntype.StateCommitted && before == txntype.StatePrepared:
		return t, fmt.Errorf("%w: prepared: Kafka had already committed it, so the transaction is now committed on both sides; an abort would have broken atomicity",
			ErrNotAbortable)
	case t.State == txntype.StateCommitted:
		return t, fmt.Errorf("%w: active: its one-phase commit had already happened (the marker row is visible), so the transaction is committed; nothing was aborted",
			ErrNotAbortable)
	}
	msg := ""
	if t.Error != nil {
		msg = ": " + t.Error.Message
	}
	return t, fmt.Errorf("%w: the transaction ended %s, not aborted%s", ErrNotAbortable, t.State, msg)
}

// kafkaStillOpen refuses the abort of a prepared transaction while Kafka still has it open
// under the logged producer id: Kafka decides (I3), and its decision would be commit.
func (d *Desk) kafkaStillOpen(ctx context.Context, t *txntype.Transaction) error {
	if t.Kafka == nil || t.Kafka.TransactionalID == "" {
		return nil // the rules make it heuristic; Abort refuses that
	}
	if d.kafka == nil {
		return fmt.Errorf("%w: prepared: Kafka decides, and this coordinator has no Kafka configured to ask", ErrNotAbortable)
	}
	o, open, err := d.kafka.DescribeTransaction(ctx, t.Kafka.TransactionalID)
	if err != nil {
		return fmt.Errorf("%w: prepared: cannot tell whether Kafka aborted it: %w", txntype.ErrUnavailable, err)
	}
	if open && o.ProducerID == t.Kafka.ProducerID {
		return fmt.Errorf("%w: prepared: Kafka decides; abort would break atomicity: the Kafka transaction on %s (producer %d, epoch %d) is still open, so the decision is still commit (retry finishes it)",
			ErrNotAbortable, t.Kafka.TransactionalID, o.ProducerID, o.ProducerEpoch)
	}
	return nil
}

// resolveNow applies the recovery rules to t once (after guard, if any, allows it) and returns
// the row as it is afterwards. A row of this instance must not be in flight; a row of another
// instance is resolved only while that instance's lock is free (it is not running), held
// meanwhile as in a takeover (I8).
func (d *Desk) resolveNow(ctx context.Context, t *txntype.Transaction, guard func(context.Context, *txntype.Transaction) error,
	reword func(txntype.State, *txntype.ErrorDetail) *txntype.ErrorDetail) (*txntype.Transaction, error) {
	unlock, own, err := d.claimFor(ctx, t)
	if err != nil {
		return t, err
	}
	defer unlock()
	if guard != nil {
		if err := guard(ctx, t); err != nil {
			return t, err
		}
	}
	rerr := d.loop.ResolveOne(ctx, t, own, reword)
	if errors.Is(rerr, txntype.ErrMovedOn) {
		rerr = nil // resolved meanwhile by its request or someone else: report what it is now
	}
	cur, err := d.log.GetGID(ctx, t.GID)
	if err != nil {
		return t, errors.Join(rerr, err)
	}
	if rerr != nil && !cur.State.Final() {
		return cur, fmt.Errorf("%w: recovery attempt failed (%v); the transaction stays %s and the recovery loop retries it after backoff",
			txntype.ErrUnavailable, rerr, cur.State)
	}
	// A failed compare-and-set means someone else (the loop, another operator) resolved it.
	return cur, nil
}

// claimFor makes sure no live process is working on t while it is resolved here. A row of
// another instance is acted on only while that instance's lock is free; the lock is held (and
// that instance's epoch bumped, fencing a process that runs without its lock) until unlock.
func (d *Desk) claimFor(ctx context.Context, t *txntype.Transaction) (unlock func(), own bool, err error) {
	if t.Instance == d.cfg.Instance {
		if d.coord.InFlight(t.GID) {
			return nil, true, fmt.Errorf("%w: %s is in flight in this process: its request decides it", ErrInFlight, t.ID)
		}
		return func() {}, true, nil
	}
	if d.cfg.DSN == "" {
		return nil, false, fmt.Errorf("%w: %s belongs to instance %q; it is resolved there or by a takeover", ErrInstanceAlive, t.ID, t.Instance)
	}
	o, free, err := recovery.LockFor(ctx, d.cfg.DSN, t.Instance)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", txntype.ErrUnavailable, err)
	}
	if !free {
		return nil, false, fmt.Errorf("%w: %s belongs to instance %q, which is running (or being taken over): it resolves its own transactions; send the request to it",
			ErrInstanceAlive, t.ID, t.Instance)
	}
	return func() { o.Close(context.WithoutCancel(ctx)) }, false, nil
}

// Resolve records an operator's decision (committed or aborted) as the final state
// of a heuristic or heuristic_mixed transaction. SQL gids still prepared are first committed or
// rolled back following the decision; gids already finished are left as they are (the
// operator's decision accepts them). The action, with who and why, goes into the event history
// in the same statement as the state change (a compare-and-set).
func (d *Desk) Resolve(ctx context.Context, gid string, outcome txntype.State, a txlog.AdminAction) (*txntype.Transaction, error) {
	if outcome != txntype.StateCommitted && outcome != txntype.StateAborted {
		return nil, &txntype.InvalidError{Field: "outcome", Reason: `must be "committed" or "aborted"`}
	}
	t, err := d.log.GetGID(ctx, gid)
	if err != nil {
		return nil, err
	}
	if t.State == txntype.StateWaiting {
		return t, waitingRefusal(ctx, d, t, "resolve")
	}
	if t.State != txntype.StateHeuristic && t.State != txntype.StateHeuristicMixed {
		hint := "retry applies the recovery rules"
		if t.State.Final() {
			hint = "its outcome is final"
		}
		return t, fmt.Errorf("%w: %s is %s, not heuristic: resolve records an operator's decision only where the coordinator could not decide (%s)",
			ErrNotHeuristic, t.ID, t.State, hint)
	}
	// Claim before act: the row becomes this instance's before any gid is finished, so that
	// of two operators deciding at once only one touches the participants.
	by, err := d.loop.Ownership().Fence()
	if err != nil {
		return t, fmt.Errorf("%w: %w", txntype.ErrUnavailable, err)
	}
	if err := d.log.Claim(ctx, t, by, t.State); err != nil {
		if errors.Is(err, txlog.ErrStateChanged) {
			return t, fmt.Errorf("%w: %s was resolved or claimed meanwhile by someone else", ErrMovedOn, gid)
		}
		return t, fmt.Errorf("%w: %w", txntype.ErrUnavailable, err)
	}
	for _, g := range t.SQLGIDs {
		prepared, err := d.sql.PreparedGIDs(ctx, g.Database, g.GID)
		if err != nil {
			return t, fmt.Errorf("%w: %v", txntype.ErrUnavailable, err)
		}
		if _, ok := prepared[g.GID]; !ok {
			continue
		}
		// A shared gid (coord/sharedsql.go) holds batch mates' work too: finishing it here
		// finishes theirs, as the operator's decision for one member of a shared Kafka
		// transaction decides the others'.
		if outcome == txntype.StateCommitted {
			err = d.sql.CommitPrepared(ctx, g.Database, g.GID)
		} else {
			err = d.sql.RollbackPrepared(ctx, g.Database, g.GID)
		}
		if err != nil {
			return t, fmt.Errorf("%w: finishing %s on %s: %v (nothing recorded)", txntype.ErrUnavailable, g.GID, g.Database, err)
		}
		a.Finished = append(a.Finished, g)
	}
	if err := d.log.Decide(ctx, t, outcome, a); err != nil {
		if errors.Is(err, txlog.ErrStateChanged) {
			cur, gerr := d.log.GetGID(ctx, gid)
			if gerr == nil {
				t = cur
			}
			return t, fmt.Errorf("%w: %s was resolved meanwhile by someone else (now %s)", ErrMovedOn, gid, t.State)
		}
		return t, err
	}
	d.cfg.Logger.Warn("heuristic transaction resolved by an operator", "gid", gid, "outcome", outcome,
		"by", a.By, "reason", a.Reason, "finished", len(a.Finished))
	return t, nil
}

// abortWaiting is an operator's abort of a transaction waiting for its caller (X1): the abort
// claim on the waiting row (waiting to aborting, one conditional write fenced by this
// instance's epoch, as the caller's rollback, X3), then both sides aborted by the recovery
// rules (recovery.Loop.AbortWaiting). Any instance may take it: the row names no process that
// runs it. A row that stopped waiting meanwhile (its caller's commit or rollback, the
// deadline's abort) is reported as it is now.
func (d *Desk) abortWaiting(ctx context.Context, t *txntype.Transaction, by, reason string) (*txntype.Transaction, error) {
	if t.Instance == d.cfg.Instance && d.coord.InFlight(t.GID) {
		return t, fmt.Errorf("%w: %s is in flight in this process: its request is still answering its caller", ErrInFlight, t.ID)
	}
	msg := "aborted by operator " + by
	if reason != "" {
		msg += " (" + reason + ")"
	}
	decided, err := d.loop.AbortWaiting(ctx, t.GID, msg)
	switch {
	case errors.Is(err, txntype.ErrMovedOn):
		cur, gerr := d.log.GetGID(ctx, t.GID)
		if gerr != nil {
			return t, fmt.Errorf("%w: %w", txntype.ErrUnavailable, gerr)
		}
		switch cur.State {
		case txntype.StateAborted, txntype.StateAborting:
			return cur, nil // aborted meanwhile (its caller's rollback, the deadline)
		case txntype.StateWaiting:
			// Not written: this instance no longer holds its epoch (the fence refused it).
			return cur, fmt.Errorf("%w: %s still waits: the abort could not be written (this instance's fence moved on); retry the abort", txntype.ErrUnavailable, t.ID)
		}
		return cur, fmt.Errorf("%w: %s stopped waiting meanwhile: its caller's commit came first (now %s); nothing was aborted",
			ErrMovedOn, t.ID, cur.State)
	case decided == nil && err != nil:
		return t, fmt.Errorf("%w: the abort of %s could not be written (%v); it still waits for its caller", txntype.ErrUnavailable, t.ID, err)
	case err != nil:
		// The claim is durable (aborting): the abort is decided; recovery finishes it.
		return decided, fmt.Errorf("%w: the abort of %s is decided (%s) but not finished (%v); the recovery loop finishes it after backoff",
			txntype.ErrUnavailable, t.ID, decided.State, err)
	}
	d.cfg.Logger.Warn("waiting transaction aborted by an operator", "gid", t.GID, "by", by, "reason", reason, "state", decided.State)
	return decided, nil
}

// waitingRefusal refuses an action that applies only to a transaction in doubt (retry,
// resolve) on one that waits for its caller (X1).
func waitingRefusal(ctx context.Context, d *Desk, t *txntype.Transaction, action string) error {
	now, err := d.log.Now(ctx)
	if err != nil {
		now = time.Now()
	}
	return fmt.Errorf("%w: %s does not apply to %s: %s", ErrWaiting, action, t.ID, WaitingNote(t.DecideBy, now))
}
