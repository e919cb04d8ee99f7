package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// Shared Kafka transactions (docs/batching.md). Requests whose SQL side is prepared while others
// are in flight ride in one Kafka transaction: one produce flush, one fenced log write that logs
// every member prepared, one EndTxn. Each member keeps its own row, its own PostgreSQL gids and
// its own answer; only the Kafka transaction is shared. The rules, each enforced below:
//
//   - B1: a request joins a batch only with its SQL side prepared (member.phase1), so a request
//     whose SQL fails never puts a record into a Kafka transaction that may commit.
//   - B2 (I2 for a batch): EndTxn is sent only after one all-or-nothing write has logged every
//     member prepared with the batch's ids (runBatch, Log.PreparedBatch).
//   - B3 (I1 for a shared id): the id goes back to the pool only when every member has released
//     it, and it stays quarantined if any member ended in doubt (sharedTxn).
//   - B4 (the model's finding B1): an id quarantined before the prepared write was known is
//     handed to recovery for release only when every member that remembered it is resolved
//     (quarantineLease).
//
// A batch that fails before its prepared write (no id, a record refused, a flush that does not
// complete, a writer check) is aborted in Kafka and carries nobody: each member then runs its
// own Kafka transaction as an unshared request would, and fails or succeeds alone.

// BatchConfig tunes the sharing of Kafka transactions.
type BatchConfig struct {
	// MaxMembers caps the requests sharing one Kafka transaction; ≤ 1: none is shared.
	MaxMembers int
	// Concurrency is how many shared transactions may run their Kafka phase at once; requests
	// prepared meanwhile gather into the next one (default 1).
	Concurrency int
	// ShareSQL lets members on one database share one PostgreSQL transaction too
	// (sharedsql.go, docs/batching.md section 12).
	ShareSQL bool
	// DeferRows lets a member that joins while every slot is taken skip its Begin: the batch's
	// prepared write inserts its row (S8, joined.go, docs/batching.md section 12.7).
	DeferRows bool
}

// batcher gathers prepared requests into batches. The first member of an open batch leads it:
// it waits for a free slot (requests prepared meanwhile join), seals the batch and runs it. A
// lone request never waits: with a slot free the batch is sealed at once.
type batcher struct {
	max       int
	slots     chan struct{}
	always    bool // tests: share even when alone
	deferRows bool // DeferRows (S8)

	mu   sync.Mutex
	open *batch // the batch accepting members; nil: the next member opens one
}

type batch struct {
	members []*member
	// sealed is closed (under batcher.mu) when the leader seals the batch (it holds a slot, or
	// gave up waiting for one): from then on its members' Begins are on its path (JoinedBegin).
	sealed chan struct{}
}

// member is one request in a batch: the leader fills out and closes done.
type member struct {
	ctx  context.Context // the request's: its deadline and its trace
	w    *work
	done chan struct{}
	out  batchOutcome
	// sqlShared: it joined before its SQL phase, which the leader runs (sharedsql.go).
	sqlShared bool
	// begun, when not nil, is closed once the member's Begin answered, with logged its outcome:
	// it joined while its row was being logged (joined.go).
	begun  chan struct{}
	logged begun
	// deferred (S8, written under batcher.mu by join): it joined with no row and logs none
	// before its batch's prepared write, which inserts it; ownGIDs are the gids a late Begin
	// logs (joined.settle).
	deferred bool
	ownGIDs  []txntype.SQLGID
}

// batchOutcome is what the batch tells a member.
type batchOutcome struct {
	// alone: the batch did not carry it (nothing of it was logged, the batch's Kafka transaction
	// was aborted): it runs its Kafka side alone.
	alone bool
	// rerun: nothing of its work is left anywhere (S5): it runs alone from its SQL phase on.
	rerun bool
	// fail: it is aborted with this cause (its SQL phase failed, or its shared transaction
	// failed and could not be rolled back yet).
	fail error
	// prepErr: the write logging the batch prepared failed: ErrMovedOn when it was refused
	// (nothing logged, the Kafka transaction aborted), otherwise its outcome is unknown.
	prepErr error
	// The decision, when the prepared write succeeded: decideErr leaves it to recovery.
	commit    bool
	cause     error
	decideErr error
	// answer: the batch's phase 2 committed this member, which is answered with it; the leader
	// writes its final row (finals.go). Or, decided: the member is answered at the batch's
	// decision (D1, decided.go) and the leader runs its phase 2 and final write.
	answer  *txntype.Transaction
	decided bool
	// logged: the batch's prepared write logged it (a deferred member has its row).
	logged bool
}

func newBatcher(cfg BatchConfig) *batcher {
	if cfg.MaxMembers <= 1 {
		return nil
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	return &batcher{max: cfg.MaxMembers, slots: make(chan struct{}, cfg.Concurrency), deferRows: cfg.DeferRows}
}

// join adds m to the open batch, or opens one (lead: m then leads it), and returns that batch.
func (b *batcher) join(m *member) (bt *batch, lead bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bt := b.open; bt != nil {
		// S8: a member joining while its row would be logged and every slot is taken runs
		// nothing before the leader does, and logs no row of its own yet.
		if b.deferRows && m.begun != nil && b.busy() {
			m.deferred, m.ownGIDs = true, m.w.t.SQLGIDs
			m.w.t.RowDeferred = true
		}
		bt.members = append(bt.members, m)
		if len(bt.members) >= b.max {
			b.open = nil // full: closed to newcomers; still waiting for its slot
		}
		return bt, false
	}
	bt = &batch{members: []*member{m}, sealed: make(chan struct{})}
	b.open = bt
	return bt, true
}

// busy reports whether every slot is taken: a batch opened now waits for one.
func (b *batcher) busy() bool { return len(b.slots) == cap(b.slots) }

// seal closes bt to newcomers and returns its members (no longer appended to).
func (b *batcher) seal(bt *batch) []*member {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == bt {
		b.open = nil
	}
	select {
	case <-bt.sealed:
	default:
		close(bt.sealed)
	}
	return bt.members
}

// lead waits for a slot (requests prepared meanwhile join bt), seals bt and runs it, then tells
// every member its outcome.
func (c *Coordinator) lead(ctx context.Context, bt *batch) {
	b := c.batches
	slotStart := time.Now()
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		// No slot within the leader's budget: nobody rides; each member goes alone (and
		// fails alone when its own budget is spent).
		for _, m := range b.seal(bt) {
			// One that joined without its SQL phase runs everything alone.
			m.out.alone, m.out.rerun = !m.sqlShared, m.sqlShared
			close(m.done)
		}
		return
	}
	c.observeSince(PhaseSlotWait, slotStart)
	members := b.seal(bt)
	// The batch lives as long as its longest budget: a member whose budget is shorter gets its
	// answer late rather than failing the others. Cancelling a member (its caller left) does
	// not stop the batch.
	deadline := time.Time{}
	for _, m := range members {
		if d, ok := m.ctx.Deadline(); ok && d.After(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(members[0].ctx), deadline)
	defer cancel()
	abStart := time.Now()
	members = c.awaitBegins(ctx, members)
	c.observeSince(PhaseAwaitBegins, abStart)
	if len(members) == 0 {
		<-b.slots
		return
	}
	// The slot is held through the decision, even by a batch of one: requests prepared
	// meanwhile gather into the next batch, which is what makes batches form under load.
	riders, groups, p := c.phase1Batch(ctx, members)
	if p.err == nil && !anchored(riders) {
		// S8: every rider left is deferred: no row older than the shared transactions would be
		// in the prepared write. The batch fails before it; each member runs again alone (its
		// row first) once its shared transaction is rolled back (S5).
		p.err = errNoAnchor
	}
	for _, m := range members {
		if m.out.rerun || m.out.fail != nil {
			close(m.done) // it goes its own way at once
		}
	}
	var once sync.Once
	release := func() { once.Do(func() { <-b.slots }) }
	if len(riders) > 0 {
		c.runBatch(ctx, riders, groups, p, release)
	}
	c.releaseGroups(groups)
	release()
	finish := func() {
		if len(riders) > 1 && riders[0].out.commit && riders[0].out.decideErr == nil && riders[0].out.prepErr == nil {
			c.finishShared(riders) // closes done of the members it answered
		}
		for _, m := range riders {
			if m.out.answer == nil {
				close(m.done)
			}
		}
	}
	if slices.ContainsFunc(riders, func(m *member) bool { return m.w.atDecision }) {
		// D1: the leader runs on its own request's goroutine, and its answer too may be due at
		// the decision: the batch's phase 2 must not hold it.
		go finish()
		return
	}
	finish()
}

// runBatch runs the Kafka phase of a sealed batch's riders (their SQL prepared) up to the
// decision and fills every rider's outcome.
//
// release gives the batch's slot back: once the prepared write's outcome is known, the next
// batch may run its phase 1 while this one sends its EndTxn.
func (c *Coordinator) runBatch(ctx context.Context, members []*member, groups []*sqlGroup, p produced, release func()) {
	if len(members) > 1 {
		c.cfg.Observer.ObserveKafkaBatch(len(members))
	}
	ktx, ks, err := p.ktx, p.ks, p.err
	if err != nil {
		// Nothing is logged: abort the batch's Kafka transaction; every member goes alone.
		c.cfg.Logger.Warn("shared kafka transaction failed before prepared; each request runs its own",
			"members", len(members), "error", err)
		if ktx != nil {
			c.abortShared(ctx, ktx)
			ktx.Release(true)
		}
		for _, m := range members {
			m.out.alone = true
		}
		// The members of a shared SQL transaction hold no SQL of their own: theirs is rolled
		// back and they run again alone (S5).
		c.abandonGroups(ctx, groups, err)
		for _, m := range members {
			if m.out.rerun || m.out.fail != nil {
				m.out.alone = false
			}
		}
		return
	}
	shared := newSharedTxn(ktx, len(members))
	ts := make([]*txntype.Transaction, len(members))
	off := 0
	for i, m := range members {
		n := len(m.w.req.Kafka)
		m.w.t.Kafka = &txntype.KafkaState{KafkaIDs: ks.KafkaIDs, PreparedState: ks.KafkaIDs.PreparedState(), Records: ks.Records[off : off+n : off+n]}
		off += n
		if g := inGroup(groups, m); g != nil {
			m.w.t.SQLGIDs = []txntype.SQLGID{{Database: g.Database, GID: g.GID}}
		}
		m.w.mu.Lock()
		m.w.ktx = shared.member()
		m.w.mu.Unlock()
		ts[i] = m.w.t
	}
	c.fault(txntype.FaultAfterKafkaFlush)
	c.sharedFault(members, txntype.FaultSharedAfterKafkaFlush)

	// B2: every member prepared, in one all-or-nothing fenced write, before EndTxn.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.FinishTimeout)
	defer fcancel()
	lctx, st := c.step(fctx, PhaseLogPrepared, SpanLogPrepared)
	kafkaAttrs(st.span, ks.KafkaIDs)
	var sqls []txntype.SharedGID
	for _, g := range groups {
		if len(g.members) > 0 {
			sqls = append(sqls, g.SharedGID)
		}
	}
	if len(ts) == 1 && len(sqls) == 0 {
		err = c.log.Prepared(lctx, ts[0]) // group-committed with other log writes
	} else {
		err = c.log.PreparedBatch(lctx, ts, sqls)
	}
	st.end(err)
	release()
	if err != nil {
		if errors.Is(err, txntype.ErrMovedOn) || errors.Is(err, txntype.ErrLogRefused) {
			// Refused as a whole (a row moved on, or the log's server rolled the write back):
			// no member is prepared, so nothing can commit this Kafka transaction and aborting
			// it is allowed (I3), and no log row names a shared transaction: it is rolled back
			// here (or by the sweep, S3).
			c.abortShared(ctx, ktx)
			for _, g := range groups {
				if len(g.members) > 0 {
					_ = c.rollbackGroup(ctx, g)
				}
			}
		}
		for _, m := range members {
			m.out.prepErr = err
		}
		return
	}
	for _, m := range members {
		m.out.logged = true
	}
	c.fault(txntype.FaultAfterLogPrepared)
	c.sharedFault(members, txntype.FaultSharedAfterLogPrepared)
	_, st = c.step(fctx, PhaseEndTxn, SpanEndTxn)
	kafkaAttrs(st.span, ks.KafkaIDs)
	commit, cause, err := c.decide(ctx, fctx, ktx, ks.KafkaIDs, members[0].w.t.GID)
	st.end(err)
	if err == nil {
		c.fault(txntype.FaultAfterEndTxn)
		c.sharedFault(members, txntype.FaultSharedAfterEndTxn)
	}
	if err == nil && !commit {
		// Kafka aborted the batch: its shared SQL transactions are rolled back once here, so
		// that the members' own phase 2 finds them gone (by the marker, I4) rather than busy.
		for _, g := range groups {
			if len(g.members) > 0 {
				_ = c.rollbackGroup(fctx, g)
			}
		}
	}
	for _, m := range members {
		m.out.commit, m.out.cause, m.out.decideErr = commit, cause, err
	}
}

// finishShared is phase 2 of a committed batch, for all members at once: COMMIT PREPARED of
// every member's gids in one round trip per database; every member whose gids all committed is
// answered, and one write logging them committed follows (writeCommittedBatch, finals.go). A
// member left out (a gid that failed) finishes on its own path, which repeats phase 2
// idempotently (I4).
func (c *Coordinator) finishShared(members []*member) {
	ctx, cancel := context.WithTimeout(members[0].w.traced(context.Background()), c.cfg.FinishTimeout)
	defer cancel()
	// D1: a member that asked for it is answered now, at the decision, and its phase 2 is
	// this one, or its own (behindAnswer) when the shared one leaves it out.
	early := map[*member]*pendingFinal{}
	for _, m := range members {
		if m.w.atDecision {
			var p *pendingFinal
			m.out.answer, p = c.decidedAnswer(m.w)
			m.out.decided = true
			early[m] = p
			close(m.done)
		}
	}
	if len(early) > 0 {
		c.fault(txntype.FaultDecidedBeforePhase2)
	}
	pctx, st := c.step(ctx, PhasePhase2, SpanPhase2)
	ts := make([]*txntype.Transaction, len(members))
	for i, m := range members {
		ts[i] = m.w.t
	}
	ok := CommitAll(pctx, c.sql, ts)
	st.end(nil)
	ts = make([]*txntype.Transaction, 0, len(members))
	var done []*member
	for i, m := range members {
		switch {
		case ok[i]:
			ts = append(ts, m.w.t)
			done = append(done, m)
		case early[m] != nil:
			c.behindAnswer(m.w, early[m]) // left out: its own phase 2, repeated idempotently (I4)
		}
	}
	if len(ts) == 0 {
		return
	}
	c.fault(txntype.FaultAfterCommitPrepared)
	c.fault(txntype.FaultBeforeFinalLog)
	// Committed on both sides: each such member is answered now, and the write logging them
	// committed follows (finals.go); a member left out finishes on its own path.
	at := finalStamp(ts...)
	// The write's own bound, and its step started before the answers go (finalStep).
	wctx, wcancel := context.WithTimeout(members[0].w.traced(context.Background()), c.cfg.FinishTimeout)
	lctx, st := c.finalStep(wctx)
	pending := make([]*pendingFinal, len(done))
	for j, m := range done {
		if p := early[m]; p != nil {
			pending[j] = p // answered at the decision
			continue
		}
		m.out.answer = committedAnswer(m.w, at)
		pending[j] = c.handOff(m.w)
		close(m.done)
	}
	c.cfg.Logger.Debug("shared transaction committed; its final write follows", "members", len(done))
	// On a goroutine of its own: the leader is a member too, and its answer must not wait.
	go func() {
		defer wcancel()
		c.writeCommittedBatch(wctx, lctx, st, done, pending, at)
	}()
}

// writeCommittedBatch logs committed the members finishShared answered, in one write, and ends
// their pending finals; a member the write left out writes its own row (writeCommitted).
func (c *Coordinator) writeCommittedBatch(ctx, lctx context.Context, st step, done []*member,
	pending []*pendingFinal, at time.Time) {
	ts := make([]*txntype.Transaction, len(done))
	for j, m := range done {
		ts[j] = m.w.t
	}
	written, err := c.log.CommittedBatch(lctx, ts, at)
	st.end(err)
	if err != nil {
		c.cfg.Logger.Warn("final write of a shared transaction's members failed; each member's is sent alone",
			"members", len(ts), "error", err)
	}
	for j, m := range done {
		if written[j] {
			if m.w.ktx != nil {
				m.w.ktx.Release(true)
				m.w.ktx = nil
			}
		} else {
			mctx, mst := c.finalStep(ctx)
			c.writeCommitted(mctx, mst, m.w, at)
		}
		c.finalDone(m.w, pending[j])
	}
}

// sharedFault passes a shared-only fault point when the batch carries more than one request.
func (c *Coordinator) sharedFault(members []*member, p txntype.FaultPoint) {
	if len(members) > 1 {
		c.fault(p)
	}
}

// produced is a batch's Kafka transaction with its records flushed, or why not.
type produced struct {
	ktx txntype.KafkaTxn // set whenever an id was leased
	ks  txntype.KafkaState
	err error
}

// produce runs produceBatch as the batch's Kafka step.
func (c *Coordinator) produce(ctx context.Context, members []*member) produced {
	kctx, st := c.step(ctx, PhaseKafka, SpanKafka)
	ktx, ks, err := c.produceBatch(kctx, members)
	st.end(err)
	return produced{ktx: ktx, ks: ks, err: err}
}

// phase1Batch is a sealed batch's phase 1: the SQL phase of the members that joined without it
// (prepareShared) and the produce of every member's records, concurrently. S1 holds by abort:
// when a member's SQL did not prepare, the produced Kafka transaction, which no row names and
// so can never commit (B2), is aborted, and the riders' records are produced again without that
// member's. riders keeps the members' order when all of them ride (the offsets follow it).
func (c *Coordinator) phase1Batch(ctx context.Context, members []*member) ([]*member, []*sqlGroup, produced) {
	var p produced
	var wg sync.WaitGroup
	wg.Go(func() { p = c.produce(ctx, members) })
	riders, groups := c.prepareShared(ctx, members)
	wg.Wait()
	if len(riders) == len(members) {
		return members, groups, p
	}
	if p.ktx != nil {
		c.abortShared(ctx, p.ktx)
		p.ktx.Release(true)
	}
	p = produced{}
	if len(riders) > 0 {
		p = c.produce(ctx, riders)
	}
	return riders, groups, p
}

// produceBatch leases an id, produces every member's records in one transaction and flushes.
// ktx is returned whenever it was leased.
func (c *Coordinator) produceBatch(ctx context.Context, members []*member) (txntype.KafkaTxn, txntype.KafkaState, error) {
	start := time.Now()
	ktx, err := c.kafka.Acquire(ctx)
	c.observeSince(PhasePoolAcquire, start)
	if err != nil {
		return nil, txntype.KafkaState{}, err
	}
	total := 0
	for i, m := range members {
		// Each member's records carry its own trace; the batch's deadline bounds them.
		rctx := context.WithoutCancel(m.ctx)
		if i == 0 {
			err = ktx.Begin(rctx, m.w.req.Kafka)
		} else {
			err = ktx.Add(rctx, m.w.req.Kafka)
		}
		if err != nil {
			return ktx, txntype.KafkaState{}, err
		}
		total += len(m.w.req.Kafka)
	}
	ks, err := ktx.Prepare(ctx)
	if err != nil {
		return ktx, txntype.KafkaState{}, err
	}
	if len(ks.Records) != total {
		return ktx, txntype.KafkaState{}, fmt.Errorf("kafka: %d records produced, %d offsets returned", total, len(ks.Records))
	}
	return ktx, ks, nil
}

// abortShared aborts a batch's Kafka transaction that no member was logged prepared with.
func (c *Coordinator) abortShared(ctx context.Context, ktx txntype.KafkaTxn) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kafkaAbortTimeout)
	defer cancel()
	if err := ktx.Abort(actx); err != nil {
		c.cfg.Logger.Warn("kafka abort of a shared transaction failed; the id is re-initialised before reuse",
			"transactional_id", ktx.TransactionalID(), "error", err)
	}
}
