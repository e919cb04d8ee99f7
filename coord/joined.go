package coord

import (
	"context"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// Joining while the row is logged (docs/batching.md section 12.6). A request whose SQL will run in
// its batch's shared transaction has nothing to run before the leader does: it joins the open
// batch at once and its Begin runs meanwhile, so that logging the row overlaps the wait for the
// batch's slot instead of preceding it. The rule that makes this safe:
//
//   - S7 (I5, I6 for a member that joined early): nothing of a member runs before its row is
//     durable. The leader waits for the Begin of every member once it holds the slot, before
//     the batch's SQL or Kafka steps (awaitBegins), and leaves out, untouched, every member whose
//     Begin did not give it a fresh row; such a member answers from its Begin (a stored row, an
//     id conflict, the log unavailable), exactly as it would have before joining.

type joinedKey struct{}

// JoinedBegin reports whether ctx is the Begin of a request that joined its batch while its row
// is logged and every slot was taken: the leader waits for it only once the batch holds a slot,
// so the log may hold it briefly to share a flush with the Begins that arrive with it (txlog's
// group commit). sealed is closed when the batch holds its slot (or gave up waiting for one):
// the leader is then waiting for this Begin, and the log holds it no longer. With a slot free
// the batch runs at once, and its Begins are on its path.
func JoinedBegin(ctx context.Context) (sealed <-chan struct{}, ok bool) {
	v, ok := ctx.Value(joinedKey{}).(joined)
	return v.sealed, ok
}

type joined struct{ sealed <-chan struct{} }

// WithJoinedBegin marks ctx as a joined request's Begin (JoinedBegin); sealed (nil: never) is
// closed when its batch stops waiting for a slot.
func WithJoinedBegin(ctx context.Context, sealed <-chan struct{}) context.Context {
	return context.WithValue(ctx, joinedKey{}, joined{sealed: sealed})
}

// runJoined runs a request that shares its batch's SQL transaction, joining the batch while its
// row is logged. ran: the row was fresh and the request ran (its outcome counts).
//
// A member that finds a batch open runs its Begin itself once it has joined, as it has nothing
// else to do until its leader answers (a goroutine per request cost about 15 µs of stack growth
// under load); only a leader, which goes on to wait for a slot, logs its row on a goroutine of
// its own. Either way the row is being logged while the batch waits for its slot.
func (c *Coordinator) runJoined(ctx context.Context, w *work, budget time.Duration) (t *txntype.Transaction, ran bool, err error) {
	m := &member{ctx: ctx, w: w, done: make(chan struct{}), sqlShared: true, begun: make(chan struct{})}
	begin := func(bctx context.Context) {
		m.begin = c.begin(bctx, w, budget)
		close(m.begun)
	}
	pctx, st := c.step(ctx, PhasePhase1, SpanPhase1)
	err = c.kafka.CheckRecords(pctx, w.req.Kafka)
	st.end(err)
	switch {
	case err != nil:
		begin(ctx)
	default:
		bt, lead := c.batches.join(m)
		bctx := ctx
		if c.batches.busy() {
			// The batch it joined waits for a slot: its Begin may wait for company meanwhile,
			// until the batch is sealed.
			bctx = WithJoinedBegin(ctx, bt.sealed)
		}
		if lead {
			go begin(bctx)
			c.lead(ctx, bt)
		} else {
			begin(bctx)
		}
		<-m.done
	}
	<-m.begun
	if !m.begin.run {
		return m.begin.t, false, m.begin.err
	}
	if err != nil {
		t, err = c.abort(w, err)
		return t, true, err
	}
	t, err = c.afterBatch(ctx, w, m.out)
	return t, true, err
}

// awaitBegins waits for the Begin of every member that joined while its row was logged and
// returns the members that may ride: the others are told at once, and nothing of theirs ran
// (S7). A member whose Begin has not answered by the end of the batch's budget runs alone from
// its SQL phase on, if its row turns out fresh.
func awaitBegins(ctx context.Context, members []*member) []*member {
	riders := members[:0:0]
	for _, m := range members {
		if m.begun != nil {
			select {
			case <-m.begun:
			case <-ctx.Done():
				m.out.rerun = true
				close(m.done)
				continue
			}
			if !m.begin.run {
				close(m.done)
				continue
			}
		}
		riders = append(riders, m)
	}
	return riders
}
