package coord_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// A fake world for the protocol's rules: an in-memory log with the real compare-and-set and
// fencing semantics, SQL databases with prepared transactions and marker rows, and a Kafka with
// transactions by producer id. Every call goes through world.call, where a test injects a
// fault (the call fails before or after its effect) or runs a resolver right before it (a
// race between a claim and the live writer at that exact step).

// mode is what happens at one call.
type mode int

const (
	pass           mode = iota
	failBefore          // the call fails and has no effect
	failAfter           // the call has its effect, and its answer is lost (an error)
	raceResolve         // a resolver claims and resolves the row, then the call runs
	raceInterleave      // a resolver starts and stops before its call number pauseAt; the request runs to its end, then the resolver goes on
	refused             // a log write the server refused: no effect, and the error says so (txntype.ErrLogRefused); any other call: failBefore
	unsent              // a log write that never reached the server: no effect, and the error says so (txntype.ErrLogUnsent); any other call: failBefore
)

// refusal is the error of a call in mode m that fails before its effect (failBefore, refused,
// unsent), or nil.
func refusal(m mode, op string) error {
	switch m {
	case failBefore:
		return errInjected
	case refused:
		return fmt.Errorf("%s: %w", op, txntype.ErrLogRefused)
	case unsent:
		return fmt.Errorf("%s: %w", op, txntype.ErrLogUnsent)
	}
	return nil
}

// resolverKey marks the resolver's context: its calls are counted apart.
type resolverKey struct{}

var errInjected = errors.New("injected fault")

type world struct {
	mu    sync.Mutex
	calls int
	ops   []string
	// at decides the mode of call n (op names the call); nil: pass.
	at func(n int, op string) mode
	// resolve runs when a call is raceResolve or raceInterleave.
	resolve func()
	// pauseAt is the resolver's call before which it stops (raceInterleave).
	pauseAt int
	// page: the resolver takes a prepared row by the page (C1, Rules.ResolvePage).
	page bool

	// joinedBegins counts the Begins marked patient for the log (coord.JoinedBegin), and
	// joinedSealed keeps what each was told to stop waiting on.
	joinedBegins int
	joinedSealed []<-chan struct{}

	rcalls   int           // calls of the resolver so far
	paused   chan struct{} // closed when the resolver stops at pauseAt
	resume   chan struct{} // closed to let it go on
	resolved chan struct{} // closed when it has finished

	rows       map[string]*txntype.Transaction // gid → row
	epochs     map[string]int64                // instance → epoch
	sqlState   map[string]string               // sql gid → running, prepared, committed, rolledback
	markers    map[string]bool                 // sql gid → true: committed marker, false: fencing marker
	kafkaTxns  map[int64]string                // producer id → open, committed, aborted
	kafkaRecs  map[int64][]string              // producer id → the values of its records
	failSQL    map[string]bool                 // sql gid → its statements fail (the server says no)
	releases   map[int64][]bool                // producer id → its Release calls (keep)
	shared     map[string][]string             // shared sql gid → its members (registered by the prepared write)
	sqlWork    map[string][]string             // a request's own sql gid → every sql gid its work was prepared in
	mayLand    bool                            // RunShared: the PREPARE's answer is lost and it lands later (lands() makes it)
	rowless    []string                        // work a participant got before the request's row existed (S7, I6)
	deferred   map[string]bool                 // request ids of members that joined with no row (S8: Existing read them)
	anchorless int                             // prepared writes of deferred rows alone (S8: must be none)
	deferRows  bool                            // the coordinator defers rows (S8; deferring)
	otherDB    map[string]bool                 // request ids whose statement goes to database "other" (startBatch)
	nextPID    int64

	kafkaOffsets map[int64]*txntype.OffsetCommit // producer id → the offsets its transaction carries
}

func newWorld() *world {
	return &world{rows: map[string]*txntype.Transaction{}, epochs: map[string]int64{"a": 1, "r": 1},
		sqlState: map[string]string{}, markers: map[string]bool{}, kafkaTxns: map[int64]string{},
		kafkaRecs: map[int64][]string{}, failSQL: map[string]bool{}, releases: map[int64][]bool{},
		shared: map[string][]string{}, sqlWork: map[string][]string{}, deferred: map[string]bool{}}
}

// call counts a call and returns its mode; a race runs the resolver first (without locks held).
func (w *world) call(ctx context.Context, op string) mode {
	w.mu.Lock()
	if ctx.Value(resolverKey{}) != nil {
		w.rcalls++
		w.ops = append(w.ops, "r:"+op)
		if w.rcalls-1 == w.pauseAt {
			w.mu.Unlock()
			close(w.paused)
			<-w.resume
			w.mu.Lock()
		}
		w.mu.Unlock()
		return pass
	}
	n := w.calls
	w.calls++
	w.ops = append(w.ops, op)
	at := w.at
	w.mu.Unlock()
	m := pass
	if at != nil {
		m = at(n, op)
	}
	if (m == refused || m == unsent) && !strings.HasPrefix(op, "log.") {
		m = failBefore
	}
	switch {
	case m == raceResolve && w.resolve != nil:
		w.resolve()
	case m == raceInterleave && w.resolve != nil:
		w.startResolver()
		m = pass
	}
	return m
}

// startResolver runs the resolver until it stops at pauseAt (or ends); finishResolver lets it
// go on and waits for it.
func (w *world) startResolver() {
	w.mu.Lock()
	w.rcalls = 0
	w.paused, w.resume, w.resolved = make(chan struct{}), make(chan struct{}), make(chan struct{})
	w.mu.Unlock()
	go func() {
		defer close(w.resolved)
		w.resolve()
	}()
	select {
	case <-w.paused:
	case <-w.resolved:
	}
}

func (w *world) finishResolver() {
	if w.resolved == nil {
		return
	}
	select {
	case <-w.resolved:
		return
	default:
	}
	close(w.resume)
	<-w.resolved
}

func clone(t *txntype.Transaction) *txntype.Transaction {
	c := *t
	c.SQLGIDs = append([]txntype.SQLGID(nil), t.SQLGIDs...)
	if t.Kafka != nil {
		k := *t.Kafka
		c.Kafka = &k
	}
	return &c
}

// fakeLog implements txntype.Log with txlog's semantics.
type fakeLog struct{ w *world }

func (l fakeLog) owned(t *txntype.Transaction) bool {
	return l.w.epochs[t.Owner] == t.OwnerEpoch
}

func (l fakeLog) Begin(ctx context.Context, t *txntype.Transaction) (*txntype.Transaction, bool, error) {
	m := l.w.call(ctx, "log.begin")
	if err := refusal(m, "log.begin"); err != nil {
		return nil, false, err
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	if sealed, ok := coord.JoinedBegin(ctx); ok {
		l.w.joinedBegins++
		l.w.joinedSealed = append(l.w.joinedSealed, sealed)
	}
	if old, ok := l.w.rows[t.GID]; ok {
		return clone(old), false, nil
	}
	if !l.owned(t) {
		return nil, false, txntype.ErrNotOwner
	}
	l.w.rows[t.GID] = clone(t)
	if m == failAfter {
		return nil, false, errInjected
	}
	return clone(t), true, nil
}

func (l fakeLog) cas(ctx context.Context, op string, t *txntype.Transaction, apply func(row *txntype.Transaction)) error {
	m := l.w.call(ctx, op)
	if err := refusal(m, op); err != nil {
		return err
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	row, ok := l.casRow(t, t.State)
	if !ok {
		return fmt.Errorf("%s %s: %w", op, t.GID, txntype.ErrMovedOn)
	}
	apply(row)
	if m == failAfter {
		return errInjected
	}
	*t = *clone(row)
	return nil
}

// casRow is t's row when a fenced compare-and-set from state would pass: the row is in that
// state as t last saw it, and owned by t's writer at its current epoch (l.w.mu held).
func (l fakeLog) casRow(t *txntype.Transaction, state txntype.State) (*txntype.Transaction, bool) {
	row, ok := l.w.rows[t.GID]
	if !ok || row.State != state || t.State != state || row.Owner != t.Owner || row.OwnerEpoch != t.OwnerEpoch || !l.owned(t) {
		return nil, false
	}
	return row, true
}

func (l fakeLog) Prepared(ctx context.Context, t *txntype.Transaction) error {
	want := clone(t)
	return l.cas(ctx, "log.prepared", t, func(row *txntype.Transaction) {
		row.State, row.Kafka, row.SQLGIDs = txntype.StatePrepared, want.Kafka, want.SQLGIDs
	})
}

// Existing: which ids have a row. Every id it is asked about is a deferred member's (S8).
func (l fakeLog) Existing(ctx context.Context, ids []string) (map[string]bool, error) {
	m := l.w.call(ctx, "log.existing")
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	for _, id := range ids {
		l.w.deferred[id] = true
	}
	if err := refusal(m, "log.existing"); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, id := range ids {
		if _, ok := l.w.rows["p_"+id]; ok {
			out[id] = true
		}
	}
	return out, nil
}

// PreparedBatch is all or nothing, as txlog's: every row must pass the compare-and-set, and a
// deferred row must not exist (S8), behind an anchor.
func (l fakeLog) PreparedBatch(ctx context.Context, ts []*txntype.Transaction, shared []txntype.SharedGID) error {
	m := l.w.call(ctx, "log.prepared_batch")
	if err := refusal(m, "log.prepared_batch"); err != nil {
		return err
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	anchor := false
	for _, t := range ts {
		if t.RowDeferred {
			if _, ok := l.w.rows[t.GID]; ok || !l.owned(t) {
				return fmt.Errorf("log.prepared_batch %s: logged already or not owned: %w", t.GID, txntype.ErrMovedOn)
			}
			continue
		}
		anchor = true
		if _, ok := l.casRow(t, txntype.StateActive); !ok {
			return fmt.Errorf("log.prepared_batch %s: %w", t.GID, txntype.ErrMovedOn)
		}
	}
	if !anchor {
		l.w.anchorless++
		return errors.New("log.prepared_batch: no anchor (S8)")
	}
	for _, g := range shared {
		if _, taken := l.w.shared[g.GID]; taken {
			return fmt.Errorf("log.prepared_batch: %s registered or tombstoned: %w", g.GID, txntype.ErrMovedOn)
		}
	}
	for _, g := range shared {
		l.w.shared[g.GID] = append([]string{}, g.Members...)
	}
	for _, t := range ts {
		row := l.w.rows[t.GID]
		if t.RowDeferred {
			row = clone(t)
			row.RowDeferred = false
			l.w.rows[t.GID] = row
		}
		want := clone(t)
		row.State, row.Kafka, row.SQLGIDs = txntype.StatePrepared, want.Kafka, want.SQLGIDs
	}
	if m == failAfter {
		return errInjected
	}
	for _, t := range ts {
		*t = *clone(l.w.rows[t.GID])
	}
	return nil
}

// CommittedBatch: one call; each row its own compare-and-set.
func (l fakeLog) CommittedBatch(ctx context.Context, ts []*txntype.Transaction, at time.Time) ([]bool, error) {
	done := make([]bool, len(ts))
	m := l.w.call(ctx, "log.committed_batch")
	if err := refusal(m, "log.committed_batch"); err != nil {
		return done, err
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	for i, t := range ts {
		row, ok := l.casRow(t, txntype.StatePrepared)
		if !ok {
			continue
		}
		row.State = txntype.StateCommitted
		stamp(row, at)
		done[i] = true
	}
	if m == failAfter {
		return make([]bool, len(ts)), errInjected
	}
	for i, t := range ts {
		if done[i] {
			*t = *clone(l.w.rows[t.GID])
		}
	}
	return done, nil
}

// stamp sets a row's updated_at and finished_at to at, as the log does (zero: now).
func stamp(row *txntype.Transaction, at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	row.UpdatedAt, row.FinishedAt = at, &at
}

func (l fakeLog) Committed(ctx context.Context, t *txntype.Transaction, at time.Time) error {
	want := clone(t)
	return l.cas(ctx, "log.committed", t, func(row *txntype.Transaction) {
		row.State, row.Error = txntype.StateCommitted, want.Error
		if want.Kafka != nil {
			row.Kafka = want.Kafka
		}
		stamp(row, at)
	})
}

func (l fakeLog) Transition(ctx context.Context, t *txntype.Transaction, to txntype.State) error {
	want := clone(t)
	return l.cas(ctx, "log."+string(to), t, func(row *txntype.Transaction) {
		row.State, row.Error = to, want.Error
		if want.Kafka != nil {
			row.Kafka = want.Kafka
		}
	})
}

func (l fakeLog) Claim(ctx context.Context, t *txntype.Transaction, by txntype.Fence, to txntype.State) error {
	m := l.w.call(ctx, "log.claim")
	if err := refusal(m, "log.claim"); err != nil {
		return err
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	row, ok := l.w.rows[t.GID]
	if !ok || row.State != t.State || row.Owner != t.Owner || row.OwnerEpoch != t.OwnerEpoch ||
		l.w.epochs[by.Instance] != by.Epoch {
		return fmt.Errorf("claim %s: %w", t.GID, txntype.ErrMovedOn)
	}
	row.State, row.Owner, row.OwnerEpoch = to, by.Instance, by.Epoch
	if m == failAfter {
		return errInjected
	}
	*t = *clone(row)
	return nil
}

// ClaimMany: one call; each row its own compare-and-set, as Claim's.
func (l fakeLog) ClaimMany(ctx context.Context, ts []*txntype.Transaction, by txntype.Fence) ([]*txntype.Transaction, error) {
	m := l.w.call(ctx, "log.claim")
	if err := refusal(m, "log.claim"); err != nil {
		return nil, err
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	var claimed []*txntype.Transaction
	for _, t := range ts {
		to, ok := coord.ClaimState(t.State)
		if !ok {
			return nil, fmt.Errorf("claim %s: %s is final", t.GID, t.State)
		}
		row, ok := l.w.rows[t.GID]
		if !ok || row.State != t.State || row.Owner != t.Owner || row.OwnerEpoch != t.OwnerEpoch ||
			l.w.epochs[by.Instance] != by.Epoch {
			continue
		}
		row.State, row.Owner, row.OwnerEpoch = to, by.Instance, by.Epoch
		claimed = append(claimed, clone(row))
	}
	if m == failAfter {
		return nil, errInjected
	}
	return claimed, nil
}

func (l fakeLog) Get(ctx context.Context, id string) (*txntype.Transaction, error) {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	for _, r := range l.w.rows {
		if r.ID == id {
			return clone(r), nil
		}
	}
	return nil, txntype.ErrNotFound
}

// fakeSQL implements txntype.SQL: prepared transactions and marker rows.
type fakeSQL struct{ w *world }

func (s fakeSQL) Has(string) bool { return true }

func (s fakeSQL) Run(ctx context.Context, db string, stmts []txntype.Statement, gid string, onePhase bool, _ func()) ([]txntype.SQLResult, error) {
	m := s.w.call(ctx, "sql.run")
	if m == failBefore {
		return nil, &txntype.Failure{Participant: "sql:" + db, Class: txntype.ClassRetriable, Unavailable: true, Err: errInjected}
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.w.needRow("sql.run", strings.TrimPrefix(strings.TrimSuffix(gid, "@"+db), "p_"))
	if s.w.failSQL[gid] {
		return nil, &txntype.Failure{Participant: "sql:" + db, Class: txntype.ClassAbortable, Err: errors.New("check constraint violated")}
	}
	if _, fenced := s.w.markers[gid]; fenced {
		// The marker insert meets the key: unique violation, the server says no.
		return nil, &txntype.Failure{Participant: "sql:" + db, Class: txntype.ClassAbortable, Err: errors.New("duplicate marker")}
	}
	if onePhase {
		s.w.sqlState[gid], s.w.markers[gid] = "committed", true
	} else {
		s.w.sqlState[gid] = "prepared"
	}
	s.w.sqlWork[gid] = append(s.w.sqlWork[gid], gid)
	if m == failAfter {
		err := error(errInjected)
		if onePhase {
			err = fmt.Errorf("%w: %w", txntype.ErrCommitUnknown, err)
		}
		return nil, &txntype.Failure{Participant: "sql:" + db, Class: txntype.ClassRetriable, Err: err}
	}
	return make([]txntype.SQLResult, len(stmts)), nil
}

// RunShared: member i's statements fail when its own gid is in failSQL (it is left out); the
// shared transaction is prepared with the rest. Every gid of a member's work is recorded in
// sqlWork, so a test can follow where each request's SQL ended up.
func (s fakeSQL) RunShared(ctx context.Context, db string, members [][]txntype.Statement, gid string, _ func()) txntype.SharedRun {
	out := txntype.SharedRun{Results: make([][]txntype.SQLResult, len(members)), Excluded: make([]error, len(members))}
	m := s.w.call(ctx, "sql.run_shared")
	if m == failBefore {
		out.Err = &txntype.Failure{Participant: "sql:" + db, Class: txntype.ClassRetriable, Unavailable: true, Err: errInjected}
		return out
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	for i, stmts := range members {
		s.w.needRow("sql.run_shared", stmts[0].Args[0].(string))
		own := "p_" + stmts[0].Args[0].(string) + "@" + db // batchRequest's first argument: its id
		if s.w.failSQL[own] {
			out.Excluded[i] = &txntype.Failure{Participant: "sql:" + db, Class: txntype.ClassAbortable, Err: errors.New("check constraint violated")}
			continue
		}
		out.Results[i] = make([]txntype.SQLResult, len(stmts))
		s.w.sqlWork[own] = append(s.w.sqlWork[own], gid)
	}
	if s.w.mayLand {
		out.Err = &txntype.Failure{Participant: "sql:" + db, Class: txntype.ClassRetriable,
			Err: fmt.Errorf("%w: %w", txntype.ErrPrepareMayLand, errInjected)}
		return out
	}
	s.w.sqlState[gid] = "prepared"
	if m == failAfter {
		out.Err = &txntype.Failure{Participant: "sql:" + db, Class: txntype.ClassRetriable, Err: errInjected}
	}
	return out
}

// needRow records, with w.mu held, a participant's work for request id (its value or first
// argument) that came before the request's row existed: an orphan the sweep would roll back at
// once, while the request may still commit it (S7, I6).
func (w *world) needRow(op, id string) {
	if _, ok := w.rows["p_"+id]; !ok {
		w.rowless = append(w.rowless, op+" "+id)
	}
}

// lands makes every shared PREPARE whose answer was lost (mayLand) land now.
func (w *world) lands() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, gids := range w.sqlWork {
		for _, g := range gids {
			if txntype.IsSharedGID("p", g) && w.sqlState[g] == "" {
				w.sqlState[g] = "prepared"
			}
		}
	}
}

func (s fakeSQL) finish(ctx context.Context, op, gid string, commit bool) error {
	m := s.w.call(ctx, op)
	if m == failBefore {
		return errInjected
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	switch s.w.sqlState[gid] {
	case "prepared":
		if commit {
			s.w.sqlState[gid], s.w.markers[gid] = "committed", true
		} else {
			s.w.sqlState[gid] = "rolledback"
		}
	default:
		// Gone (or never prepared): the marker row says how it ended.
		if committed := s.w.markers[gid]; committed != commit {
			if committed {
				return fmt.Errorf("%w: %s was committed by someone else", txntype.ErrHeuristic, gid)
			}
			return fmt.Errorf("%w: %s was rolled back by someone else", txntype.ErrHeuristic, gid)
		}
	}
	if m == failAfter {
		return errInjected
	}
	return nil
}

func (s fakeSQL) CommitPrepared(ctx context.Context, _, gid string) error {
	return s.finish(ctx, "sql.commit_prepared", gid, true)
}

func (s fakeSQL) CommitPreparedMany(ctx context.Context, db string, gids []string) []error {
	errs := make([]error, len(gids))
	for i, g := range gids {
		errs[i] = s.finish(ctx, "sql.commit_prepared_many", g, true)
	}
	return errs
}

func (s fakeSQL) RollbackPrepared(ctx context.Context, _, gid string) error {
	return s.finish(ctx, "sql.rollback_prepared", gid, false)
}

func (s fakeSQL) SettleOnePhase(ctx context.Context, _, gid string) (bool, error) {
	m := s.w.call(ctx, "sql.settle")
	if m == failBefore {
		return false, errInjected
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	committed, ok := s.w.markers[gid]
	if !ok {
		s.w.markers[gid] = false
	}
	if m == failAfter {
		return false, errInjected
	}
	return ok && committed, nil
}

// fakeKafka implements txntype.Kafka: one transaction per producer id.
type fakeKafka struct{ w *world }

func (k fakeKafka) Acquire(ctx context.Context) (txntype.KafkaTxn, error) {
	if k.w.call(ctx, "kafka.acquire") != pass {
		return nil, &txntype.Failure{Participant: "kafka", Class: txntype.ClassRetriable, Unavailable: true, Err: errInjected}
	}
	k.w.mu.Lock()
	defer k.w.mu.Unlock()
	k.w.nextPID++
	return &fakeTxn{k: k, pid: k.w.nextPID}, nil
}

func (k fakeKafka) end(ctx context.Context, op string, pid int64, commit bool) error {
	m := k.w.call(ctx, op)
	if m == failBefore {
		return &txntype.Failure{Participant: "kafka", Class: txntype.ClassRetriable, Err: errInjected}
	}
	k.w.mu.Lock()
	defer k.w.mu.Unlock()
	switch st := k.w.kafkaTxns[pid]; {
	case st == "open" && commit:
		k.w.kafkaTxns[pid] = "committed"
	case st == "open":
		k.w.kafkaTxns[pid] = "aborted"
	case st == "aborted" && commit:
		return txntype.ErrKafkaAborted
	case st == "committed" && !commit:
		return errors.New("kafka: already committed")
	}
	if m == failAfter {
		return &txntype.Failure{Participant: "kafka", Class: txntype.ClassRetriable, Err: errInjected}
	}
	return nil
}

func (k fakeKafka) CheckSizes(context.Context, []txntype.Record) error { return nil }

func (k fakeKafka) CheckRecords(ctx context.Context, recs []txntype.Record) error {
	for _, r := range recs {
		if r.Topic == "missing" {
			return &txntype.Failure{Participant: "kafka", Class: txntype.ClassInvalidConfig, Err: errors.New("unknown topic missing")}
		}
	}
	return nil
}

func (k fakeKafka) EndTxn(ctx context.Context, ids txntype.KafkaIDs, commit bool) error {
	return k.end(ctx, "kafka.endtxn", ids.ProducerID, commit)
}

type fakeTxn struct {
	k    fakeKafka
	pid  int64
	recs int // records produced
}

func (t *fakeTxn) TransactionalID() string { return fmt.Sprintf("tid-%d", t.pid) }

func (t *fakeTxn) Begin(ctx context.Context, recs []txntype.Record) error {
	if t.k.w.call(ctx, "kafka.begin") != pass {
		return &txntype.Failure{Participant: "kafka", Class: txntype.ClassAbortable, Err: errInjected}
	}
	t.k.w.mu.Lock()
	defer t.k.w.mu.Unlock()
	for _, v := range values(recs) {
		t.k.w.needRow("kafka.begin", v)
	}
	t.k.w.kafkaTxns[t.pid] = "open"
	t.recs = len(recs)
	t.k.w.kafkaRecs[t.pid] = append(t.k.w.kafkaRecs[t.pid], values(recs)...)
	return nil
}

func values(recs []txntype.Record) []string {
	var vs []string
	for _, r := range recs {
		if r.Value != nil {
			b, _ := r.Value.Resolved()
			vs = append(vs, string(b))
		}
	}
	return vs
}

func (t *fakeTxn) Add(ctx context.Context, recs []txntype.Record) error {
	if t.k.w.call(ctx, "kafka.add") != pass {
		return &txntype.Failure{Participant: "kafka", Class: txntype.ClassAbortable, Err: errInjected}
	}
	t.k.w.mu.Lock()
	defer t.k.w.mu.Unlock()
	for _, v := range values(recs) {
		t.k.w.needRow("kafka.add", v)
	}
	t.recs += len(recs)
	t.k.w.kafkaRecs[t.pid] = append(t.k.w.kafkaRecs[t.pid], values(recs)...)
	return nil
}

func (t *fakeTxn) Prepare(ctx context.Context) (txntype.KafkaState, error) {
	if t.k.w.call(ctx, "kafka.flush") != pass {
		return txntype.KafkaState{}, &txntype.Failure{Participant: "kafka", Class: txntype.ClassAbortable, Err: errInjected}
	}
	offsets := make([]txntype.RecordOffset, t.recs)
	for i := range offsets {
		offsets[i] = txntype.RecordOffset{Topic: "t", Offset: t.pid*1000 + int64(i)}
	}
	return txntype.KafkaState{KafkaIDs: txntype.KafkaIDs{TransactionalID: t.TransactionalID(), ProducerID: t.pid}, Records: offsets}, nil
}

func (t *fakeTxn) Commit(ctx context.Context) error { return t.k.end(ctx, "kafka.commit", t.pid, true) }
func (t *fakeTxn) Abort(ctx context.Context) error  { return t.k.end(ctx, "kafka.abort", t.pid, false) }

// CommitOffsets puts the offsets into the transaction; a failing call is the group refusing a
// fenced member.
func (t *fakeTxn) CommitOffsets(ctx context.Context, oc *txntype.OffsetCommit) error {
	if t.k.w.call(ctx, "kafka.offsets") != pass {
		return &txntype.Failure{Participant: txntype.ParticipantKafkaGroup, Class: txntype.ClassFenced, Err: errInjected}
	}
	t.k.w.mu.Lock()
	defer t.k.w.mu.Unlock()
	if t.k.w.kafkaOffsets == nil {
		t.k.w.kafkaOffsets = map[int64]*txntype.OffsetCommit{}
	}
	t.k.w.kafkaTxns[t.pid] = "open"
	t.k.w.kafkaOffsets[t.pid] = oc
	return nil
}

func (t *fakeTxn) Release(keep bool) {
	t.k.w.mu.Lock()
	defer t.k.w.mu.Unlock()
	t.k.w.releases[t.pid] = append(t.k.w.releases[t.pid], keep)
}

// ownership is a fixed fence.
type ownership struct{ f txntype.Fence }

func (o ownership) Fence() (txntype.Fence, error) { return o.f, nil }

// snapshot copies what the checks read.
func (w *world) snapshot() (rows map[string]*txntype.Transaction, sqlState map[string]string, markers map[string]bool, kafka map[int64]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rows = map[string]*txntype.Transaction{}
	for g, r := range w.rows {
		rows[g] = clone(r)
	}
	return rows, maps.Clone(w.sqlState), maps.Clone(w.markers), maps.Clone(w.kafkaTxns)
}
