package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// The steps that end a request (path.go): each returns its answer as an ended.

// logRefused is the failure of a request whose decision write (prepared, or committing
// without Kafka) the log refused (ErrLogRefused): nothing that could commit it is logged, so it
// is aborted, and answered "safe to retry" (503) when nothing was left prepared.
func logRefused(step string, err error) *txntype.Failure {
	return &txntype.Failure{Participant: txntype.ParticipantCoordinator, Class: txntype.ClassRetriable, Unavailable: true,
		Err: fmt.Errorf("log %s: %w", step, err)}
}

// kafkaAbortTimeout bounds the Kafka abort after a failure before the decision.
const kafkaAbortTimeout = 3 * time.Second

// abort rolls back every participant after a failure before the decision (presumed abort), and
// logs the abort. Kafka is aborted before SQL gids are rolled back.
func (c *Coordinator) abort(w *work, cause error) ended {
	ctx, cancel := context.WithTimeout(w.traced(context.Background()), c.cfg.FinishTimeout)
	defer cancel()
	clean := c.rollback(ctx, w)
	f := txntype.AsFailure(cause)
	if !clean {
		f.Unavailable = false // something may be left prepared: not "safe to retry" (503)
	}
	if f.Class == txntype.ClassRetriable && !f.Unavailable {
		// Answered 409, so the id's outcome is final: a same-id retry must return this abort,
		// never run the request again (txlog.Begin re-runs only rows logged retriable, which
		// are exactly the ones answered 503 "safe to retry with the same id").
		f = &txntype.Failure{Participant: f.Participant, Class: txntype.ClassAbortable, SQLState: f.SQLState, Err: f.Err}
	}
	w.t.SQL = nil
	if errors.Is(cause, txntype.ErrConfinementBreach) {
		// I13's second line of defence fired: what the client statement did before it left the
		// transaction may be committed on that database while everything else was rolled back.
		// Not an abort anyone may rely on: heuristic, with the evidence, for an operator.
		f.Unavailable = false
		c.cfg.Observer.ObserveConfinementBreach()
		return c.finishWith(ctx, w, txntype.StateHeuristic, f, true)
	}
	return c.finishWith(ctx, w, txntype.StateAborted, f, true)
}

// rollback aborts this request's own participants before the decision: the Kafka transaction,
// then every database where PREPARE may have been sent. clean=false: a gid may be left
// prepared (recovery rolls it back).
func (c *Coordinator) rollback(ctx context.Context, w *work) (clean bool) {
	ctx, st := c.step(ctx, PhaseAbort, SpanAbort)
	defer func() { st.end(nil) }()
	clean = true
	c.abortKafka(ctx, w)
	for _, db := range w.prepared {
		// PREPARE may have reached the server even if its answer did not reach us; rolling back
		// a gid that does not exist (and has no marker) is a no-op.
		if err := c.sql.RollbackPrepared(ctx, db, c.sqlGID(w.t.GID, db)); err != nil {
			c.cfg.Logger.Warn("sql rollback failed; recovery rolls the orphan back",
				"gid", w.t.GID, "database", db, "error", err)
			clean = false
		}
	}
	return clean
}

// abortKafka aborts w's Kafka transaction, if it has one. Bounded short: when Kafka is down the
// abort cannot get through, and it need not. The transaction was never logged prepared, so
// nothing will ever commit it (I3); the broken producer is recreated before reuse, and its
// InitProducerId aborts it (or the Kafka transaction timeout does). It does not make the abort
// "unclean" for the caller.
func (c *Coordinator) abortKafka(ctx context.Context, w *work) {
	if w.ktx == nil {
		return
	}
	kctx, kcancel := context.WithTimeout(ctx, kafkaAbortTimeout)
	defer kcancel()
	if err := w.ktx.Abort(kctx); err != nil {
		c.cfg.Logger.Warn("kafka abort failed; the id is re-initialised before reuse",
			"gid", w.t.GID, "transactional_id", w.ktx.TransactionalID(), "error", err)
	}
}

// inDoubt leaves the transaction to recovery: the transactional.id stays quarantined (I1).
func (c *Coordinator) inDoubt(w *work, cause error) ended {
	c.cfg.Logger.Error("transaction in doubt; left to recovery", "gid", w.t.GID, "state", w.t.State, "error", cause)
	c.quarantineID(w)
	return end(w.t, &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Txn: w.t, Cause: cause})
}

// quarantineID keeps the request's transactional id out of the pool until recovery has
// resolved the row and releases it (I1).
func (c *Coordinator) quarantineID(w *work) {
	if w.ktx == nil {
		return
	}
	if w.t.Kafka == nil || w.t.State == txntype.StateActive {
		// The log may not name the id: remember it so recovery can release it.
		c.quarantine.Store(w.t.GID, leaseOf(w.ktx))
	}
	w.ktx.Release(false)
	w.ktx = nil
}

// yield answers a request whose row is no longer its own: a resolver claimed it (recovery, a
// takeover, an operator), or this instance lost the epoch the request started with. The stored
// state is the answer; the request writes nothing more. When the stored outcome is an abort of
// a transaction this request had not decided, its own participants are rolled back at once
// (the resolver does the same; both are idempotent) and a transactional id whose Kafka
// transaction was aborted goes back to the pool: the row can never be logged prepared, so
// nothing can commit that transaction (I1, I3).
func (c *Coordinator) yield(ctx context.Context, w *work, cause error, rolledBack bool) ended {
	stored, err := c.log.Get(ctx, w.t.ID)
	if err != nil {
		return c.inDoubt(w, fmt.Errorf("%w; re-reading the row: %w", cause, err))
	}
	c.cfg.Logger.Warn("row claimed by another owner; answering from the stored state", "gid", w.t.GID,
		"state", stored.State, "owner", stored.Owner, "owner_epoch", stored.OwnerEpoch,
		"my_epoch", w.t.OwnerEpoch, "cause", cause)
	abort := w.t.State == txntype.StateActive && !stored.OnePhase &&
		(stored.State == txntype.StateAborting || stored.State == txntype.StateAborted)
	if abort {
		if !rolledBack {
			c.rollback(ctx, w)
		}
		if w.ktx != nil {
			w.ktx.Release(true)
			w.ktx = nil
		}
	}
	c.quarantineID(w)
	return end(Answer(stored, cause))
}

func (c *Coordinator) finish(w *work, to txntype.State, cause error) ended {
	ctx, cancel := context.WithTimeout(w.traced(context.Background()), c.cfg.FinishTimeout)
	defer cancel()
	var f *txntype.Failure
	if cause != nil {
		f = txntype.AsFailure(cause)
	}
	return c.finishWith(ctx, w, to, f, true)
}

// finishWith logs the final state and only then returns the transactional.id to the pool (I1).
func (c *Coordinator) finishWith(ctx context.Context, w *work, to txntype.State, f *txntype.Failure, reusable bool) ended {
	if to == txntype.StateCommitted && f == nil {
		// Committed on every participant: the answer goes now, the write behind it.
		return c.answerCommitted(w)
	}
	if f != nil {
		w.t.Error = f.Detail()
	}
	lctx, st := c.step(ctx, PhaseLogFinal, SpanLogFinal)
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrState.String(string(to)))
	}
	err := c.log.Transition(lctx, w.t, to)
	st.end(err)
	var cause error
	if f != nil {
		cause = f
	}
	if errors.Is(err, txntype.ErrMovedOn) {
		return c.yield(ctx, w, fmt.Errorf("log %s: %w", to, err), to == txntype.StateAborted)
	}
	if err != nil {
		c.cfg.Logger.Error("final log write failed; recovery completes it", "gid", w.t.GID, "state", to, "error", err)
		return c.inDoubt(w, fmt.Errorf("log %s: %w", to, err))
	}
	if w.ktx != nil {
		w.ktx.Release(reusable)
	}
	c.cfg.Logger.Debug("transaction finished", "gid", w.t.GID, "state", to)
	return end(Answer(w.t, cause))
}
