package recovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/kafkatxn"
)

// errMovedOn: the transaction left the state a pass read (its request finished, another pass
// or an operator resolved it); nothing is left to do.
var errMovedOn = errors.New("transaction moved on")

// resolveTimeout bounds one attempt at one transaction.
const resolveTimeout = 30 * time.Second

// resolve applies the recovery rules (I4, I5, I7) to one transaction that is not final and not
// in flight, logs the final state, and returns its transactional id to the pool (I1). A failed
// attempt is recorded with its error and the next attempt is scheduled after backoff.
func (l *Loop) resolve(ctx context.Context, t *coord.Transaction, own bool) error {
	return l.resolveWith(ctx, t, own, nil)
}

// resolveWith is resolve with a hook that may reword the outcome's error detail before it is
// logged (an operator's abort says who aborted it; retry.go).
func (l *Loop) resolveWith(ctx context.Context, t *coord.Transaction, own bool,
	reword func(coord.State, *coord.ErrorDetail) *coord.ErrorDetail) error {
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	// The caller checked that no request of this process runs the transaction; the row read
	// before that check may be stale: a request that finished in between has logged its final
	// state and released its transactional id, and acting on the stale Kafka ids (EndTxn by an
	// old epoch) would touch an id that serves another transaction now (I1). Re-read it.
	fresh, err := l.log.GetGID(rctx, t.GID)
	if err != nil {
		return err
	}
	if fresh.State != t.State || fresh.State.Final() {
		return errMovedOn
	}
	*t = *fresh
	to, detail, err := l.decide(rctx, t)
	if err == nil {
		if reword != nil {
			detail = reword(to, detail)
		}
		t.Error = detail
		err = l.log.Transition(rctx, t, to)
	}
	if err != nil {
		attempts, _, _ := l.log.Attempts(ctx, t.GID)
		if rerr := l.log.RecordAttempt(ctx, t.GID, err.Error(), l.backoff(attempts)); rerr != nil {
			err = errors.Join(err, rerr)
		}
		l.cfg.Logger.Warn("recovery attempt failed; retrying after backoff", "gid", t.GID,
			"state", t.State, "attempts", attempts+1, "error", err)
		return err
	}
	l.cfg.Logger.Info("in-doubt transaction resolved", "gid", t.GID, "state", to)
	if own {
		l.release(ctx, t)
	}
	return nil
}

// decide finds the outcome and drives the SQL participants to it.
func (l *Loop) decide(ctx context.Context, t *coord.Transaction) (coord.State, *coord.ErrorDetail, error) {
	switch t.State {
	case coord.StateActive:
		return l.presumedAbort(ctx, t)
	case coord.StateCommitting:
		// The decision was commit, durably (no Kafka): commit every SQL participant.
		return l.phase2(ctx, t, true, nil)
	case coord.StatePrepared:
		return l.resumePrepared(ctx, t)
	}
	return "", nil, fmt.Errorf("recovery: %s is %s, not in doubt", t.GID, t.State)
}

// presumedAbort (I5): before prepared nothing was decided, so everything is rolled back. The one
// exception is the one-phase path (one database, no Kafka), which commits without preparing: a
// visible marker row means that commit happened.
func (l *Loop) presumedAbort(ctx context.Context, t *coord.Transaction) (coord.State, *coord.ErrorDetail, error) {
	committed := false
	for _, g := range t.SQLGIDs {
		err := l.sql.RollbackPrepared(ctx, g.Database, g.GID)
		switch {
		case errors.Is(err, coord.ErrHeuristic):
			committed = true // only the one-phase commit leaves a visible marker before prepared
		case err != nil:
			return "", nil, err
		}
	}
	if committed {
		return coord.StateCommitted, nil, nil
	}
	// The Kafka side, if any, is aborted by re-initialising the transactional id: at startup by
	// the pool, in a takeover by Reinit, otherwise when the quarantined id is released.
	return coord.StateAborted, &coord.ErrorDetail{
		Participant: coord.ParticipantCoordinator,
		Class:       coord.ClassRetriable,
		Message:     "presumed abort: the coordinator stopped before the transaction was prepared",
	}, nil
}

// resumePrepared (I5, I7): re-send EndTxn(commit) with the stored ids and follow Kafka's answer;
// when the answer is ambiguous, read the logged offsets back.
func (l *Loop) resumePrepared(ctx context.Context, t *coord.Transaction) (coord.State, *coord.ErrorDetail, error) {
	if t.Kafka == nil || t.Kafka.TransactionalID == "" {
		return coord.StateHeuristic, &coord.ErrorDetail{Participant: coord.ParticipantCoordinator,
			Class: coord.ClassInternal, Message: "prepared without Kafka ids in the log: cannot decide"}, nil
	}
	if l.kafka == nil {
		return "", nil, errors.New("recovery: a prepared transaction needs Kafka, and none is configured")
	}
	err := l.kafka.EndTxn(ctx, t.Kafka.KafkaIDs, true)
	switch {
	case err == nil:
		return l.phase2(ctx, t, true, nil)
	case errors.Is(err, coord.ErrKafkaAborted):
		return l.phase2(ctx, t, false, l.abortReason(ctx, t, err))
	case coord.AsFailure(err).Class != coord.ClassFenced:
		return "", nil, err // unclear (broker down, …): try again later
	}
	// Fenced: someone re-initialised the id, or the epoch moved on. Ask the records (I7).
	committed, oerr := l.kafka.Outcome(ctx, t.Kafka.KafkaIDs, t.Kafka.Records)
	switch {
	case oerr == nil && committed:
		return l.phase2(ctx, t, true, nil)
	case oerr == nil:
		return l.phase2(ctx, t, false, &coord.ErrorDetail{Participant: coord.ParticipantKafka,
			Class:   coord.ClassFenced,
			Message: fmt.Sprintf("EndTxn answered %v; the logged records were aborted (read back with read_committed)", err)})
	case errors.Is(oerr, kafkatxn.ErrUndecidable):
		// Never guess: park it for an operator, with the evidence.
		return coord.StateHeuristic, &coord.ErrorDetail{Participant: coord.ParticipantKafka,
			Class:   coord.ClassFenced,
			Message: fmt.Sprintf("outcome unknown: EndTxn answered %v and %v", err, oerr)}, nil
	}
	return "", nil, fmt.Errorf("EndTxn answered %w; outcome oracle: %w", err, oerr)
}

// abortReason says why Kafka aborted a prepared transaction; the usual cause is that it stayed
// open longer than the Kafka transaction timeout while the coordinator was down.
func (l *Loop) abortReason(ctx context.Context, t *coord.Transaction, err error) *coord.ErrorDetail {
	msg := err.Error()
	if now, nerr := l.log.Now(ctx); nerr == nil && t.PreparedAt != nil && l.cfg.KafkaTxnTimeout > 0 {
		if age := now.Sub(*t.PreparedAt); age > l.cfg.KafkaTxnTimeout {
			msg = fmt.Sprintf("Kafka aborted the transaction: it stayed prepared for %s, longer than the Kafka transaction timeout (%s), before the commit reached Kafka (%v)",
				age.Round(time.Second), l.cfg.KafkaTxnTimeout, err)
		}
	}
	return &coord.ErrorDetail{Participant: coord.ParticipantKafka, Class: coord.ClassAbortable, Message: msg}
}

// phase2 drives every SQL participant to the decision (I4). A participant found resolved the
// other way by someone else makes the outcome heuristic_mixed, with the evidence.
func (l *Loop) phase2(ctx context.Context, t *coord.Transaction, commit bool, cause *coord.ErrorDetail) (coord.State, *coord.ErrorDetail, error) {
	var mixed []string
	for _, g := range t.SQLGIDs {
		var err error
		if commit {
			err = l.sql.CommitPrepared(ctx, g.Database, g.GID)
		} else {
			err = l.sql.RollbackPrepared(ctx, g.Database, g.GID)
		}
		switch {
		case errors.Is(err, coord.ErrHeuristic):
			mixed = append(mixed, err.Error())
		case err != nil:
			return "", nil, err
		}
	}
	if len(mixed) > 0 {
		decision := "abort"
		if commit {
			decision = "commit"
		}
		return coord.StateHeuristicMixed, &coord.ErrorDetail{Participant: coord.ParticipantSQL,
			Class:   coord.ClassInternal,
			Message: fmt.Sprintf("the decision was %s, but %s", decision, strings.Join(mixed, "; "))}, nil
	}
	if commit {
		return coord.StateCommitted, nil, nil
	}
	return coord.StateAborted, cause, nil
}

// release returns the transaction's id to this instance's pool once no transaction in doubt
// names it (I1).
func (l *Loop) release(ctx context.Context, t *coord.Transaction) {
	if l.kafka == nil {
		return
	}
	id := ""
	if t.Kafka != nil {
		id = t.Kafka.TransactionalID
	}
	if qid, ok := l.coord.TakeQuarantined(t.GID); ok {
		id = qid
	}
	if id == "" || !l.kafka.Owns(id) {
		return
	}
	if busy, err := l.log.TransactionalIDInDoubt(ctx, id); err != nil || busy {
		return
	}
	if err := l.kafka.Unquarantine(ctx, id); err != nil {
		l.cfg.Logger.Warn("could not return a transactional id to the pool", "transactional_id", id, "error", err)
	}
}
