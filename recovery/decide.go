package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// The decisions of transactions their callers decide (X2-X4, coord/external.go): the caller's
// commit or rollback, sent to any instance sharing the log, and the deadline's presumed abort,
// claimed by any instance's pass. Each is one conditional write on the waiting row, then the
// usual rules drive the row to its outcome; a row that is not waiting answers from its state.

// deadlineBatch bounds the waiting rows a pass claims at once.
const deadlineBatch = 256

// Decide takes the caller's decision on the transaction with request id id: a commit with the
// prepared_state it was answered (X2), or a rollback (X3). It returns the transaction as
// decided: committed, or an *OutcomeError saying otherwise (aborted, in doubt), or, for a
// decision that contradicts the one taken, ErrDecided. Repeated, it answers the same.
func (l *Loop) Decide(ctx context.Context, id string, commit bool, preparedState string) (*txntype.Transaction, error) {
	t, err := l.log.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.DecideBy == nil {
		return nil, fmt.Errorf("%w: %s never waited for its caller (its coordinator decides it, or its phase 1 ended it): it is %s",
			txntype.ErrNotWaiting, id, t.State)
	}
	if t.State == txntype.StateWaiting {
		by, err := l.own.Fence()
		if err != nil {
			return nil, &txntype.OutcomeError{Sentinel: txntype.ErrUnavailable, Cause: err}
		}
		d := txntype.Decision{Commit: commit, PreparedState: preparedState, By: by, Reason: "rolled back by its caller"}
		decided, err := l.decideWaiting(ctx, t.GID, d)
		switch {
		case err == nil:
			return decisionAnswer(decided, commit, nil)
		case !errors.Is(err, txntype.ErrMovedOn):
			return decisionAnswer(decided, commit, err)
		}
		// Another decision came first: answer from it.
		if t, err = l.log.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	if t.State == txntype.StateActive {
		return nil, fmt.Errorf("%w: %s is not prepared yet (its phase 1 runs, or ended without an answer: it will be aborted)", txntype.ErrNotWaiting, id)
	}
	if !t.State.Final() {
		// Decided and not finished: by a decision running now, or one whose instance died.
		t = l.settle(ctx, t)
	}
	return decisionAnswer(t, commit, nil)
}

// settleWait is how long a repeated decision waits for the one that runs to finish before
// finishing the row itself.
const settleWait = 2 * time.Second

// settle waits a little for a decided row to reach its final state, then finishes it by the
// usual rules (claim, then act: I5), as recovery would after its backoff: a caller resending
// its decision after the instance that took it died gets the outcome now. Racing a live
// decider is safe (claims and fenced writes); it only repeats idempotent steps.
func (l *Loop) settle(ctx context.Context, t *txntype.Transaction) *txntype.Transaction {
	deadline := time.Now().Add(settleWait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return t
		case <-time.After(50 * time.Millisecond):
		}
		fresh, err := l.log.GetGID(ctx, t.GID)
		if err != nil {
			return t
		}
		if t = fresh; t.State.Final() {
			return t
		}
	}
	if err := l.ResolveOne(ctx, t, t.Instance == l.cfg.Instance, nil); err != nil {
		l.cfg.Logger.Warn("finishing a decided transaction failed; recovery retries", "gid", t.GID, "error", err)
	}
	if fresh, err := l.log.GetGID(ctx, t.GID); err == nil {
		t = fresh
	}
	return t
}

// decideWaiting takes d on a waiting row with this loop's rules and returns its id to the pool
// once the row is final (I1). decided is the row as the decision left it (nil: not written).
func (l *Loop) decideWaiting(ctx context.Context, gid string, d txntype.Decision) (*txntype.Transaction, error) {
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	t, err := l.rules().DecideWaiting(rctx, gid, d)
	if t != nil && t.State.Final() {
		// The id goes back to the pool behind the answer: re-initialising it is a round trip
		// to Kafka's transaction coordinator the caller need not wait for.
		go l.resolved(context.WithoutCancel(ctx), t, t.State, true)
	}
	if t != nil && err != nil && !errors.Is(err, txntype.ErrMovedOn) {
		// Claimed (the decision is durable) and not finished: recovery finishes it by its
		// state, after the backoff.
		_ = l.failed(context.WithoutCancel(ctx), t, err)
	}
	return t, err
}

// decisionAnswer is what a caller's commit (commit) or rollback is answered from the row t:
//   - a commit: committed 200; aborted or aborting 409 with the reason; prepared or committing
//     (the commit was accepted, phase 2 runs) 202;
//   - a rollback: aborted 200; aborting 202 (the abort is fixed, phase 2 runs); committed,
//     prepared or committing 409 ErrDecided;
//   - heuristic outcomes as every request's (coord.Answer).
//
// cause, when set, is why the decision's own run stopped short.
func decisionAnswer(t *txntype.Transaction, commit bool, cause error) (*txntype.Transaction, error) {
	if t == nil {
		return nil, &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Cause: cause}
	}
	committing := t.State == txntype.StatePrepared || t.State == txntype.StateCommitting || t.State == txntype.StateCommitted
	switch {
	case !commit && t.State == txntype.StateAborted:
		return t, nil
	case !commit && committing:
		return t, &txntype.OutcomeError{Sentinel: txntype.ErrDecided, Txn: t, Cause: fmt.Errorf(
			"%w: its commit was accepted (%s)", txntype.ErrDecided, t.State)}
	case !commit && t.State == txntype.StateAborting:
		return t, &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Txn: t, Cause: cause}
	}
	return coord.Answer(t, cause)
}

// deadlines claims the waiting rows whose decide_by is reached (X4: presumed abort, claimed
// first), of any instance, and aborts both sides. A commit racing the claim is decided by
// which write lands first.
func (l *Loop) deadlines(ctx context.Context, st *Stats) error {
	due, err := l.log.DueWaiting(ctx, deadlineBatch)
	if err != nil || len(due) == 0 {
		return err
	}
	by, err := l.own.Fence()
	if err != nil {
		return err
	}
	var errs error
	for _, t := range due {
		d := txntype.Decision{Deadline: true, By: by}
		decided, err := l.decideWaiting(ctx, t.GID, d)
		switch {
		case errors.Is(err, txntype.ErrMovedOn):
			continue // decided meanwhile
		case err != nil:
			st.Failed++
			errs = errors.Join(errs, err)
		case decided.State.Final():
			st.Resolved++
			st.Deadlines++
		}
	}
	return errs
}

// AbortWaiting is an operator's abort of a transaction waiting for its caller: the same claim
// as the caller's rollback (X3), with the operator's reason as the outcome's error.
func (l *Loop) AbortWaiting(ctx context.Context, gid, reason string) (*txntype.Transaction, error) {
	by, err := l.own.Fence()
	if err != nil {
		return nil, err
	}
	return l.decideWaiting(ctx, gid, txntype.Decision{Reason: reason, By: by})
}
