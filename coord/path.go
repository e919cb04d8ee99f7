package coord

import (
	"context"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// Request paths. A request takes one of three paths, each a type whose methods are its steps,
// and drive runs every path in one order: begin (log the row active), phase 1, decide, then the
// answer at the decision (D1) or phase 2 with its final write.
//
//   - alone (alone.go): its SQL side ∥ its Kafka side, then its own prepared (or committing)
//     write and EndTxn. A one-phase request ends at its phase 1: its COMMIT is the decision.
//   - member (member.go): its SQL side prepared on its own first (B1), then its batch's shared
//     Kafka transaction decides it. A batch that did not carry it sends it on alone from there.
//   - joined (joined.go): a member whose SQL runs in its batch's shared SQL transaction; it
//     joins the batch while its row is logged (S7).
//
// Every step that ends the request returns an ended: its answer, and whether the final write
// running on behind that answer now owns the request's place in flight.

// ended is a request's answer, as the step that ended it gives it.
type ended struct {
	t   *txntype.Transaction
	err error
	// handedOff: the request was answered committed (or committing, D1) and its final write,
	// running on, owns its place in flight and its transactional id (finals.go).
	handedOff bool
}

// end is the ended of an answer that hands nothing off.
func end(t *txntype.Transaction, err error) ended { return ended{t: t, err: err} }

// path is one way of a request through the protocol, as drive runs it.
type path interface {
	// begin logs w's row active (step 1); the request runs on only when it answers run.
	begin(ctx context.Context, c *Coordinator, w *work, budget time.Duration) begun
	// phase1 brings every participant of w to prepared (or, one-phase, committed); done: the
	// request ended there (a failure, its one-phase commit, or its batch answered it).
	phase1(ctx context.Context, c *Coordinator, w *work) (e ended, done bool)
	// detached is the parent of the finish bound under which w is decided and finished: past
	// phase 1 the caller's context no longer stops anything (I3).
	detached(ctx context.Context, w *work) context.Context
	// decide makes (or takes) the decision of w, all of it prepared; done: the request ended
	// before a decision was known (an abort, a claim, in doubt).
	decide(ctx, fctx context.Context, c *Coordinator, w *work) (commit bool, cause error, e ended, done bool)
}

// route chooses w's path. Whether a request shares a Kafka transaction is decided at two
// points, as it always was (docs/decisions.md, "A request's path is a type"): before its row is
// logged, only a request whose SQL its batch runs is routed (joined: it joins while its row is
// logged, S7); every other request is routed once its row is logged (logged), reading the
// requests in flight then. nil: not routed yet.
func (c *Coordinator) route(ctx context.Context, w *work, logged bool) path {
	switch {
	case !logged && c.shares(w) && c.sharesSQL(w):
		return newJoined(ctx, w)
	case !logged:
		return nil
	case c.shares(w):
		return newMember(ctx, w)
	}
	return alone{}
}

// drive runs w along p (nil: routed once its row is logged): begin, phase 1, decide, then the
// answer at the decision (D1) or phase 2 with its final write. ran: the row was fresh and the
// request ran (its outcome counts).
//
// No closure and no context beyond the steps' own: the untraced request path allocates only
// what its steps do.
func (c *Coordinator) drive(ctx context.Context, w *work, p path, budget time.Duration) (e ended, ran bool) {
	var b begun
	if p != nil {
		b = p.begin(ctx, c, w, budget)
	} else {
		b = c.begin(ctx, w, budget)
	}
	if !b.run {
		return end(b.t, b.err), false
	}
	if p == nil {
		p = c.route(ctx, w, true)
	}
	if e, done := p.phase1(ctx, c, w); done {
		return e, true
	}
	if w.within > 0 {
		// Its caller decides (X1): the row waits, and the caller is answered prepared.
		return c.await(ctx, w), true
	}
	// Past this point the coordinator never aborts on its own (I3): the caller's context no
	// longer stops anything, only the finish bound does.
	fctx, cancel := context.WithTimeout(p.detached(ctx, w), c.cfg.FinishTimeout)
	defer cancel()
	commit, cause, e, done := p.decide(ctx, fctx, c, w)
	if done {
		return e, true
	}
	if commit && w.atDecision {
		return c.answerDecided(w), true
	}
	return c.phase2(fctx, w, commit, cause), true
}
