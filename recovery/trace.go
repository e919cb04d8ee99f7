package recovery

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// Traces of the loop (coord/trace.go has the protocol's): every pass is one span, and every
// transaction a pass (or an operator's retry) resolves alone is one span under it, with the
// row's gid, request id and state before, the outcome after, and the rules' own spans (claim,
// EndTxn, phase 2 per database, final write) below it. The prepared rows a pass resolves by
// the page (C1) have a page's span under the pass, with the rules' spans of the page (one
// claim, an EndTxn per Kafka transaction, phase 2, one final write) and one span per
// transaction, with its outcome, below it.
const (
	SpanPass        = "kpgtx.recovery.pass"
	SpanResolve     = "kpgtx.recovery.resolve"
	SpanResolvePage = "kpgtx.recovery.resolve_page"
)

// Attributes of a pass and of a resolved transaction.
const (
	AttrResolved  = attribute.Key("kpgtx.recovery.resolved")
	AttrFailed    = attribute.Key("kpgtx.recovery.failed")
	AttrOrphans   = attribute.Key("kpgtx.recovery.orphans")
	AttrTakenOver = attribute.Key("kpgtx.recovery.taken_over")
	AttrOutcome   = attribute.Key("kpgtx.recovery.outcome") // the state the row was resolved to
	AttrInstance  = attribute.Key("kpgtx.instance")
)

// startPass starts a pass's span; without a tracer, nothing (no allocation).
func (l *Loop) startPass(ctx context.Context) (context.Context, trace.Span) {
	if l.cfg.Tracer == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return l.cfg.Tracer.Start(ctx, SpanPass, trace.WithAttributes(AttrInstance.String(l.cfg.Instance)))
}

// endPass records a pass's counts and error on its span.
func endPass(span trace.Span, st Stats, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrResolved.Int(st.Resolved), AttrFailed.Int(st.Failed),
			AttrOrphans.Int(st.Orphans), AttrTakenOver.Int(st.TakenOver))
	}
	coord.EndSpan(span, err)
}

// endResolve records what became of one transaction: its outcome, or the attempt's error. A row
// someone else resolved first (errMovedOn) is not an error of this pass.
func endResolve(span trace.Span, outcome txntype.State, err error) {
	if span.IsRecording() {
		switch {
		case err == nil:
			span.SetAttributes(AttrOutcome.String(string(outcome)))
		case errors.Is(err, errMovedOn):
			span.SetAttributes(AttrOutcome.String("moved_on"))
			err = nil
		}
	}
	coord.EndSpan(span, err)
}
