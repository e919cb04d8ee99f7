package coord

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// The answer does not wait for the final write of a commit.
//
// A transaction committed on every participant (Kafka's EndTxn and every COMMIT PREPARED
// answered, or the one-phase COMMIT with its marker) is decided and done: the write that logs it
// committed only tells readers so sooner than recovery would. Recovery does not need it: a row
// left prepared or committing is resumed by its stored ids (I5, I7) and phase 2 is idempotent
// (I4), a one-phase row left active is settled by its marker. So the request is answered 200 as
// soon as phase 2 answered, and the write follows on its own:
//
//   - the row's updated_at and finished_at are the time the answer said (finalStamp), so the
//     stored row and the answer agree;
//   - I1: the transactional id goes back to the pool only after the write (or is quarantined
//     when it fails), as before;
//   - the request stays in flight (recovery leaves it alone) until the write ended, and a read
//     of its id on this instance (Get, the same id sent again) waits for it, so a client that
//     was answered 200 reads committed here. Another instance reading the row within those
//     milliseconds sees it prepared or committing: in doubt, never the other outcome;
//   - a failed or refused write leaves the row to recovery, which finds both sides committed.
//
// Aborts, heuristic outcomes and every write before the decision keep their place on the
// answer's path: their answer depends on the write.

// pendingFinal is a commit whose final write has not ended yet.
type pendingFinal struct{ done chan struct{} }

// finals tracks the pending final writes of a Coordinator.
type finals struct {
	m  sync.Map // gid → *pendingFinal
	wg sync.WaitGroup
}

// finalStamp is the time a committed answer says: now, at microsecond precision (what
// PostgreSQL stores), and after every stamp the row already has, in its time zone.
func finalStamp(ts ...*txntype.Transaction) time.Time {
	at := time.Now().Truncate(time.Microsecond)
	for _, t := range ts {
		if !at.After(t.UpdatedAt) {
			at = t.UpdatedAt.Add(time.Microsecond).Truncate(time.Microsecond)
		}
	}
	if len(ts) > 0 {
		at = at.In(ts[0].UpdatedAt.Location())
	}
	return at
}

// committedAnswer is the answer of w's transaction, committed at at, as its final write will
// store it. A copy: the final write goes on updating w.t.
func committedAnswer(w *work, at time.Time) *txntype.Transaction {
	a := *w.t
	a.State, a.UpdatedAt, a.FinishedAt = txntype.StateCommitted, at, &at
	return &a
}

// handOff marks w's final write pending: from now on the write, not the request, ends w's time
// in flight (finalDone).
func (c *Coordinator) handOff(w *work) *pendingFinal {
	p := &pendingFinal{done: make(chan struct{})}
	c.finals.m.Store(w.t.GID, p)
	c.finals.wg.Add(1)
	return p
}

// finalDone ends a pending final write: the transaction leaves the in-flight set and readers
// waiting for it go on.
func (c *Coordinator) finalDone(w *work, p *pendingFinal) {
	c.finals.m.Delete(w.t.GID)
	close(p.done)
	c.land(w.t.GID, w.flight)
	c.finals.wg.Done()
}

// answerCommitted answers w committed now and writes the final row behind the answer, which
// holds the hand-off.
func (c *Coordinator) answerCommitted(w *work) ended {
	c.fault(txntype.FaultBeforeFinalLog)
	if w.atDecision {
		// Answered at its decision (D1): this is the goroutine behind that answer, which holds
		// the hand-off; the write is its last step.
		ctx, cancel := context.WithTimeout(w.traced(context.Background()), c.cfg.FinishTimeout)
		defer cancel()
		lctx, st := c.finalStep(ctx)
		c.writeCommitted(lctx, st, w, finalStamp(w.t))
		return ended{t: w.t, handedOff: true}
	}
	gid := w.t.GID // w.t is the final write's from the handoff on
	at := finalStamp(w.t)
	answer := committedAnswer(w, at)
	p := c.handOff(w)
	ctx, cancel := context.WithTimeout(w.traced(context.Background()), c.cfg.FinishTimeout)
	lctx, st := c.finalStep(ctx)
	go func() {
		defer cancel()
		defer c.finalDone(w, p)
		c.writeCommitted(lctx, st, w, at)
	}()
	c.cfg.Logger.Debug("transaction committed; its final write follows", "gid", gid)
	e := end(Answer(answer, nil))
	e.handedOff = true
	return e
}

// finalStep starts the step of a committed write. It starts before the answer goes: a span
// starts only under a recording parent, and the request's span ends with the answer.
func (c *Coordinator) finalStep(ctx context.Context) (context.Context, step) {
	ctx, st := c.step(ctx, PhaseLogFinal, SpanLogFinal)
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrState.String(string(txntype.StateCommitted)))
	}
	return ctx, st
}

// writeCommitted logs w's transaction committed at at, in the step st started, then returns its
// transactional id to the pool (I1). A write that fails leaves the row prepared (or committing,
// or active for a one-phase row) and the id quarantined: recovery resumes the row by its stored
// ids and finds every participant committed.
func (c *Coordinator) writeCommitted(ctx context.Context, st step, w *work, at time.Time) {
	err := c.log.Committed(ctx, w.t, at)
	st.end(err)
	switch {
	case errors.Is(err, txntype.ErrMovedOn):
		// A resolver claimed it (and finds it committed), or an earlier copy of this write
		// landed although its answer was lost (a batch's).
		c.cfg.Logger.Warn("row moved on before its committed write; left to its resolver",
			"gid", w.t.GID, "error", err)
		c.quarantineID(w)
	case err != nil:
		c.cfg.Logger.Error("final log write failed; recovery completes it", "gid", w.t.GID,
			"state", txntype.StateCommitted, "error", err)
		c.quarantineID(w)
	case w.ktx != nil:
		w.ktx.Release(true)
		w.ktx = nil
	}
}

// awaitFinal waits until the final write of gid, if one is pending, has ended (or ctx is done).
func (c *Coordinator) awaitFinal(ctx context.Context, gid string) {
	v, ok := c.finals.m.Load(gid)
	if !ok {
		return
	}
	select {
	case <-v.(*pendingFinal).done:
	case <-ctx.Done():
	}
}

// WaitFinals waits until every pending final write has ended, or ctx is done (a shutdown waits
// for them: a write cut off leaves its row to recovery at the next start).
func (c *Coordinator) WaitFinals(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		c.finals.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
