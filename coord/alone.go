package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// alone is the path of a request on its own (docs/design.md section 2): its SQL side and its
// Kafka side concurrently in phase 1, then its own decision: the committing row without Kafka,
// or prepared logged and EndTxn(commit). A one-phase request (one database, no Kafka) ends at
// its phase 1: the database's COMMIT is the decision.
type alone struct{}

func (alone) begin(ctx context.Context, c *Coordinator, w *work, budget time.Duration) begun {
	return c.begin(ctx, w, budget)
}

// phase1 runs the work and the prepare of both sides concurrently (docs/design.md section 2,
// step 2), and ends a request that failed there or committed in one phase.
func (alone) phase1(ctx context.Context, c *Coordinator, w *work) (ended, bool) {
	pctx, st := c.step(ctx, PhasePhase1, SpanPhase1)
	err := c.phase1(pctx, w, w.t.OnePhase, true)
	st.end(err)
	if err != nil {
		if errors.Is(err, txntype.ErrCommitUnknown) {
			// The one database's COMMIT was sent and its answer lost: it may have committed.
			// Only its marker can tell; the row stays active and recovery settles it.
			return c.inDoubt(w, err), true
		}
		return c.abort(w, err), true
	}
	if w.t.OnePhase {
		// The one database committed: its marker row makes that knowable after a crash.
		return c.finish(w, txntype.StateCommitted, nil), true
	}
	// O4b: a chained request commits only if its predecessor did; it waits here, while it
	// may still abort, before anything that could commit it is logged.
	if err := c.awaitPredecessor(ctx, w, stageCommitted); err != nil {
		return c.abort(w, err), true
	}
	return ended{}, false
}

func (alone) detached(ctx context.Context, _ *work) context.Context {
	return context.WithoutCancel(ctx)
}

// decide takes a transaction whose participants are all prepared to its decision: the durable
// committing row without Kafka, otherwise prepared logged and then Kafka's answer to EndTxn.
func (alone) decide(ctx, fctx context.Context, c *Coordinator, w *work) (commit bool, cause error, e ended, done bool) {
	t := w.t
	if w.ktx == nil {
		// No Kafka: the decision is the durable committing row.
		lctx, st := c.step(fctx, PhaseLogCommitting, SpanLogCommitting)
		err := c.log.Transition(lctx, t, txntype.StateCommitting)
		st.end(err)
		if err != nil {
			return false, nil, c.decisionUnlogged(fctx, w, "committing", err), true
		}
		return true, nil, ended{}, false
	}

	// I2: prepared, with the Kafka ids, is durable before EndTxn(commit) is sent.
	lctx, st := c.step(fctx, PhaseLogPrepared, SpanLogPrepared)
	kafkaAttrs(st.span, t.Kafka.KafkaIDs)
	err := c.log.Prepared(lctx, t)
	st.end(err)
	if err != nil {
		return false, nil, c.decisionUnlogged(fctx, w, "prepared", err), true
	}
	c.fault(txntype.FaultAfterLogPrepared)
	_, st = c.step(fctx, PhaseEndTxn, SpanEndTxn)
	kafkaAttrs(st.span, t.Kafka.KafkaIDs)
	commit, cause, err = c.decide(ctx, fctx, w.ktx, t.Kafka.KafkaIDs, t.GID)
	if st.span.IsRecording() && err == nil {
		st.span.SetAttributes(AttrDecision.String(decision(commit)))
	}
	st.end(err)
	if err != nil {
		return false, nil, c.inDoubt(w, err), true
	}
	c.fault(txntype.FaultAfterEndTxn)
	if commit {
		w.markCommitted()
	}
	return commit, cause, ended{}, false
}

// decisionUnlogged ends a request whose decision write (committing, or prepared with the Kafka
// ids) failed, the write named by step:
//   - claimed by a resolver (or this instance lost its epoch): the decision is not logged, so
//     nothing will commit; the stored state answers;
//   - refused by the log's server: not logged, so nothing will commit (I2) and the request may
//     abort (I3). A client's lock on the log, held by this request's own prepared SQL, ends
//     here: the rollback releases it;
//   - anything else: the write may have landed, so the request is in doubt.
func (c *Coordinator) decisionUnlogged(fctx context.Context, w *work, step string, err error) ended {
	switch {
	case errors.Is(err, txntype.ErrMovedOn):
		return c.yield(fctx, w, fmt.Errorf("log %s: %w", step, err), false)
	case errors.Is(err, txntype.ErrLogRefused):
		return c.abort(w, logRefused(step, err))
	}
	return c.inDoubt(w, fmt.Errorf("log %s: %w", step, err))
}
