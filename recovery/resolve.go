package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/txntype"
)

// errMovedOn: the transaction left the state a pass read, or another resolver claimed it first
// (its request finished, another pass, an instance or an operator resolved it); nothing is left
// to do here.
var errMovedOn = txntype.ErrMovedOn

// resolveTimeout bounds one attempt at one transaction.
const resolveTimeout = 30 * time.Second

// resolve applies the protocol's rules (coord.Rules: claim, then presumed abort, resume by the
// stored ids or phase 2) to one transaction that is not final and not in flight, logs the final
// state, and returns its transactional id to the pool (I1). A failed attempt is recorded with
// its error and the next attempt is scheduled after backoff.
func (l *Loop) resolve(ctx context.Context, t *txntype.Transaction, own bool) error {
	return l.ResolveOne(ctx, t, own, nil)
}

// ResolveOne is resolve with a hook that may reword the outcome's error detail before it is
// logged (an operator's abort says who aborted it). The operator's actions (operator.Desk) call
// it once they have made sure that no live process works on t (I8, I9); own: t is this
// instance's, whose transactional id goes back to its pool. A row that moved on meanwhile
// returns an error wrapping txntype.ErrMovedOn.
func (l *Loop) ResolveOne(ctx context.Context, t *txntype.Transaction, own bool,
	reword func(txntype.State, *txntype.ErrorDetail) *txntype.ErrorDetail) (err error) {
	ctx, span := coord.StartSpan(ctx, SpanResolve)
	coord.TransactionAttrs(span, t)
	var to txntype.State
	defer func() { endResolve(span, to, err) }()
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	// The caller checked that no request of this process runs the transaction; the row read
	// before that check may be stale: a request that finished in between has logged its final
	// state and released its transactional id, and acting on the stale Kafka ids (EndTxn by an
	// old epoch) would touch an id that serves another transaction now (I1). Re-read it. (The
	// claim below is a compare-and-set on what is read here.)
	fresh, err := l.log.GetGID(rctx, t.GID)
	if err != nil {
		return err
	}
	if fresh.State != t.State || fresh.State.Final() {
		return errMovedOn
	}
	*t = *fresh
	by, err := l.own.Fence()
	if err != nil {
		return err // this instance cannot write: its lock is being claimed again
	}
	to, err = l.rules().Resolve(rctx, t, by, reword)
	if errors.Is(err, txntype.ErrMovedOn) {
		return errMovedOn
	}
	if err != nil {
		return l.failed(ctx, t, err)
	}
	l.resolved(ctx, t, to, own)
	return nil
}

// failed records a failed attempt at t (its count and error, the next attempt after backoff)
// and returns err, with the recording's own error if any.
func (l *Loop) failed(ctx context.Context, t *txntype.Transaction, err error) error {
	attempts, _, _ := l.log.Attempts(ctx, t.GID)
	if rerr := l.log.RecordAttempt(ctx, t.GID, err.Error(), l.backoff(attempts)); rerr != nil {
		err = errors.Join(err, rerr)
	}
	l.cfg.Logger.Warn("recovery attempt failed; retrying after backoff", "gid", t.GID,
		"state", t.State, "attempts", attempts+1, "error", err)
	return err
}

// resolved says that t reached its final state to and, for this instance's own rows, returns
// its transactional id to the pool (I1: only now that the final state is durable).
func (l *Loop) resolved(ctx context.Context, t *txntype.Transaction, to txntype.State, own bool) {
	l.cfg.Logger.Info("in-doubt transaction resolved", "gid", t.GID, "state", to)
	if own {
		l.release(ctx, t)
	}
}

// rules are the protocol's decisions over this loop's participants.
func (l *Loop) rules() coord.Rules {
	r := coord.Rules{Log: l.log, SQL: l.sql, KafkaTxnTimeout: l.cfg.KafkaTxnTimeout, Now: l.log.Now, Fault: l.cfg.Fault}
	if l.kafka != nil {
		r.Kafka, r.Oracle = l.kafka, oracle{l.kafka}
	}
	return r
}

// oracle is the Kafka pool's outcome oracle with coord's sentinel for undecidable outcomes.
type oracle struct{ p *kafkatxn.Pool }

func (o oracle) Outcome(ctx context.Context, ids txntype.KafkaIDs, recs []txntype.RecordOffset) (bool, error) {
	committed, err := o.p.Outcome(ctx, ids, recs)
	if errors.Is(err, kafkatxn.ErrUndecidable) {
		err = fmt.Errorf("%w: %w", txntype.ErrUndecidable, err)
	}
	return committed, err
}

// release returns the transaction's id to this instance's pool once no transaction in doubt
// names it (I1).
func (l *Loop) release(ctx context.Context, t *txntype.Transaction) {
	if id := l.idOf(t); id != "" {
		l.releaseID(ctx, id)
	}
}

// idOf is the pool id a resolved transaction held: the one it left quarantined, or its
// logged one ("" without Kafka, or when the id is not this instance's).
func (l *Loop) idOf(t *txntype.Transaction) string {
	if l.kafka == nil {
		return ""
	}
	id := ""
	if t.Kafka != nil {
		id = t.Kafka.TransactionalID
	}
	if qid, ok := l.coord.TakeQuarantined(t.GID); ok {
		id = qid
	}
	if id == "" || !l.kafka.Owns(id) {
		return ""
	}
	return id
}

// releaseID returns a pool id once no transaction in doubt names it (I1).
func (l *Loop) releaseID(ctx context.Context, id string) {
	if busy, err := l.log.TransactionalIDInDoubt(ctx, id); err != nil || busy {
		return
	}
	if err := l.kafka.Unquarantine(ctx, id); err != nil {
		l.cfg.Logger.Warn("could not return a transactional id to the pool", "transactional_id", id, "error", err)
	}
}
