package coord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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
	// External bounds the transactions their callers decide (external.go).
	External External
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
	preparing  atomic.Int64 // requests their callers decide, in phase 1 (external.go)
	batches    *batcher     // nil: no shared Kafka transactions
	finals     finals       // commits answered whose final write is pending (finals.go)
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

func (c *Coordinator) execute(ctx context.Context, req txntype.Request) (t *txntype.Transaction, err error) {
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
	var within time.Duration
	if req.External {
		if within, err = c.externalWithin(&req); err != nil {
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
	if req.External {
		release, err := c.reserveWaiting(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	t = &txntype.Transaction{
		ID:         req.ID,
		GID:        c.GID(req.ID),
		Instance:   c.cfg.Instance,
		State:      txntype.StateActive,
		Owner:      fence.Instance,
		OwnerEpoch: fence.Epoch,
		// A transaction its caller decides is never one-phase: its databases must hold PREPARE.
		OnePhase: !req.External && len(req.Kafka) == 0 && req.KafkaOffsets == nil && len(req.Databases()) == 1,
		Digest:   req.Digest(),
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
		if f, err = c.board(ctx, t, req.KafkaOffsets != nil); err != nil {
			return nil, err
		}
	}
	// D1 is asked by the request and answered only for a two-phase one: a one-phase request's
	// COMMIT is its decision and its answer.
	w := &work{t: t, req: &req, root: trace.SpanFromContext(ctx), flight: f, within: within,
		atDecision: req.Answer == txntype.AnswerDecided && !t.OnePhase && !req.External}
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
	// within is how long a request its caller decides may wait (external.go); 0: the
	// coordinator decides.
	within time.Duration
	// chainSeen has bit 1<<stage set for each stage its predecessor was seen to reach (O4,
	// chain.go).
	chainSeen atomic.Uint32
}

func (c *Coordinator) sqlGID(gid, database string) string { return txntype.SQLGIDFor(gid, database) }

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "txn-" + hex.EncodeToString(b[:])
}
