package coord

import (
	"bytes"
	"context"
	"errors"
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
//   - S8 (docs/batching.md section 12.7): a member that joins while every slot is taken logs no
//     row before its batch's prepared write, which inserts it (batcher.join sets deferred).
//     Nothing of it runs outside the batch's shared transactions, which no row names before
//     that write (S2, S3). The write carries an anchor, a member whose row was active before
//     the shared transactions were created (anchored), so that the tombstone rule still holds;
//     a batch left without one fails before the write and its members run again alone. A
//     deferred member whose id has a row already is left out before anything runs
//     (awaitBegins), and one the write did not log gets its row from a late Begin (settle)
//     before anything else of it happens: its abort, its answer, or its run alone.

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
		if m.deferred {
			<-m.done
			j.settle(ctx, c, w, budget)
			return m.logged
		}
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
//
// S8: meanwhile it reads which deferred members' ids have a row; such a member runs alone, its
// Begin first, which answers it as a repeated id. So do all of them when no member has a row to
// anchor the write, or when the read fails.
func (c *Coordinator) awaitBegins(ctx context.Context, members []*member) []*member {
	var ids []string
	for _, m := range members {
		if m.deferred {
			ids = append(ids, m.w.t.ID)
		}
	}
	var seen map[string]bool
	var seenErr error
	read := make(chan struct{})
	if len(ids) > 0 {
		go func() {
			defer close(read)
			seen, seenErr = c.log.Existing(ctx, ids)
		}()
	}
	riders := members[:0:0]
	for _, m := range members {
		if m.deferred {
			riders = append(riders, m)
			continue
		}
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
	if len(ids) == 0 {
		return riders
	}
	<-read
	anchor := anchored(riders)
	if seenErr != nil {
		c.cfg.Logger.Warn("reading the ids of members with no row failed; they run alone", "members", len(ids), "error", seenErr)
	}
	out := riders[:0]
	for _, m := range riders {
		if m.deferred && (!anchor || seenErr != nil || seen[m.w.t.ID]) {
			m.out.rerun = true
			close(m.done)
			continue
		}
		out = append(out, m)
	}
	return out
}

// errNoAnchor: every rider of a batch is deferred (S8).
var errNoAnchor = errors.New("coord: no member of the batch has a row older than its shared transactions (S8)")

// anchored reports whether a member of riders has a row of its own, active before the batch's
// shared transactions were created: the anchor of its prepared write (S8).
func anchored(riders []*member) bool {
	for _, m := range riders {
		if !m.deferred {
			return true
		}
	}
	return false
}

// settle gives a deferred member its row (S8) once its batch told it its outcome. The
// prepared write logged it: that row. Otherwise a late Begin logs it, with its own gids,
// before anything else of it happens; then, for a member the batch carried to its write:
//   - the write refused: nothing of the batch can commit, and the member is aborted (its
//     shared transaction and Kafka transaction were rolled back by the leader);
//   - the write's answer lost: a fresh row means the write can never land (its insert would
//     meet this row), and the row is the member's in-doubt answer, as for any member; the
//     write's own row found (its ids) means it landed. Another run's row means it cannot land.
//
// A Begin that fails answers as a Begin does (503, or in doubt when its answer was lost), and
// the member's share of the batch's id is quarantined when the write may still land.
func (j *joined) settle(ctx context.Context, c *Coordinator, w *work, budget time.Duration) {
	m := (*member)(j)
	if m.out.logged {
		m.logged = begun{run: true, stored: w.t}
		return
	}
	kafka, gids := w.t.Kafka, w.t.SQLGIDs
	w.t.Kafka, w.t.SQLGIDs, w.t.RowDeferred = nil, m.ownGIDs, false
	// The request's budget may be spent: the batch ran on within the longest of its members'.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.FinishTimeout)
	defer cancel()
	bctx, st := c.step(lctx, PhaseLogBegin, SpanLogBegin)
	stored, created, err := c.log.Begin(bctx, w.t)
	st.end(err)
	prepErr := m.out.prepErr
	refused := errors.Is(prepErr, txntype.ErrMovedOn) || errors.Is(prepErr, txntype.ErrLogRefused)
	restore := func() { w.t.Kafka, w.t.SQLGIDs = kafka, gids }
	switch {
	case prepErr == nil:
		// Nothing of the batch was written, and it holds no share of the batch's id.
	case err == nil && created:
		w.t = stored
		restore()
		if refused {
			m.out.prepErr = nil
			m.out.fail = logRefused("prepared (shared)", prepErr)
		}
		m.logged = begun{run: true, stored: w.t}
		return
	case err == nil && kafka != nil && stored.Kafka != nil && stored.Kafka.KafkaIDs == kafka.KafkaIDs &&
		stored.GID == w.t.GID && bytes.Equal(stored.Digest, w.t.Digest):
		// The write landed: the member goes on as one whose write's answer was lost (in doubt).
		w.t.CreatedAt = stored.CreatedAt
		restore()
		m.logged = begun{run: true, stored: w.t}
		return
	case err != nil && !refused:
		// The write may still land: the id stays out of the pool (I1, B4).
		restore()
		c.quarantineID(w)
	default:
		// No row of the batch can name its Kafka transaction: refused, or another run of the id
		// holds the row the write would insert.
		if w.ktx != nil {
			w.ktx.Release(true)
			w.ktx = nil
		}
	}
	b := beginAnswer(lctx, w.t, stored, created, err, budget)
	if b.run {
		w.t = b.stored
	}
	m.logged = b
}
