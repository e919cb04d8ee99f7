package kafkatxn

import (
	"context"
	"strings"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TraceParentHeader is the W3C Trace Context header that produced records carry.
const TraceParentHeader = "traceparent"

// The trace context of a request is carried into its records: every record produced in a traced
// request gets the W3C Trace Context headers of the Kafka phase's span (traceparent, and
// tracestate when there is one), so that a consumer can continue the trace. A record whose
// client-given headers already hold a traceparent (the name compared without regard to case,
// as HTTP compares it) keeps its own headers untouched: the client's trace wins, and no record
// ever carries two. Without a trace (tracing off, or no span) nothing is added.

// traceHeaders are the trace context headers of ctx's span, in W3C form; nil without one.
func traceHeaders(ctx context.Context) []kgo.RecordHeader {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	hs := make([]kgo.RecordHeader, 0, len(carrier))
	for _, k := range []string{TraceParentHeader, "tracestate"} {
		if v, ok := carrier[k]; ok {
			hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	return hs
}

// hasTraceParent reports whether the client gave the record a traceparent header of its own.
func hasTraceParent(r txntype.Record) bool {
	for _, h := range r.Headers {
		if strings.EqualFold(h.Name, TraceParentHeader) {
			return true
		}
	}
	return false
}
