package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// The protocol's decisions, written once. The request path (Coordinator) and every resolver
// (the recovery loop, a takeover, an operator's retry or abort) use these rules; nothing else
// decides an outcome.
//
//   - Claim before act: a resolver first makes the row its own with a fenced compare-and-set
//     (ClaimState), and only then touches a participant. Claiming an active row moves it to
//     aborting, which fixes the outcome: the request's own prepared write fails from then on,
//     so nothing can commit Kafka afterwards.
//   - Presumed abort (I5): a row claimed before prepared aborts; every SQL gid is rolled back.
//     A one-phase row (one database, no Kafka) is the exception: its COMMIT was the decision,
//     so its marker decides (SQL.SettleOnePhase), and evidence wins over the claim.
//   - Resume by the stored ids (I5, I7): a prepared row re-sends EndTxn(commit) with the
//     logged (transactionalId, producerId, epoch) and follows Kafka's answer; a fenced answer
//     is read back from the logged offsets; undecidable is heuristic, never a guess.
//   - Phase 2 follows the decision (I4) and is idempotent: a gid already gone is resolved by its
//     marker row; a gid found resolved the other way makes the row heuristic_mixed, with the
//     evidence.

// ClaimState is the state a resolver claims a row in: active becomes aborting (the outcome is
// fixed), the others keep their state and change owner. ok=false for final states.
func ClaimState(s txntype.State) (to txntype.State, ok bool) {
	switch s {
	case txntype.StateActive, txntype.StateAborting:
		return txntype.StateAborting, true
	case txntype.StatePrepared, txntype.StateCommitting:
		return s, true
	}
	return "", false
}

// Rules applies the protocol's decisions to a row nobody runs.
type Rules struct {
	Log   txntype.Log
	SQL   txntype.SQL
	Kafka txntype.Kafka // nil: no Kafka configured
	// Oracle reads a fenced transaction's outcome back (nil: such a row stays in doubt).
	Oracle txntype.Oracle
	// KafkaTxnTimeout explains Kafka's aborts of rows left prepared too long (0: no note).
	KafkaTxnTimeout time.Duration
	// Now is the database's clock (nil: this process's).
	Now func(context.Context) (time.Time, error)
	// Fault, when set, is called at the decision's step boundaries (test-only, as
	// Config.Fault).
	Fault func(txntype.FaultPoint)
}

func (r Rules) fault(p txntype.FaultPoint) {
	if r.Fault != nil {
		r.Fault(p)
	}
}

// Resolve claims t for by and drives it to its outcome: the claim (ClaimState), then the
// participants, then the final state, every write fenced by by. reword, when set, may change the
// outcome's error detail before it is logged (an operator's abort says who aborted). An error
// matching ErrMovedOn means someone else claimed or finished the row first: nothing was touched.
func (r Rules) Resolve(ctx context.Context, t *txntype.Transaction, by txntype.Fence,
	reword func(txntype.State, *txntype.ErrorDetail) *txntype.ErrorDetail) (txntype.State, error) {
	to, ok := ClaimState(t.State)
	if !ok {
		return t.State, fmt.Errorf("%s is %s: %w", t.GID, t.State, txntype.ErrMovedOn)
	}
	cctx, span := startSpan(ctx, SpanLogClaim)
	if span.IsRecording() {
		span.SetAttributes(AttrState.String(string(to)))
	}
	err := r.Log.Claim(cctx, t, by, to)
	EndSpan(span, err)
	if err != nil {
		return t.State, err
	}
	return r.Finish(ctx, t, reword)
}

// Finish drives a row claimed by this resolver to its outcome (Decide) and logs the final state,
// fenced by the claim's owner and epoch. Every step repeats idempotently, so a row whose earlier
// attempt got part of the way is finished the same way.
func (r Rules) Finish(ctx context.Context, t *txntype.Transaction, reword func(txntype.State, *txntype.ErrorDetail) *txntype.ErrorDetail) (txntype.State, error) {
	final, detail, err := r.Decide(ctx, t)
	if err != nil {
		return t.State, err
	}
	if reword != nil {
		detail = reword(final, detail)
	}
	t.Error = detail
	r.fault(txntype.FaultDecisionBeforeFinalLog)
	fctx, span := startSpan(ctx, SpanLogFinal)
	if span.IsRecording() {
		span.SetAttributes(AttrState.String(string(final)))
		spanDetail(span, detail)
	}
	err = r.Log.Transition(fctx, t, final)
	EndSpan(span, err)
	if err != nil {
		return t.State, err
	}
	return final, nil
}

// Decide finds the outcome of a claimed row and drives the SQL participants to it.
func (r Rules) Decide(ctx context.Context, t *txntype.Transaction) (txntype.State, *txntype.ErrorDetail, error) {
	switch t.State {
	case txntype.StateAborting:
		return r.presumedAbort(ctx, t)
	case txntype.StateCommitting:
		// The decision was commit, durably (no Kafka): commit every SQL participant.
		return r.phase2(ctx, t, true, nil)
	case txntype.StatePrepared:
		return r.resumePrepared(ctx, t)
	}
	return "", nil, fmt.Errorf("%s is %s, not claimed in doubt", t.GID, t.State)
}

// presumedAbort (I5): before prepared nothing was decided, so everything is rolled back. A
// one-phase row is decided by its marker (its COMMIT was the decision).
func (r Rules) presumedAbort(ctx context.Context, t *txntype.Transaction) (txntype.State, *txntype.ErrorDetail, error) {
	if t.OnePhase && len(t.SQLGIDs) == 1 {
		g := t.SQLGIDs[0]
		committed, err := r.SQL.SettleOnePhase(ctx, g.Database, g.GID)
		if err != nil {
			return "", nil, err
		}
		if committed {
			return txntype.StateCommitted, nil, nil
		}
		// Not retriable under the same id: the fencing marker holds the gid, so the same gid
		// cannot commit again (which is what makes this abort certain).
		return txntype.StateAborted, &txntype.ErrorDetail{Participant: txntype.ParticipantCoordinator, Class: txntype.ClassAbortable,
			Message: "the one-phase commit did not happen: recovery found no marker and fenced the gid; send the request again with a new id"}, nil
	}
	// A row claimed from waiting (X3, X4) has its Kafka transaction open under logged ids:
	// aborted by them, and its claim's reason is its outcome's.
	if t.DecideBy != nil {
		if err := r.abortWaiting(ctx, t); err != nil {
			return "", nil, err
		}
		r.fault(txntype.FaultDecisionAfterEndTxn)
		if t.Error != nil {
			return r.phase2(ctx, t, false, t.Error)
		}
	}
	// The Kafka side, if any, is aborted by re-initialising the transactional id: at startup by
	// the pool, in a takeover by Reinit, otherwise when the quarantined id is released.
	// Abortable, not retriable: the request may already have answered 409 from the claim
	// (Coordinator.yield), and a same-id retry of a retriable row would run it again; an id is
	// never answered 409 and later 200 (txlog.Begin re-runs only rows logged retriable).
	return r.phase2(ctx, t, false, &txntype.ErrorDetail{
		Participant: txntype.ParticipantCoordinator,
		Class:       txntype.ClassAbortable,
		Message:     "presumed abort: the transaction was not prepared when a resolver claimed it",
	})
}

// resumePrepared (I5, I7): re-send EndTxn(commit) with the stored ids and follow Kafka's answer;
// when the answer is fenced, read the logged offsets back.
func (r Rules) resumePrepared(ctx context.Context, t *txntype.Transaction) (txntype.State, *txntype.ErrorDetail, error) {
	if t.Kafka == nil || t.Kafka.TransactionalID == "" {
		return txntype.StateHeuristic, &txntype.ErrorDetail{Participant: txntype.ParticipantCoordinator,
			Class: txntype.ClassInternal, Message: "prepared without Kafka ids in the log: cannot decide"}, nil
	}
	if r.Kafka == nil {
		return "", nil, errors.New("a prepared transaction needs Kafka, and none is configured")
	}
	err := r.endTxn(ctx, t.Kafka.KafkaIDs)
	switch {
	case err == nil:
		r.fault(txntype.FaultDecisionAfterEndTxn)
		return r.phase2(ctx, t, true, nil)
	case errors.Is(err, txntype.ErrKafkaAborted):
		return r.phase2(ctx, t, false, r.abortReason(ctx, t, err))
	case txntype.AsFailure(err).Class != txntype.ClassFenced || r.Oracle == nil:
		return "", nil, err // unclear (broker down, …): try again later
	}
	// Fenced: someone re-initialised the id, or the epoch moved on. Ask the records (I7).
	committed, oerr := r.Oracle.Outcome(ctx, t.Kafka.KafkaIDs, t.Kafka.Records)
	switch {
	case oerr == nil && committed:
		return r.phase2(ctx, t, true, nil)
	case oerr == nil:
		return r.phase2(ctx, t, false, &txntype.ErrorDetail{Participant: txntype.ParticipantKafka, Class: txntype.ClassFenced,
			Message: fmt.Sprintf("EndTxn answered %v; the logged records were aborted (read back with read_committed)", err)})
	case errors.Is(oerr, txntype.ErrUndecidable):
		// Never guess: park it for an operator, with the evidence.
		return txntype.StateHeuristic, &txntype.ErrorDetail{Participant: txntype.ParticipantKafka, Class: txntype.ClassFenced,
			Message: fmt.Sprintf("outcome unknown: EndTxn answered %v and %v", err, oerr)}, nil
	}
	return "", nil, fmt.Errorf("EndTxn answered %w; outcome oracle: %w", err, oerr)
}

// abortReason says why Kafka aborted a prepared transaction; the usual cause is that it stayed
// open longer than the Kafka transaction timeout while no coordinator finished it.
func (r Rules) abortReason(ctx context.Context, t *txntype.Transaction, err error) *txntype.ErrorDetail {
	msg := err.Error()
	now := time.Now()
	if r.Now != nil {
		if n, nerr := r.Now(ctx); nerr == nil {
			now = n
		}
	}
	if t.PreparedAt != nil && r.KafkaTxnTimeout > 0 {
		if age := now.Sub(*t.PreparedAt); age > r.KafkaTxnTimeout {
			msg = fmt.Sprintf("Kafka aborted the transaction: it stayed prepared for %s, longer than the Kafka transaction timeout (%s), before the commit reached Kafka (%v)",
				age.Round(time.Second), r.KafkaTxnTimeout, err)
		}
	}
	return &txntype.ErrorDetail{Participant: txntype.ParticipantKafka, Class: txntype.ClassAbortable, Message: msg}
}

// phase2 drives every SQL participant to the decision (I4) and names the outcome.
func (r Rules) phase2(ctx context.Context, t *txntype.Transaction, commit bool, cause *txntype.ErrorDetail) (txntype.State, *txntype.ErrorDetail, error) {
	mixed, failed := finishSQL(ctx, r.SQL, t.SQLGIDs, commit)
	if len(mixed) > 0 {
		return txntype.StateHeuristicMixed, mixedDetail(commit, mixed), nil
	}
	if failed != nil {
		return "", nil, failed
	}
	if commit {
		return txntype.StateCommitted, nil, nil
	}
	return txntype.StateAborted, cause, nil
}

// finishSQL commits or rolls back every gid, concurrently, following the decision (I4). mixed
// lists the gids found resolved the other way by someone else (ErrHeuristic); failed is the
// first other error (the gid's outcome is still to be driven).
func finishSQL(ctx context.Context, sql txntype.SQL, gids []txntype.SQLGID, commit bool) (mixed []string, failed error) {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for _, g := range gids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, span := startSpan(ctx, SpanSQLPhase2)
			if span.IsRecording() {
				span.SetAttributes(AttrDatabase.String(g.Database), AttrDecision.String(decision(commit)))
			}
			var err error
			if commit {
				err = sql.CommitPrepared(sctx, g.Database, g.GID)
			} else {
				err = sql.RollbackPrepared(sctx, g.Database, g.GID)
			}
			EndSpan(span, err)
			if err == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, txntype.ErrHeuristic) {
				mixed = append(mixed, err.Error())
			} else if failed == nil {
				failed = err
			}
		}()
	}
	wg.Wait()
	return mixed, failed
}

// mixedDetail is the evidence of a heuristic_mixed outcome.
func mixedDetail(commit bool, mixed []string) *txntype.ErrorDetail {
	decision := "abort"
	if commit {
		decision = "commit"
	}
	return &txntype.ErrorDetail{Participant: txntype.ParticipantSQL, Class: txntype.ClassInternal,
		Message: fmt.Sprintf("the decision was %s, but %s", decision, strings.Join(mixed, "; "))}
}

// Answer is what a request says about a stored row: committed is 200, aborted 409 (503 when
// the abort was retriable and caused by an unavailable dependency), an aborting row that is not
// one-phase 409 (its outcome is fixed: abort), anything else in doubt (202).
func Answer(t *txntype.Transaction, cause error) (*txntype.Transaction, error) {
	switch {
	case t.State == txntype.StateCommitted:
		return t, nil
	case t.State == txntype.StateAborted:
		if t.Error != nil && t.Error.Class == txntype.ClassRetriable && cause != nil && txntype.AsFailure(cause).Unavailable {
			return t, &txntype.OutcomeError{Sentinel: txntype.ErrUnavailable, Txn: t, Cause: cause}
		}
		return t, &txntype.OutcomeError{Sentinel: txntype.ErrAborted, Txn: t, Cause: cause}
	case t.State == txntype.StateAborting && !t.OnePhase:
		return t, &txntype.OutcomeError{Sentinel: txntype.ErrAborted, Txn: t, Cause: cause}
	case t.State == txntype.StateWaiting:
		// Prepared, waiting for its caller's decision (X1): what the request answered.
		return t, nil
	}
	return t, &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Txn: t, Cause: cause}
}
