package coord

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
)

// Off (no tracer), the tracing on the request path allocates nothing: a step starts no span, a
// child is not started under a non-recording parent, and ending one with an error records
// nothing. (BenchmarkTracing shows the whole request, off against the SDK.)
func TestTracingOffAllocatesNothing(t *testing.T) {
	c := New(Config{Logger: slog.New(slog.DiscardHandler)}, nil, nil, nil)
	w := &work{t: &txntype.Transaction{GID: "g"}}
	ctx := context.Background()
	failure := &txntype.Failure{Participant: txntype.ParticipantSQL, Class: txntype.ClassAbortable, Err: errors.New("no")}
	for name, f := range map[string]func(){
		"step": func() {
			sctx, st := c.step(ctx, PhaseSQL, SpanSQL)
			if st.span.IsRecording() {
				t.Fatal("recording without a tracer")
			}
			_ = sctx
			st.end(failure)
		},
		"root": func() {
			_, span := c.startRoot(ctx, SpanTransaction)
			EndSpan(span, failure)
		},
		"child of a fresh context": func() {
			_, span := startSpan(w.traced(ctx), SpanAbort)
			kafkaAttrs(span, txntype.KafkaIDs{TransactionalID: "tid", ProducerID: 1})
			EndSpan(span, nil)
		},
	} {
		assert.Zero(t, testing.AllocsPerRun(100, f), name)
	}
}
