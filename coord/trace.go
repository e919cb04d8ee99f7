package coord

import (
	"context"
	"errors"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Traces. The protocol opens OpenTelemetry spans through the API package only (the SDK, the
// exporter and the sampler are wired by the service). A request's spans:
//
//	kpgtx.transaction                  the request, from the log insert to the outcome
//	├── kpgtx.log_begin                the active row
//	├── kpgtx.phase1                   work and prepare of every participant
//	│   ├── kpgtx.sql      ×database   statements, marker, PREPARE (or the one-phase COMMIT)
//	│   └── kpgtx.kafka                lease, begin, produce, flush (records carry traceparent)
//	├── kpgtx.log_prepared | kpgtx.log_committing
//	├── kpgtx.endtxn                   EndTxn(commit), the decision; retries by ids included
//	├── kpgtx.phase2
//	│   └── kpgtx.sql_phase2 ×database COMMIT / ROLLBACK PREPARED
//	├── kpgtx.abort                    before the decision: Kafka abort, ROLLBACK PREPARED
//	└── kpgtx.log_final                the final row
//
// A resolver (recovery, an operator's retry) opens kpgtx.log_claim, kpgtx.endtxn,
// kpgtx.sql_phase2 and kpgtx.log_final under its own span (recovery/trace.go).
//
// Attributes name the transaction (gid, request id, state), the participant (database,
// transactional id, producer id and epoch) and a failure by its class, participant and
// SQLSTATE only. Never an error message, a SQL text or argument, a record's key or value, or a
// token: a message can quote a value (PostgreSQL's "invalid input syntax … "abc"").
//
// Off (no Tracer): no span is started and nothing is allocated; a child span is started only
// under a recording parent (startSpan), so the rules need no tracer of their own.

// Span names.
const (
	SpanTransaction   = "kpgtx.transaction"
	SpanLogBegin      = "kpgtx.log_begin"
	SpanPhase1        = "kpgtx.phase1"
	SpanSQL           = "kpgtx.sql"
	SpanKafka         = "kpgtx.kafka"
	SpanLogPrepared   = "kpgtx.log_prepared"
	SpanLogWaiting    = "kpgtx.log_waiting" // X1: the row waits for its caller's decision
	SpanLogCommitting = "kpgtx.log_committing"
	SpanEndTxn        = "kpgtx.endtxn"
	SpanPhase2        = "kpgtx.phase2"
	SpanSQLPhase2     = "kpgtx.sql_phase2"
	SpanAbort         = "kpgtx.abort"
	SpanLogFinal      = "kpgtx.log_final"
	SpanLogClaim      = "kpgtx.log_claim"
)

// Attribute keys.
const (
	AttrGID             = attribute.Key("kpgtx.gid")
	AttrRequestID       = attribute.Key("kpgtx.request_id")
	AttrState           = attribute.Key("kpgtx.state")     // the row's state after the step (the outcome on kpgtx.transaction)
	AttrOnePhase        = attribute.Key("kpgtx.one_phase") // one database, no Kafka: COMMIT is the decision
	AttrDecision        = attribute.Key("kpgtx.decision")  // commit or abort (phase 2)
	AttrDatabase        = attribute.Key("kpgtx.database")
	AttrStatements      = attribute.Key("kpgtx.sql.statements") // how many; never their text
	AttrRecords         = attribute.Key("kpgtx.kafka.records")  // how many; never their keys or values
	AttrTransactionalID = attribute.Key("kpgtx.kafka.transactional_id")
	AttrProducerID      = attribute.Key("kpgtx.kafka.producer_id")
	AttrProducerEpoch   = attribute.Key("kpgtx.kafka.producer_epoch")
	AttrParticipant     = attribute.Key("kpgtx.error.participant")
	AttrSQLState        = attribute.Key("kpgtx.error.sqlstate")
	// AttrErrorType is OpenTelemetry's error.type: the error's class (Class).
	AttrErrorType = attribute.Key("error.type")
)

// TracerName is the instrumentation scope of the protocol's spans.
const TracerName = "github.com/kpgtx/coordinator"

// nopSpan is what a span helper returns when nothing is traced: a value, so returning it
// allocates nothing.
var nopSpan trace.Span = noop.Span{}

// startSpan starts a child of ctx's span, from the parent's own provider, only when the parent
// records; otherwise ctx is returned unchanged with a no-op span (no allocation).
func startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, nopSpan
	}
	return parent.TracerProvider().Tracer(TracerName).Start(ctx, name)
}

// StartSpan is startSpan for the protocol's resolvers (recovery): a child of ctx's recording
// span, or nothing.
func StartSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	return startSpan(ctx, name)
}

// startRoot starts the request's span with the configured tracer (a child of the HTTP span when
// there is one); without a tracer, nothing.
func (c *Coordinator) startRoot(ctx context.Context, name string) (context.Context, trace.Span) {
	if c.cfg.Tracer == nil {
		return ctx, nopSpan
	}
	return c.cfg.Tracer.Start(ctx, name)
}

// EndSpan records err on the span by its class, participant and SQLSTATE (never its message)
// and ends the span. A nil err ends it as it is.
func EndSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		SpanError(span, err)
	}
	span.End()
}

// SpanError marks the span failed with err's classification (AsFailure): error.type is the
// class, the status description the sentinel's text (ErrAborted, ErrInDoubt, …) or the class.
func SpanError(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	switch {
	case errors.Is(err, txntype.ErrInvalidRequest):
		span.SetAttributes(AttrErrorType.String("invalid_request"))
		span.SetStatus(codes.Error, txntype.ErrInvalidRequest.Error())
		return
	case errors.Is(err, txntype.ErrIDConflict):
		span.SetAttributes(AttrErrorType.String("id_conflict"))
		span.SetStatus(codes.Error, txntype.ErrIDConflict.Error())
		return
	}
	var oe *txntype.OutcomeError
	cause := err
	if errors.As(err, &oe) && oe.Cause != nil {
		cause = oe.Cause
	}
	f := txntype.AsFailure(cause)
	attrs := []attribute.KeyValue{AttrErrorType.String(string(f.Class)), AttrParticipant.String(f.Participant)}
	if f.SQLState != "" {
		attrs = append(attrs, AttrSQLState.String(f.SQLState))
	}
	span.SetAttributes(attrs...)
	desc := string(f.Class)
	if oe != nil {
		desc = oe.Sentinel.Error()
	} else if errors.Is(err, txntype.ErrMovedOn) {
		desc = txntype.ErrMovedOn.Error()
	}
	span.SetStatus(codes.Error, desc)
}

// spanDetail marks the span failed with a stored error detail (the outcome's, not a Go error).
func spanDetail(span trace.Span, d *txntype.ErrorDetail) {
	if d == nil || !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{AttrErrorType.String(string(d.Class)), AttrParticipant.String(d.Participant)}
	if d.SQLState != "" {
		attrs = append(attrs, AttrSQLState.String(d.SQLState))
	}
	span.SetAttributes(attrs...)
	span.SetStatus(codes.Error, string(d.Class))
}

// kafkaAttrs are the Kafka ids of a transaction, for a span.
func kafkaAttrs(span trace.Span, ids txntype.KafkaIDs) {
	if !span.IsRecording() || ids.TransactionalID == "" {
		return
	}
	span.SetAttributes(AttrTransactionalID.String(ids.TransactionalID),
		AttrProducerID.Int64(ids.ProducerID), AttrProducerEpoch.Int(int(ids.ProducerEpoch)))
}

// TransactionAttrs sets a transaction's identity and state on a span (recovery's per-row span).
func TransactionAttrs(span trace.Span, t *txntype.Transaction) {
	if !span.IsRecording() || t == nil {
		return
	}
	span.SetAttributes(AttrGID.String(t.GID), AttrRequestID.String(t.ID), AttrState.String(string(t.State)))
	if t.Kafka != nil {
		kafkaAttrs(span, t.Kafka.KafkaIDs)
	}
}

// step is one measured and traced phase of a request: its Observer timing and its span.
type step struct {
	c     *Coordinator
	p     Phase
	start time.Time
	span  trace.Span
}

// step starts phase p and its span name under ctx's span.
func (c *Coordinator) step(ctx context.Context, p Phase, name string) (context.Context, step) {
	ctx, span := startSpan(ctx, name)
	return ctx, step{c: c, p: p, start: time.Now(), span: span}
}

// end reports the phase's time and ends its span with err.
func (s step) end(err error) {
	s.c.observeSince(s.p, s.start)
	EndSpan(s.span, err)
}

// traced puts the request's span into a fresh context (the steps that run to completion after
// the caller has gone), when it records.
func (w *work) traced(ctx context.Context) context.Context {
	if w.root == nil || !w.root.IsRecording() {
		return ctx
	}
	return trace.ContextWithSpan(ctx, w.root)
}

func decision(commit bool) string {
	if commit {
		return "commit"
	}
	return "abort"
}
