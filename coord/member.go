package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// member is also the path of a request through a shared Kafka transaction (batch.go): its SQL
// side first and alone (B1), then the batch, whose leader produces, logs prepared (B2) and
// decides for every member; then its own phase 2, unless the batch's answered it. A batch that
// did not carry it sends it on alone: its Kafka side alone (alone), or everything from its SQL
// phase on (rerun, S5), then the decision of the alone path.

// shares says whether a request takes the shared path: two-phase with records, sharing on, and
// other requests in flight (a lone request keeps the concurrent SQL ∥ Kafka path and waits for
// nobody).
func (c *Coordinator) shares(w *work) bool {
	// B5: a request with offsets runs its Kafka transaction alone (docs/batching.md).
	// A transaction its caller decides runs its Kafka transaction alone: it stays open until
	// the decision, which no batch can wait for (X1).
	return c.batches != nil && !w.t.OnePhase && !w.req.External && len(w.req.Kafka) > 0 && w.req.KafkaOffsets == nil &&
		(c.running.Load() > 1 || c.batches.always)
}

// newMember is w's place in a batch, routed once its row is logged.
func newMember(ctx context.Context, w *work) *member {
	return &member{ctx: ctx, w: w, done: make(chan struct{})}
}

func (m *member) begin(ctx context.Context, c *Coordinator, w *work, budget time.Duration) begun {
	return c.begin(ctx, w, budget)
}

// phase1 prepares m's SQL side (or, sharing its batch's SQL transaction, leaves it to the
// leader, S1), joins a batch and waits for what the batch tells it (outcome).
func (m *member) phase1(ctx context.Context, c *Coordinator, w *work) (ended, bool) {
	pctx, st := c.step(ctx, PhasePhase1, SpanPhase1)
	err := c.kafka.CheckRecords(pctx, w.req.Kafka)
	m.sqlShared = err == nil && c.sharesSQL(w)
	if err == nil && !m.sqlShared {
		// B1: prepared before joining (or, sharing the SQL transaction, S1: the leader
		// prepares it before producing).
		err = c.phase1(pctx, w, false, false)
		if err == nil {
			// P2: its records are resolved from its results before it joins.
			err = c.materialize(pctx, w)
		}
	}
	st.end(err)
	if err != nil {
		return c.abort(w, err), true
	}
	if bt, lead := c.batches.join(m); lead {
		c.lead(ctx, bt)
	}
	<-m.done
	return m.outcome(ctx, c, w)
}

// outcome takes m on from what its batch told it (m.out, written before m.done was closed):
// an abort, an answer, or its Kafka side alone; the request ends (done) or goes on to decide.
func (m *member) outcome(ctx context.Context, c *Coordinator, w *work) (ended, bool) {
	o := m.out
	switch {
	case o.rerun:
		// S5: nothing of its work is left anywhere: everything alone, from its SQL phase on.
		return alone{}.phase1(ctx, c, w)
	case o.fail != nil:
		return c.abort(w, o.fail), true
	case o.decided:
		// Answered at the batch's decision (D1); its leader runs its phase 2 and final write,
		// and holds the hand-off (finishShared).
		return ended{t: o.answer, handedOff: true}, true
	case o.answer != nil:
		// Committed on both sides by the batch's phase 2; its leader writes the final row, and
		// holds the hand-off (finishShared).
		e := end(Answer(o.answer, nil))
		e.handedOff = true
		return e, true
	case o.alone:
		if err := c.kafkaPhase1(ctx, w); err != nil {
			return c.abort(w, err), true
		}
	}
	return ended{}, false
}

// sentAlone reports whether the batch left m to decide alone (its outcome alone or rerun).
func (m *member) sentAlone() bool { return m.out.alone || m.out.rerun }

// detached: the finish bound of a member decided by its batch hangs off a fresh context with
// the request's trace, as the batch's decision is not the request's to stop.
func (m *member) detached(ctx context.Context, w *work) context.Context {
	if m.sentAlone() {
		return alone{}.detached(ctx, w)
	}
	return w.traced(context.Background())
}

// decide takes the batch's decision for m, or makes its own when the batch sent it alone.
func (m *member) decide(ctx, fctx context.Context, c *Coordinator, w *work) (commit bool, cause error, e ended, done bool) {
	if m.sentAlone() {
		return alone{}.decide(ctx, fctx, c, w)
	}
	o := m.out
	switch {
	case errors.Is(o.prepErr, txntype.ErrMovedOn):
		// Refused: nothing of the batch is logged prepared and its Kafka transaction was
		// aborted; the stored state answers (a resolver's claim, or a lost epoch).
		return false, nil, c.yield(fctx, w, fmt.Errorf("log prepared (shared): %w", o.prepErr), false), true
	case errors.Is(o.prepErr, txntype.ErrLogRefused):
		// Refused by the log's server: nothing of the batch is logged prepared and its Kafka
		// transaction was aborted; the member is aborted with its own SQL.
		return false, nil, c.abort(w, logRefused("prepared (shared)", o.prepErr)), true
	case o.prepErr != nil:
		return false, nil, c.inDoubt(w, fmt.Errorf("log prepared (shared): %w", o.prepErr)), true
	case o.decideErr != nil:
		return false, nil, c.inDoubt(w, o.decideErr), true
	}
	return o.commit, o.cause, ended{}, false
}
