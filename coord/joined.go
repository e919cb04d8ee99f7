package coord

import (
	"context"
	"time"
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
	v, ok := ctx.Value(joinedKey{}).(joinMark)
	return v.sealed, ok
}

type joinMark struct{ sealed <-chan struct{} }

// WithJoinedBegin marks ctx as a joined request's Begin (JoinedBegin); sealed (nil: never) is
// closed when its batch stops waiting for a slot.
func WithJoinedBegin(ctx context.Context, sealed <-chan struct{}) context.Context {
	return context.WithValue(ctx, joinedKey{}, joinMark{sealed: sealed})
}

// joined is the path of a member that shares its batch's SQL transaction (sharedsql.go): it
// joins the batch while its row is logged, and so its begin is its wait for the batch too. Its
// phase 1 and its decision are a member's, run by the leader; what the batch told it takes it on
// (member.outcome).
type joined member

// newJoined is w's place in the batch it joins while its row is logged.
func newJoined(ctx context.Context, w *work) *joined {
	return &joined{ctx: ctx, w: w, done: make(chan struct{}), sqlShared: true, begun: make(chan struct{})}
}

// begin checks the records (the start of its phase 1, which the leader runs), joins the batch,
// logs w's row meanwhile, and waits for both: the batch's outcome and the Begin's.
//
// A member that finds a batch open runs its Begin itself once it has joined, as it has nothing
// else to do until its leader answers (a goroutine per request cost about 15 µs of stack growth
// under load); only a leader, which goes on to wait for a slot, logs its row on a goroutine of
// its own. Either way the row is being logged while the batch waits for its slot.
func (j *joined) begin(ctx context.Context, c *Coordinator, w *work, budget time.Duration) begun {
	m := (*member)(j)
	begin := func(bctx context.Context) {
		m.logged = c.begin(bctx, w, budget)
		close(m.begun)
	}
	pctx, st := c.step(ctx, PhasePhase1, SpanPhase1)
	err := c.kafka.CheckRecords(pctx, w.req.Kafka)
	st.end(err)
	switch {
	case err != nil:
		// It joins nothing; once its row is logged, it is aborted with this cause (outcome).
		m.out.fail = err
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
	return m.logged
}

// phase1 is what the batch told it: S7, nothing of it ran before its row was durable, and a
// member whose Begin did not give it a fresh row ended at its begin.
func (j *joined) phase1(ctx context.Context, c *Coordinator, w *work) (ended, bool) {
	return (*member)(j).outcome(ctx, c, w)
}

func (j *joined) detached(ctx context.Context, w *work) context.Context {
	return (*member)(j).detached(ctx, w)
}

func (j *joined) decide(ctx, fctx context.Context, c *Coordinator, w *work) (commit bool, cause error, e ended, done bool) {
	return (*member)(j).decide(ctx, fctx, c, w)
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
			if !m.logged.run {
				close(m.done)
				continue
			}
		}
		riders = append(riders, m)
	}
	return riders
}
