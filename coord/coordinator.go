package coord

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"go.opentelemetry.io/otel/trace"
)

// Config tunes a Coordinator.
type Config struct {
	// Instance is this coordinator's stable id; it owns the rows it creates.
	Instance string
	// GIDPrefix starts every global transaction id, and so every PostgreSQL prepared
	// transaction of this coordinator (at most 32 characters).
	GIDPrefix string
	Limits    txntype.Limits
	// DefaultTimeout is the time budget of a request without timeout_ms.
	DefaultTimeout time.Duration
	// FinishTimeout bounds phase 2 and the final log write, which run to completion even when
	// the caller has gone (a prepared transaction is never abandoned half-way by choice).
	FinishTimeout time.Duration
	Logger        *slog.Logger
	// Fault, when set, is called at every step boundary (tests make the process exit there).
	Fault func(txntype.FaultPoint)
	// Observer receives phase timings and outcomes (metrics); nil: none.
	Observer Observer
	// Tracer starts each request's span (trace.go); nil: no traces, at no cost.
	Tracer trace.Tracer
	// Ownership says whether this instance holds its lock and with which epoch; every log
	// write of a request is fenced by the epoch it started with. nil: epoch 0, always owned
	// (tests without a lock).
	Ownership txntype.Ownership
	// Batch shares Kafka transactions between concurrent requests (batch.go); zero: none.
	Batch BatchConfig
	// Schemas encodes avro, protobuf and jsonschema payloads (record.go); nil: no Schema
	// Registry, and those types are refused.
	Schemas txntype.Schemas
}

// Coordinator runs global transactions over the Kafka and SQL participants with the log.
type Coordinator struct {
	cfg   Config
	log   txntype.Log
	kafka txntype.Kafka // nil when no Kafka is configured
	sql   txntype.SQL

	inflight   sync.Map // gid → *flight (a request's, flight.go) or struct{} (a shared gid's): transactions this process is running
	quarantine sync.Map // gid → *quarantineLease: an id left quarantined before prepared was logged
	running    atomic.Int64
	batches    *batcher // nil: no shared Kafka transactions
	finals     finals   // commits answered whose final write is pending (finals.go)
}

// New returns a Coordinator. kafka may be nil (SQL-only deployments).
func New(cfg Config, log txntype.Log, kafka txntype.Kafka, sql txntype.SQL) *Coordinator {
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = 10 * time.Second
	}
	if cfg.FinishTimeout <= 0 {
		cfg.FinishTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	c := &Coordinator{cfg: cfg, log: log, kafka: kafka, sql: sql}
	if kafka != nil {
		c.batches = newBatcher(cfg.Batch)
	}
	return c
}

// fence is the instance and epoch a new request writes with, or ErrNotOwner.
func (c *Coordinator) fence() (txntype.Fence, error) {
	if c.cfg.Ownership == nil {
		return txntype.Fence{Instance: c.cfg.Instance}, nil
	}
	return c.cfg.Ownership.Fence()
}

// GID is the global transaction id of a request id.
func (c *Coordinator) GID(requestID string) string { return c.cfg.GIDPrefix + "_" + requestID }

// Get returns the stored transaction. A commit answered by this instance whose final write is
// pending is read once that write ended (finals.go).
//
// An id in flight on this instance whose row is not logged yet is never "not found": it is
// shown active, as its row will be logged.
func (c *Coordinator) Get(ctx context.Context, id string) (*txntype.Transaction, error) {
	gid := c.GID(id)
	c.awaitFinal(ctx, gid)
	t, err := c.log.Get(ctx, id)
	if errors.Is(err, txntype.ErrNotFound) {
		if running, ok := c.inFlightView(gid); ok {
			return running, nil
		}
	}
	return t, err
}

// Execute runs one request to its outcome. It returns the transaction when it committed;
// otherwise an *OutcomeError whose sentinel is ErrAborted, ErrInDoubt or ErrUnavailable (with
// the transaction), or an error matching ErrInvalidRequest or ErrIDConflict.
func (c *Coordinator) Execute(ctx context.Context, req txntype.Request) (*txntype.Transaction, error) {
	if c.cfg.Tracer == nil {
		return c.execute(ctx, req)
	}
	ctx, span := c.startRoot(ctx, SpanTransaction)
	t, err := c.execute(ctx, req)
	if t != nil {
		span.SetAttributes(AttrState.String(string(t.State)))
	}
	EndSpan(span, err)
	return t, err
}

func (c *Coordinator) execute(ctx context.Context, req txntype.Request) (*txntype.Transaction, error) {
	if err := req.Validate(c.cfg.Limits, c.sql.Has); err != nil {
		return nil, err
	}
	if len(req.Kafka) > 0 && c.kafka == nil {
		return nil, txntype.Invalid("kafka", "this coordinator has no Kafka configured")
	}
	if req.KafkaOffsets != nil && c.kafka == nil {
		return nil, txntype.Invalid("kafka_offsets", "this coordinator has no Kafka configured")
	}
	if len(req.Kafka) > 0 {
		// P1: every byte that does not name a statement's result is known before anything runs.
		if err := c.encodeRecords(ctx, &req); err != nil {
			return nil, err
		}
	}
	if req.ID == "" {
		req.ID = newID()
	}
	budget := req.Timeout
	if budget == 0 {
		budget = c.cfg.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()

	// An instance that cannot confirm it holds its lock starts nothing: another instance may be
	// taking its rows over, and its writes would be refused anyway (fencing).
	fence, err := c.fence()
	if err != nil {
		return nil, &txntype.OutcomeError{Sentinel: txntype.ErrUnavailable, Cause: err}
	}
	t := &txntype.Transaction{
		ID:         req.ID,
		GID:        c.GID(req.ID),
		Instance:   c.cfg.Instance,
		State:      txntype.StateActive,
		Owner:      fence.Instance,
		OwnerEpoch: fence.Epoch,
		OnePhase:   len(req.Kafka) == 0 && req.KafkaOffsets == nil && len(req.Databases()) == 1,
		Digest:     req.Digest(),
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(AttrGID.String(t.GID), AttrRequestID.String(t.ID), AttrOnePhase.Bool(t.OnePhase),
			AttrStatements.Int(len(req.SQL)), AttrRecords.Int(len(req.Kafka)))
	}
	// The SQL gids are known from the start and logged with the active row, so that recovery
	// knows where to look for prepared transactions and marker rows of a request that crashed
	// before prepared was logged.
	for _, db := range req.Databases() {
		t.SQLGIDs = append(t.SQLGIDs, txntype.SQLGID{Database: db, GID: txntype.SQLGIDFor(t.GID, db)})
	}
	// In flight from before the row exists: the recovery loop must never take a live request's
	// fresh active row for a crashed one. Another run of the id in flight here answers this
	// request (flight.go).
	var f *flight
	for f == nil {
		if f, err = c.board(ctx, t); err != nil {
			return nil, err
		}
	}
	// D1 is asked by the request and answered only for a two-phase one: a one-phase request's
	// COMMIT is its decision and its answer.
	w := &work{t: t, req: &req, root: trace.SpanFromContext(ctx), flight: f,
		atDecision: req.Answer == txntype.AnswerDecided && !t.OnePhase}
	gid := t.GID
	var handedOff bool
	defer func() {
		if !handedOff { // else its final write ends its time in flight (finals.go)
			c.land(gid, f)
		}
	}()
	start := time.Now()
	c.running.Add(1)
	defer c.running.Add(-1)
	e, ran := c.drive(ctx, w, c.route(ctx, w, false), budget)
	handedOff = e.handedOff
	if ran {
		c.observeOutcome(e.t, e.err, start)
	}
	return e.t, e.err
}

// begun is the outcome of a request's Begin (step 1): run, the row is fresh and the request's
// to run (stored is the row as logged); otherwise t and err are the request's answer, and
// nothing of it may be prepared.
type begun struct {
	run    bool
	stored *txntype.Transaction
	t      *txntype.Transaction
	err    error
}

// begin logs w's row active with its gids, before any participant sees the request (I5, I6:
// a prepared gid without a row is an orphan, rolled back at once); work.t is the stored row.
func (c *Coordinator) begin(ctx context.Context, w *work, budget time.Duration) begun {
	b := c.logBegin(ctx, w.t, budget)
	if b.run {
		w.t = b.stored
	}
	return b
}

// logBegin logs t's row active with its gids.
func (c *Coordinator) logBegin(ctx context.Context, t *txntype.Transaction, budget time.Duration) begun {
	bctx, st := c.step(ctx, PhaseLogBegin, SpanLogBegin)
	stored, created, err := c.log.Begin(bctx, t)
	st.end(err)
	if err != nil {
		if !beginUndone(err) {
			// The insert was sent and its answer lost: the row may exist (active, owned by this
			// instance's epoch, which recovery presumes aborted once this request has left
			// flight). Not "safe to retry": the outcome is unknown until the row, or its
			// absence, says so.
			return begun{err: &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Txn: unlogged(t), Cause: fmt.Errorf(
				"log begin: the row's insert was sent and its answer lost; the row may exist: %w", err)}}
		}
		if errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The request's own budget was too small to log it: the caller's choice, not an
			// outage, and nothing of the request ran (the insert never went out).
			return begun{err: txntype.Invalid("timeout_ms", fmt.Sprintf("the time budget of %s ran out before the transaction was logged; nothing was run: send it again with a larger timeout_ms", budget))}
		}
		return begun{err: &txntype.OutcomeError{Sentinel: txntype.ErrUnavailable, Cause: fmt.Errorf("log begin: %w", err)}}
	}
	if !created {
		if !bytes.Equal(stored.Digest, t.Digest) {
			return begun{err: txntype.ErrIDConflict}
		}
		t, err := Answer(stored, nil)
		return begun{t: t, err: err}
	}
	return begun{run: true, stored: stored}
}

// beginUndone reports a Begin failure that proves no row was written by it: the insert never
// reached the log's server (ErrLogUnsent), the server refused it (ErrLogRefused), or the
// instance's epoch no longer holds (ErrNotOwner, the fenced insert wrote nothing). Only then is
// the request safe to send again (503); any other failure may have logged the row.
func beginUndone(err error) bool {
	return errors.Is(err, txntype.ErrLogUnsent) || errors.Is(err, txntype.ErrLogRefused) || errors.Is(err, txntype.ErrNotOwner)
}

// InFlight reports whether this process is running the transaction right now; recovery leaves
// such rows alone.
func (c *Coordinator) InFlight(gid string) bool {
	_, ok := c.inflight.Load(gid)
	return ok
}

// TakeQuarantined returns (once) the transactional id that an in-doubt transaction of this
// process left quarantined, for recovery to release after resolving it. An id shared by a
// batch is returned only at the take of the last member that remembered it (B4, batch.go):
// until then another member's transaction may still become prepared on it.
func (c *Coordinator) TakeQuarantined(gid string) (string, bool) {
	v, ok := c.quarantine.LoadAndDelete(gid)
	if !ok {
		return "", false
	}
	l := v.(*quarantineLease)
	if l.left.Add(-1) != 0 {
		return "", false
	}
	return l.id, true
}

// fault calls the test-only fault hook at a protocol step boundary.
func (c *Coordinator) fault(point txntype.FaultPoint) {
	if c.cfg.Fault != nil {
		c.cfg.Fault(point)
	}
}

// work is the state of one request's participants during the protocol.
type work struct {
	root     trace.Span // the request's span: the parent of the steps run on a fresh context
	t        *txntype.Transaction
	req      *txntype.Request
	ktx      txntype.KafkaTxn
	prepared []string // databases where PREPARE TRANSACTION may have been sent
	// flight is the request's place in flight (flight.go).
	flight *flight
	mu     sync.Mutex
	// atDecision: the request is answered at its decision to commit (D1, decided.go): its
	// phase 2 and final write run behind the answer, on the goroutine that holds the hand-off.
	// Set once, from Request.Answer, and never for a one-phase request.
	atDecision bool
}

func (c *Coordinator) sqlGID(gid, database string) string { return txntype.SQLGIDFor(gid, database) }

// phase1 runs the work and the prepare of every participant (the Kafka side only withKafka);
// onePhase commits the single database directly instead of preparing it.
func (c *Coordinator) phase1(ctx context.Context, w *work, onePhase, withKafka bool) error {
	// A SQL failure stops the Kafka side at once (its abort is authoritative). A Kafka failure
	// does not cancel the SQL side: a PREPARE cut off by a cancel may still complete on the
	// server after we looked for it, leaving an orphan; the SQL round trip is short, so it is
	// left to finish and then rolled back.
	kctx, cancelKafka := context.WithCancelCause(ctx)
	defer cancelKafka(nil)
	var (
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
	}

	// P2: records that name a statement's result are produced once the statements ran.
	derived := withKafka && len(w.req.Kafka) > 0 && w.req.Derived()
	if withKafka && (len(w.req.Kafka) > 0 || w.req.KafkaOffsets != nil) && !derived {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.kafkaPhase1(kctx, w); err != nil {
				fail(err)
			}
		}()
	}
	results := make([]txntype.SQLResult, len(w.req.SQL))
	for _, db := range w.req.Databases() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.sqlPhase1(ctx, w, db, onePhase, results); err != nil {
				fail(err)
				cancelKafka(err)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	w.t.SQL = results
	if derived {
		if err := c.materialize(ctx, w); err != nil {
			return err
		}
		return c.kafkaPhase1(ctx, w)
	}
	return nil
}

func (c *Coordinator) kafkaPhase1(ctx context.Context, w *work) (err error) {
	ctx, st := c.step(ctx, PhaseKafka, SpanKafka)
	defer func() { st.end(err) }()
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrRecords.Int(len(w.req.Kafka)))
	}
	ktx, err := c.kafka.Acquire(ctx)
	c.observeSince(PhasePoolAcquire, st.start)
	if err != nil {
		return err
	}
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrTransactionalID.String(ktx.TransactionalID()))
	}
	w.mu.Lock()
	w.ktx = ktx
	w.mu.Unlock()
	oc := w.req.KafkaOffsets
	recs := w.req.Kafka
	if oc != nil {
		recs = nil // produced once the offsets are in (below)
	}
	if err := ktx.Begin(ctx, recs); err != nil {
		return err
	}
	if oc != nil {
		// O1: the offsets ride in this transaction, and a refused commit fails phase 1, so
		// nothing of the request can commit without them. They go first: a fenced member
		// produces nothing, and under transactions v2 the records' implicit partition adds do
		// not race the offsets' own (a race the broker answers CONCURRENT_TRANSACTIONS, which
		// held the flush for seconds).
		if err := ktx.CommitOffsets(ctx, oc); err != nil {
			return err
		}
		// Logged with prepared (I2), with the ids of the transaction that commits them.
		w.t.KafkaOffsets = oc
		if len(w.req.Kafka) > 0 {
			if err := ktx.Add(ctx, w.req.Kafka); err != nil {
				return err
			}
		}
	}
	ks, err := ktx.Prepare(ctx)
	if err != nil {
		return err
	}
	c.fault(txntype.FaultAfterKafkaFlush)
	if ks.Records == nil {
		ks.Records = []txntype.RecordOffset{} // offsets only: no record, an empty list (never null)
	}
	ks.PreparedState = ks.KafkaIDs.PreparedState()
	w.t.Kafka = &ks
	kafkaAttrs(st.span, ks.KafkaIDs)
	return nil
}

func (c *Coordinator) sqlPhase1(ctx context.Context, w *work, db string, onePhase bool, results []txntype.SQLResult) error {
	var stmts []txntype.Statement
	var idx []int
	for i, s := range w.req.SQL {
		if s.Database == db {
			stmts = append(stmts, s)
			idx = append(idx, i)
		}
	}
	if !onePhase {
		w.mu.Lock()
		w.prepared = append(w.prepared, db)
		w.mu.Unlock()
	}
	sctx, st := c.step(ctx, PhaseSQL, SpanSQL)
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrDatabase.String(db), AttrStatements.Int(len(stmts)))
	}
	res, err := c.sql.Run(sctx, db, stmts, c.sqlGID(w.t.GID, db), onePhase, func() { c.fault(txntype.FaultAfterSQLWork) })
	st.end(err)
	if err != nil {
		return err
	}
	if !onePhase {
		c.fault(txntype.FaultAfterPrepare)
	}
	for j, i := range idx {
		results[i] = res[j]
	}
	return nil
}

// decide sends EndTxn(commit) and follows Kafka's answer. An unclear answer is retried with a
// raw EndTxn by the stored ids until the caller's budget runs out; then the outcome is left to
// recovery (the error return).
func (c *Coordinator) decide(ctx, fctx context.Context, ktx txntype.KafkaTxn, ids txntype.KafkaIDs, gid string) (commit bool, cause, err error) {
	err = ktx.Commit(fctx)
	for backoff := 50 * time.Millisecond; ; backoff = min(backoff*2, time.Second) {
		switch {
		case err == nil:
			return true, nil, nil
		case errors.Is(err, txntype.ErrKafkaAborted):
			return false, err, nil
		}
		c.cfg.Logger.Warn("kafka commit outcome unknown; retrying EndTxn by ids",
			"gid", gid, "transactional_id", ids.TransactionalID, "error", err)
		select {
		case <-ctx.Done():
			return false, nil, fmt.Errorf("kafka commit outcome unknown: %w", err)
		case <-time.After(backoff):
		}
		err = c.kafka.EndTxn(fctx, ids, true)
	}
}

// phase2 commits or rolls back every prepared SQL transaction following the decision, then
// logs the final state (I4; the rules are finishSQL and mixedDetail, shared with recovery).
func (c *Coordinator) phase2(ctx context.Context, w *work, commit bool, cause error) ended {
	pctx, st := c.step(ctx, PhasePhase2, SpanPhase2)
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrDecision.String(decision(commit)))
	}
	mixed, failed := finishSQL(pctx, c.sql, w.t.SQLGIDs, commit)
	st.end(failed)
	if failed == nil && len(mixed) == 0 && commit {
		c.fault(txntype.FaultAfterCommitPrepared)
	}
	switch {
	case len(mixed) > 0:
		w.t.Error = mixedDetail(commit, mixed)
		return c.finishWith(ctx, w, txntype.StateHeuristicMixed, nil, true)
	case failed != nil && commit && w.t.State != txntype.StateCommitting:
		// Kafka committed; SQL phase 2 is pending. committing tells recovery to finish it.
		if err := c.log.Transition(ctx, w.t, txntype.StateCommitting); err != nil {
			c.cfg.Logger.Error("log committing failed", "gid", w.t.GID, "error", err)
		}
		return c.inDoubt(w, fmt.Errorf("sql commit prepared: %w", failed))
	case failed != nil && commit:
		return c.inDoubt(w, fmt.Errorf("sql commit prepared: %w", failed))
	case failed != nil:
		return c.inDoubt(w, fmt.Errorf("sql rollback prepared: %w", failed))
	}
	if commit {
		return c.finish(w, txntype.StateCommitted, nil)
	}
	return c.finish(w, txntype.StateAborted, cause)
}

// logRefused is the failure of a request whose decision write (prepared, or committing
// without Kafka) the log refused (ErrLogRefused): nothing that could commit it is logged, so it
// is aborted, and answered "safe to retry" (503) when nothing was left prepared.
func logRefused(step string, err error) *txntype.Failure {
	return &txntype.Failure{Participant: txntype.ParticipantCoordinator, Class: txntype.ClassRetriable, Unavailable: true,
		Err: fmt.Errorf("log %s: %w", step, err)}
}

// kafkaAbortTimeout bounds the Kafka abort after a failure before the decision.
const kafkaAbortTimeout = 3 * time.Second

// abort rolls back every participant after a failure before the decision (presumed abort), and
// logs the abort. Kafka is aborted before SQL gids are rolled back.
func (c *Coordinator) abort(w *work, cause error) ended {
	ctx, cancel := context.WithTimeout(w.traced(context.Background()), c.cfg.FinishTimeout)
	defer cancel()
	clean := c.rollback(ctx, w)
	f := txntype.AsFailure(cause)
	if !clean {
		f.Unavailable = false // something may be left prepared: not "safe to retry" (503)
	}
	if f.Class == txntype.ClassRetriable && !f.Unavailable {
		// Answered 409, so the id's outcome is final: a same-id retry must return this abort,
		// never run the request again (txlog.Begin re-runs only rows logged retriable, which
		// are exactly the ones answered 503 "safe to retry with the same id").
		f = &txntype.Failure{Participant: f.Participant, Class: txntype.ClassAbortable, SQLState: f.SQLState, Err: f.Err}
	}
	w.t.SQL = nil
	if errors.Is(cause, txntype.ErrConfinementBreach) {
		// I13's second line of defence fired: what the client statement did before it left the
		// transaction may be committed on that database while everything else was rolled back.
		// Not an abort anyone may rely on: heuristic, with the evidence, for an operator.
		f.Unavailable = false
		c.cfg.Observer.ObserveConfinementBreach()
		return c.finishWith(ctx, w, txntype.StateHeuristic, f, true)
	}
	return c.finishWith(ctx, w, txntype.StateAborted, f, true)
}

// rollback aborts this request's own participants before the decision: the Kafka transaction,
// then every database where PREPARE may have been sent. clean=false: a gid may be left
// prepared (recovery rolls it back).
func (c *Coordinator) rollback(ctx context.Context, w *work) (clean bool) {
	ctx, st := c.step(ctx, PhaseAbort, SpanAbort)
	defer func() { st.end(nil) }()
	clean = true
	c.abortKafka(ctx, w)
	for _, db := range w.prepared {
		// PREPARE may have reached the server even if its answer did not reach us; rolling back
		// a gid that does not exist (and has no marker) is a no-op.
		if err := c.sql.RollbackPrepared(ctx, db, c.sqlGID(w.t.GID, db)); err != nil {
			c.cfg.Logger.Warn("sql rollback failed; recovery rolls the orphan back",
				"gid", w.t.GID, "database", db, "error", err)
			clean = false
		}
	}
	return clean
}

// abortKafka aborts w's Kafka transaction, if it has one. Bounded short: when Kafka is down the
// abort cannot get through, and it need not. The transaction was never logged prepared, so
// nothing will ever commit it (I3); the broken producer is recreated before reuse, and its
// InitProducerId aborts it (or the Kafka transaction timeout does). It does not make the abort
// "unclean" for the caller.
func (c *Coordinator) abortKafka(ctx context.Context, w *work) {
	if w.ktx == nil {
		return
	}
	kctx, kcancel := context.WithTimeout(ctx, kafkaAbortTimeout)
	defer kcancel()
	if err := w.ktx.Abort(kctx); err != nil {
		c.cfg.Logger.Warn("kafka abort failed; the id is re-initialised before reuse",
			"gid", w.t.GID, "transactional_id", w.ktx.TransactionalID(), "error", err)
	}
}

// inDoubt leaves the transaction to recovery: the transactional.id stays quarantined (I1).
func (c *Coordinator) inDoubt(w *work, cause error) ended {
	c.cfg.Logger.Error("transaction in doubt; left to recovery", "gid", w.t.GID, "state", w.t.State, "error", cause)
	c.quarantineID(w)
	return end(w.t, &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Txn: w.t, Cause: cause})
}

// quarantineID keeps the request's transactional id out of the pool until recovery has
// resolved the row and releases it (I1).
func (c *Coordinator) quarantineID(w *work) {
	if w.ktx == nil {
		return
	}
	if w.t.Kafka == nil || w.t.State == txntype.StateActive {
		// The log may not name the id: remember it so recovery can release it.
		c.quarantine.Store(w.t.GID, leaseOf(w.ktx))
	}
	w.ktx.Release(false)
	w.ktx = nil
}

// yield answers a request whose row is no longer its own: a resolver claimed it (recovery, a
// takeover, an operator), or this instance lost the epoch the request started with. The stored
// state is the answer; the request writes nothing more. When the stored outcome is an abort of
// a transaction this request had not decided, its own participants are rolled back at once
// (the resolver does the same; both are idempotent) and a transactional id whose Kafka
// transaction was aborted goes back to the pool: the row can never be logged prepared, so
// nothing can commit that transaction (I1, I3).
func (c *Coordinator) yield(ctx context.Context, w *work, cause error, rolledBack bool) ended {
	stored, err := c.log.Get(ctx, w.t.ID)
	if err != nil {
		return c.inDoubt(w, fmt.Errorf("%w; re-reading the row: %w", cause, err))
	}
	c.cfg.Logger.Warn("row claimed by another owner; answering from the stored state", "gid", w.t.GID,
		"state", stored.State, "owner", stored.Owner, "owner_epoch", stored.OwnerEpoch,
		"my_epoch", w.t.OwnerEpoch, "cause", cause)
	abort := w.t.State == txntype.StateActive && !stored.OnePhase &&
		(stored.State == txntype.StateAborting || stored.State == txntype.StateAborted)
	if abort {
		if !rolledBack {
			c.rollback(ctx, w)
		}
		if w.ktx != nil {
			w.ktx.Release(true)
			w.ktx = nil
		}
	}
	c.quarantineID(w)
	return end(Answer(stored, cause))
}

func (c *Coordinator) finish(w *work, to txntype.State, cause error) ended {
	ctx, cancel := context.WithTimeout(w.traced(context.Background()), c.cfg.FinishTimeout)
	defer cancel()
	var f *txntype.Failure
	if cause != nil {
		f = txntype.AsFailure(cause)
	}
	return c.finishWith(ctx, w, to, f, true)
}

// finishWith logs the final state and only then returns the transactional.id to the pool (I1).
func (c *Coordinator) finishWith(ctx context.Context, w *work, to txntype.State, f *txntype.Failure, reusable bool) ended {
	if to == txntype.StateCommitted && f == nil {
		// Committed on every participant: the answer goes now, the write behind it.
		return c.answerCommitted(w)
	}
	if f != nil {
		w.t.Error = f.Detail()
	}
	lctx, st := c.step(ctx, PhaseLogFinal, SpanLogFinal)
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrState.String(string(to)))
	}
	err := c.log.Transition(lctx, w.t, to)
	st.end(err)
	var cause error
	if f != nil {
		cause = f
	}
	if errors.Is(err, txntype.ErrMovedOn) {
		return c.yield(ctx, w, fmt.Errorf("log %s: %w", to, err), to == txntype.StateAborted)
	}
	if err != nil {
		c.cfg.Logger.Error("final log write failed; recovery completes it", "gid", w.t.GID, "state", to, "error", err)
		return c.inDoubt(w, fmt.Errorf("log %s: %w", to, err))
	}
	if w.ktx != nil {
		w.ktx.Release(reusable)
	}
	c.cfg.Logger.Debug("transaction finished", "gid", w.t.GID, "state", to)
	return end(Answer(w.t, cause))
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "txn-" + hex.EncodeToString(b[:])
}
