package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// A transaction its caller decides (prepare now, decide later; docs/design.md X1-X4). Its
// request runs phase 1 alone, as any request, and then, instead of deciding, logs its row
// waiting and answers prepared. The decision comes later, from any instance sharing the log
// (Rules.DecideWaiting): a commit with the prepared_state answered, a rollback, an operator's
// abort, or the deadline's presumed abort.
//
// # State Model
//
//	active ──phase 1──► waiting ──commit (X2: before decide_by, prepared_state equal)──► prepared ─► (I5) committed
//	                       │                                         (no Kafka: committing)        └─► aborted (Kafka timed out, I3)
//	                       ├──rollback (X3) / operator abort ──► aborting ──► aborted
//	                       ├──commit with a stale prepared_state ──► aborting ──► aborted
//	                       └──decide_by reached (X4, claimed first) ──► aborting ──► aborted
//
// # Failure Handling
//
//   - Phase 1 fails: the request aborts as any other; nothing waits.
//   - The waiting write fails: as a failed prepared write (decisionUnlogged): refused, the
//     request aborts; lost, it is in doubt (202) and the row is either active (recovery presumes
//     it aborted) or waiting (its caller may decide it).
//   - The coordinator crashes while a row waits: nothing is lost; the row, its prepared gids and
//     its open Kafka transaction (its id quarantined, I1) wait for the decision, which any
//     instance takes.
//   - A decision's handler crashes after its write: the row is prepared (or aborting) and owned
//     by that handler's instance; the preparing instance's recovery (or its takeover) finishes
//     it by the usual rules (I5), and a repeated decision answers from the row.

// External holds what bounds the transactions callers decide.
type External struct {
	// Bound is the longest a transaction may wait for its caller, counted from its row's
	// creation: below the Kafka transaction timeout (Kafka aborts an open transaction there).
	// 0: such requests are refused (no Kafka timeout known).
	Bound time.Duration
	// Max bounds how many of this instance's transactions may wait at once, those in phase 1
	// included; 0: no bound.
	Max int
	// Count reads how many of this instance's rows wait now (nil: only the ones in phase 1
	// count).
	Count func(ctx context.Context) (int, error)
}

// externalWithin checks an external request's window against the bound and returns it (the
// bound when the request names none).
func (c *Coordinator) externalWithin(req *txntype.Request) (time.Duration, error) {
	bound := c.cfg.External.Bound
	if bound <= 0 {
		return 0, txntype.Invalid("decision", "this coordinator cannot hold a transaction for its caller's decision (no Kafka transaction timeout to bound it)")
	}
	if req.DecideWithin > bound {
		return 0, txntype.Invalid("decide_within_ms", fmt.Sprintf(
			"must be at most %d: a waiting transaction must be decided before Kafka's transaction timeout aborts it (KAFKA_TRANSACTION_TIMEOUT less a margin)",
			bound.Milliseconds()))
	}
	if req.DecideWithin == 0 {
		return bound, nil
	}
	return req.DecideWithin, nil
}

// reserveWaiting takes one place among the transactions that may wait, before anything runs:
// the ones in phase 1 (counted here) and the waiting rows (counted in the log). A request over
// the bound is refused with nothing run (503). release gives the place back once the request
// ended: a row that waits is counted by the log from then on.
func (c *Coordinator) reserveWaiting(ctx context.Context) (release func(), err error) {
	x := c.cfg.External
	n := c.preparing.Add(1)
	release = func() { c.preparing.Add(-1) }
	if x.Max <= 0 {
		return release, nil
	}
	waiting := 0
	if x.Count != nil {
		if waiting, err = x.Count(ctx); err != nil {
			release()
			return nil, &txntype.OutcomeError{Sentinel: txntype.ErrUnavailable, Cause: fmt.Errorf("counting waiting transactions: %w", err)}
		}
	}
	if int(n)+waiting > x.Max {
		release()
		return nil, &txntype.OutcomeError{Sentinel: txntype.ErrUnavailable, Cause: fmt.Errorf(
			"%w: %d wait and %d are being prepared on this instance, and COORDINATOR_MAX_WAITING is %d; nothing was run: send it again once some are decided",
			txntype.ErrWaitingFull, waiting, n-1, x.Max)}
	}
	return release, nil
}

// await ends the phase 1 of a request its caller decides (X1): the row goes waiting, with the
// Kafka ids, the offsets, the SQL gids and decide_by, in one write, and only then is the caller
// answered prepared. The transactional id stays quarantined while the row is not final (I1):
// its Kafka transaction stays open for the decision, which goes out by the logged ids.
func (c *Coordinator) await(ctx context.Context, w *work) ended {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.FinishTimeout)
	defer cancel()
	lctx, st := c.step(fctx, PhaseLogPrepared, SpanLogWaiting)
	if w.t.Kafka != nil {
		kafkaAttrs(st.span, w.t.Kafka.KafkaIDs)
	}
	err := c.log.Waiting(lctx, w.t, w.within, c.cfg.External.Bound)
	st.end(err)
	if err != nil {
		return c.decisionUnlogged(fctx, w, "waiting", err)
	}
	c.fault(txntype.FaultAfterLogWaiting)
	if pk, ok := w.ktx.(parker); ok {
		// Quarantined (I1), its producer kept for a decision taken here (kafkatxn/waiting.go).
		pk.Park()
		w.ktx = nil
	}
	c.quarantineID(w)
	return end(w.t, nil)
}

// parker is a Kafka transaction that can be left open for its caller's decision with its
// producer kept (kafkatxn.Txn.Park).
type parker interface{ Park() }

// DecideWaiting takes d on the waiting row gid (X2-X4): one conditional write that either
// accepts the commit (prepared, or committing without Kafka) or claims the abort (aborting,
// with the reason as its error), and then drives the row to its outcome by the usual rules
// (Finish: EndTxn by the logged ids and phase 2, or presumed abort). The row is returned as it
// was left: final, or, when a participant could not be reached, prepared or aborting (its
// outcome fixed), for recovery to finish. An error matching ErrMovedOn: the row was not
// waiting (or, for the deadline, decide_by was not reached): nothing was written.
func (r Rules) DecideWaiting(ctx context.Context, gid string, d txntype.Decision) (*txntype.Transaction, error) {
	cctx, span := startSpan(ctx, SpanLogClaim)
	t, err := r.Log.DecideWaiting(cctx, gid, d)
	EndSpan(span, err)
	if err != nil {
		return nil, err
	}
	r.fault(txntype.FaultAfterDecision)
	_, err = r.Finish(ctx, t, nil)
	return t, err
}

// abortWaiting aborts the open Kafka transaction of a row claimed from waiting, by its logged
// ids (X3, X4), so that read_committed consumers of its partitions move on now rather than at
// Kafka's timeout. An answer that says the transaction is over (aborted, or the epoch moved
// on: the id was re-initialised or Kafka's timeout ended it) is done: nothing can commit it
// since the claim. Anything else is retried by recovery.
func (r Rules) abortWaiting(ctx context.Context, t *txntype.Transaction) error {
	if r.Kafka == nil || t.DecideBy == nil || t.Kafka == nil || t.Kafka.TransactionalID == "" || t.PreparedAt == nil {
		return nil
	}
	ectx, span := startSpan(ctx, SpanEndTxn)
	kafkaAttrs(span, t.Kafka.KafkaIDs)
	err := r.Kafka.EndTxn(ectx, t.Kafka.KafkaIDs, false)
	EndSpan(span, err)
	switch {
	case err == nil, errors.Is(err, txntype.ErrKafkaAborted), txntype.AsFailure(err).Class == txntype.ClassFenced:
		return nil
	}
	return fmt.Errorf("abort the waiting transaction's Kafka side: %w", err)
}
