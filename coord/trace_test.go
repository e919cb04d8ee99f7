package coord_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// tracedCoordinator is a coordinator over a fake world whose spans go to an in-memory exporter.
func tracedCoordinator(t testing.TB, w *world, exp sdktrace.SpanExporter) *coord.Coordinator {
	t.Helper()
	var tracer trace.Tracer
	if exp != nil {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		tracer = tp.Tracer(coord.TracerName)
	}
	return coord.New(coord.Config{Instance: "a", GIDPrefix: "p", Logger: slog.New(slog.DiscardHandler),
		Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}}, Tracer: tracer},
		fakeLog{w}, fakeKafka{w}, fakeSQL{w})
}

// twoDBsAndKafka is a request with both participants, SQL on two databases.
func twoDBsAndKafka(id string) txntype.Request {
	return txntype.Request{ID: id,
		SQL: []txntype.Statement{
			{Statement: "INSERT INTO orders VALUES ($1)", Args: []any{"secret-arg"}},
			{Database: "orders", Statement: "INSERT INTO orders VALUES ($1)", Args: []any{"secret-arg"}},
		},
		Kafka: []txntype.Record{{Topic: "orders", Value: txntype.Text("secret-value")}}}
}

// spanTree indexes exported spans by name and by span id.
type spanTree struct {
	byName map[string][]tracetest.SpanStub
	byID   map[trace.SpanID]tracetest.SpanStub
}

func treeOf(spans tracetest.SpanStubs) spanTree {
	tr := spanTree{byName: map[string][]tracetest.SpanStub{}, byID: map[trace.SpanID]tracetest.SpanStub{}}
	for _, s := range spans {
		tr.byName[s.Name] = append(tr.byName[s.Name], s)
		tr.byID[s.SpanContext.SpanID()] = s
	}
	return tr
}

// one returns the only span of that name.
func (tr spanTree) one(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	require.Len(t, tr.byName[name], 1, "spans named %s", name)
	return tr.byName[name][0]
}

// parentName is the name of s's parent span.
func (tr spanTree) parentName(s tracetest.SpanStub) string {
	return tr.byID[s.Parent.SpanID()].Name
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// A committed request: the request's span under the caller's, every phase under it with its
// participant's attributes, per database where there are several; nothing of the arguments or
// record values.
func TestTraceCommitted(t *testing.T) {
	t.Parallel()
	w := newWorld()
	exp := tracetest.NewInMemoryExporter()
	c := tracedCoordinator(t, w, exp)
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
		TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	txn, err := c.Execute(ctx, twoDBsAndKafka("x"))
	require.NoError(t, err)
	require.Equal(t, txntype.StateCommitted, txn.State)
	// The final write follows the answer (finals.go): its span ends after the request's.
	require.NoError(t, c.WaitFinals(context.Background()))

	spans := exp.GetSpans()
	tr := treeOf(spans)
	root := tr.one(t, coord.SpanTransaction)
	assert.Equal(t, parent.TraceID(), root.SpanContext.TraceID(), "the caller's trace")
	assert.Equal(t, parent.SpanID(), root.Parent.SpanID(), "the caller's span is the parent")
	ra := attrs(root)
	assert.Equal(t, "p_x", ra[coord.AttrGID].AsString())
	assert.Equal(t, "x", ra[coord.AttrRequestID].AsString())
	assert.Equal(t, "committed", ra[coord.AttrState].AsString())
	assert.Equal(t, codes.Unset, root.Status.Code)

	for name, parentName := range map[string]string{
		coord.SpanLogBegin:    coord.SpanTransaction,
		coord.SpanPhase1:      coord.SpanTransaction,
		coord.SpanKafka:       coord.SpanPhase1,
		coord.SpanLogPrepared: coord.SpanTransaction,
		coord.SpanEndTxn:      coord.SpanTransaction,
		coord.SpanPhase2:      coord.SpanTransaction,
		coord.SpanLogFinal:    coord.SpanTransaction,
	} {
		s := tr.one(t, name)
		assert.Equal(t, parentName, tr.parentName(s), "parent of %s", name)
		assert.Equal(t, parent.TraceID(), s.SpanContext.TraceID(), "trace of %s", name)
	}
	for _, name := range []string{coord.SpanSQL, coord.SpanSQLPhase2} {
		require.Len(t, tr.byName[name], 2, "%s: one per database", name)
		var dbs []string
		for _, s := range tr.byName[name] {
			dbs = append(dbs, attrs(s)[coord.AttrDatabase].AsString())
		}
		assert.ElementsMatch(t, []string{txntype.DefaultDatabase, "orders"}, dbs, name)
	}
	assert.Equal(t, coord.SpanPhase1, tr.parentName(tr.byName[coord.SpanSQL][0]))
	assert.Equal(t, coord.SpanPhase2, tr.parentName(tr.byName[coord.SpanSQLPhase2][0]))
	assert.Empty(t, tr.byName[coord.SpanAbort], "nothing aborted")

	for _, name := range []string{coord.SpanKafka, coord.SpanLogPrepared, coord.SpanEndTxn} {
		a := attrs(tr.one(t, name))
		assert.Equal(t, "tid-1", a[coord.AttrTransactionalID].AsString(), name)
		assert.EqualValues(t, 1, a[coord.AttrProducerID].AsInt64(), name)
		assert.Contains(t, a, coord.AttrProducerEpoch, name)
	}
	assert.Equal(t, "commit", attrs(tr.one(t, coord.SpanEndTxn))[coord.AttrDecision].AsString())
	assert.Equal(t, "committed", attrs(tr.one(t, coord.SpanLogFinal))[coord.AttrState].AsString())

	for _, s := range spans {
		for _, kv := range s.Attributes {
			assert.NotContains(t, kv.Value.Emit(), "secret", "span %s attribute %s", s.Name, kv.Key)
		}
	}
}

// An aborted request: the request's span and the failing participant's carry the error by its
// class and participant, and the abort and the final write are traced.
func TestTraceAborted(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.at = func(_ int, op string) mode {
		if op == "kafka.begin" {
			return failBefore // an abortable Kafka failure
		}
		return pass
	}
	exp := tracetest.NewInMemoryExporter()
	c := tracedCoordinator(t, w, exp)
	_, err := c.Execute(context.Background(), twoDBsAndKafka("y"))
	require.ErrorIs(t, err, txntype.ErrAborted)

	tr := treeOf(exp.GetSpans())
	root := tr.one(t, coord.SpanTransaction)
	assert.Equal(t, codes.Error, root.Status.Code)
	assert.Equal(t, txntype.ErrAborted.Error(), root.Status.Description)
	ra := attrs(root)
	assert.Equal(t, string(txntype.ClassAbortable), ra[coord.AttrErrorType].AsString())
	assert.Equal(t, "kafka", ra[coord.AttrParticipant].AsString())
	assert.Equal(t, "aborted", ra[coord.AttrState].AsString())

	k := tr.one(t, coord.SpanKafka)
	assert.Equal(t, codes.Error, k.Status.Code)
	assert.Equal(t, string(txntype.ClassAbortable), attrs(k)[coord.AttrErrorType].AsString())
	assert.Empty(t, k.Events, "no error message is recorded: it may quote a value")
	assert.Equal(t, codes.Error, tr.one(t, coord.SpanPhase1).Status.Code)
	assert.Equal(t, coord.SpanTransaction, tr.parentName(tr.one(t, coord.SpanAbort)),
		"the abort runs on a fresh context, still under the request's span")
	final := tr.one(t, coord.SpanLogFinal)
	assert.Equal(t, coord.SpanTransaction, tr.parentName(final))
	assert.Equal(t, "aborted", attrs(final)[coord.AttrState].AsString())
	assert.Empty(t, tr.byName[coord.SpanLogPrepared], "never prepared")
	assert.Empty(t, tr.byName[coord.SpanEndTxn], "never decided")
}

// A resolver's steps are traced under its span: claim, EndTxn by the stored ids, phase 2 per
// database, the final write.
func TestTraceRules(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.at = func(_ int, op string) mode {
		if op == "log.prepared" {
			return failAfter // prepared is logged, its answer lost: the row is left prepared
		}
		return pass
	}
	c := tracedCoordinator(t, w, nil)
	_, err := c.Execute(context.Background(), twoDBsAndKafka("z"))
	require.Error(t, err)
	w.at = nil
	row, err := fakeLog{w}.Get(context.Background(), "z")
	require.NoError(t, err)
	require.Equal(t, txntype.StatePrepared, row.State)

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, span := tp.Tracer("test").Start(context.Background(), "resolver")
	rules := coord.Rules{Log: fakeLog{w}, SQL: fakeSQL{w}, Kafka: fakeKafka{w}}
	to, err := rules.Resolve(ctx, row, txntype.Fence{Instance: "r", Epoch: 1}, nil)
	span.End()
	require.NoError(t, err)
	require.Equal(t, txntype.StateCommitted, to)

	tr := treeOf(exp.GetSpans())
	for _, name := range []string{coord.SpanLogClaim, coord.SpanEndTxn, coord.SpanLogFinal} {
		assert.Equal(t, "resolver", tr.parentName(tr.one(t, name)), name)
	}
	require.Len(t, tr.byName[coord.SpanSQLPhase2], 2)
	assert.Equal(t, "commit", attrs(tr.one(t, coord.SpanEndTxn))[coord.AttrDecision].AsString())
	assert.Equal(t, "committed", attrs(tr.one(t, coord.SpanLogFinal))[coord.AttrState].AsString())
}

// Tracing off (no tracer) against the SDK with an in-memory exporter, in the same run: the
// overhead of traces when off is what this shows (compare ns/op and allocs/op of "off" with
// "in-memory"; TestTracingOffAllocatesNothing pins the allocations of the span helpers at 0).
func BenchmarkTracing(b *testing.B) {
	for _, bc := range []struct {
		name string
		exp  *tracetest.InMemoryExporter
	}{
		{"off", nil},
		{"in-memory", tracetest.NewInMemoryExporter()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var exp sdktrace.SpanExporter
			if bc.exp != nil {
				exp = bc.exp
			}
			c := tracedCoordinator(b, newWorld(), exp)
			ctx := context.Background()
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if _, err := c.Execute(ctx, twoDBsAndKafka("")); err != nil {
					b.Fatal(err)
				}
				if n++; bc.exp != nil && n%1024 == 0 {
					bc.exp.Reset() // bounded memory; the spans were exported
				}
			}
		})
	}
}
