package test

// Traces: with a tracer provider injected (an in-memory exporter), a request continues the trace
// of its traceparent header, every phase is a span under it, the produced records carry the
// trace on to consumers, and recovery passes are traced; without one, nothing is added.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/service"
	"github.com/kpgtx/coordinator/txntype"
)

// tracedEnv is an env whose service traces into an in-memory exporter.
func tracedEnv(t *testing.T) (*env, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return newEnv(t, envOpts{serviceOpts: []service.Option{service.WithTracerProvider(tp)}}), exp
}

// postTraced sends a transaction with a traceparent header.
func (e *env) postTraced(t *testing.T, traceparent string, body any) response {
	t.Helper()
	buf, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/transactions", bytes.NewReader(buf))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return response{Status: resp.StatusCode, Body: out}
}

// spansOfTrace waits until the trace's server span has ended (it ends after the answer is
// written), and a span of each name in also, and returns the trace's spans by name.
func spansOfTrace(t *testing.T, exp *tracetest.InMemoryExporter, id trace.TraceID, server string, also ...string) map[string][]tracetest.SpanStub {
	t.Helper()
	var out map[string][]tracetest.SpanStub
	require.Eventually(t, func() bool {
		out = map[string][]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == id {
				out[s.Name] = append(out[s.Name], s)
			}
		}
		for _, name := range also {
			if len(out[name]) == 0 {
				return false
			}
		}
		return len(out[server]) == 1
	}, 30*time.Second, 10*time.Millisecond, "the server span %q of trace %s (and %v)", server, id, also)
	return out
}

func spanAttrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// only requires one span of the name and returns it.
func only(t *testing.T, spans map[string][]tracetest.SpanStub, name string) tracetest.SpanStub {
	t.Helper()
	require.Len(t, spans[name], 1, "spans named %s", name)
	return spans[name][0]
}

// header returns the values of a record's headers of that key.
func header(r *kgo.Record, key string) []string {
	var vs []string
	for _, h := range r.Headers {
		if h.Key == key {
			vs = append(vs, string(h.Value))
		}
	}
	return vs
}

const incoming = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// A committed request: its spans form one tree under the caller's span, with the participants'
// attributes, and the record it produced carries the trace (the Kafka phase's span) to
// consumers, while a record with the client's own traceparent keeps it.
func TestTraceCommittedRequest(t *testing.T) {
	t.Parallel()
	e, exp := tracedEnv(t)
	const clientTP = "00-11111111111111111111111111111111-2222222222222222-01"
	r := e.postTraced(t, incoming, map[string]any{
		"id":  "tr-1",
		"sql": []map[string]any{{"statement": "INSERT INTO orders (id, total) VALUES ($1, $2)", "args": []any{"tr-1-secret", 7}}},
		"kafka": []map[string]any{
			{"topic": e.topic, "key": "tr-1-a", "value": "secret-value"},
			{"topic": e.topic, "key": "tr-1-b", "value": "v", "headers": map[string]string{"Traceparent": clientTP}},
		},
	})
	require.Equal(t, http.StatusOK, r.Status, "%v", r.Body)

	in, err := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	require.NoError(t, err)
	// The final write follows the answer (coord/finals.go): its span may end after the server's.
	spans := spansOfTrace(t, exp, in, "POST /v1/transactions", coord.SpanLogFinal)
	server := only(t, spans, "POST /v1/transactions")
	assert.Equal(t, "b7ad6b7169203331", server.Parent.SpanID().String(), "the caller's span is the parent")
	assert.True(t, server.Parent.IsRemote())
	assert.Equal(t, trace.SpanKindServer, server.SpanKind)
	sa := spanAttrs(server)
	assert.EqualValues(t, 200, sa["http.response.status_code"].AsInt64())
	assert.Equal(t, "/v1/transactions", sa["http.route"].AsString())
	assert.Equal(t, "tr-1", sa[coord.AttrRequestID].AsString())

	txn := only(t, spans, coord.SpanTransaction)
	assert.Equal(t, server.SpanContext.SpanID(), txn.Parent.SpanID())
	ta := spanAttrs(txn)
	assert.Equal(t, e.prefix+"_tr-1", ta[coord.AttrGID].AsString())
	assert.Equal(t, "committed", ta[coord.AttrState].AsString())

	byID := map[trace.SpanID]string{}
	for name, ss := range spans {
		for _, s := range ss {
			byID[s.SpanContext.SpanID()] = name
		}
	}
	for name, parent := range map[string]string{
		coord.SpanLogBegin:    coord.SpanTransaction,
		coord.SpanPhase1:      coord.SpanTransaction,
		coord.SpanSQL:         coord.SpanPhase1,
		coord.SpanKafka:       coord.SpanPhase1,
		coord.SpanLogPrepared: coord.SpanTransaction,
		coord.SpanEndTxn:      coord.SpanTransaction,
		coord.SpanPhase2:      coord.SpanTransaction,
		coord.SpanSQLPhase2:   coord.SpanPhase2,
		coord.SpanLogFinal:    coord.SpanTransaction,
	} {
		s := only(t, spans, name)
		assert.Equal(t, parent, byID[s.Parent.SpanID()], "parent of %s", name)
		assert.NotEqual(t, codes.Error, s.Status.Code, name)
	}
	assert.Equal(t, txntype.DefaultDatabase, spanAttrs(only(t, spans, coord.SpanSQL))[coord.AttrDatabase].AsString())
	kafka := only(t, spans, coord.SpanKafka)
	ka := spanAttrs(kafka)
	assert.Contains(t, ka[coord.AttrTransactionalID].AsString(), e.prefix)
	assert.Positive(t, ka[coord.AttrProducerID].AsInt64())
	assert.Contains(t, ka, coord.AttrProducerEpoch)
	assert.Equal(t, "commit", spanAttrs(only(t, spans, coord.SpanEndTxn))[coord.AttrDecision].AsString())
	for _, ss := range spans {
		for _, s := range ss {
			for _, kv := range s.Attributes {
				assert.NotContains(t, kv.Value.Emit(), "secret", "%s: %s", s.Name, kv.Key)
			}
		}
	}

	// The records, read back from the topic.
	byKey := map[string]*kgo.Record{}
	for _, rec := range e.committedRecords(e.topic) {
		byKey[string(rec.Key)] = rec
	}
	require.Contains(t, byKey, "tr-1-a")
	tps := header(byKey["tr-1-a"], kafkatxn.TraceParentHeader)
	require.Len(t, tps, 1, "one traceparent header")
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": tps[0]}))
	require.True(t, sc.IsValid(), "traceparent %q", tps[0])
	assert.Equal(t, in, sc.TraceID(), "the request's trace")
	assert.Equal(t, kafka.SpanContext.SpanID(), sc.SpanID(), "the Kafka phase's span")

	require.Contains(t, byKey, "tr-1-b")
	assert.Equal(t, []string{clientTP}, header(byKey["tr-1-b"], "Traceparent"), "the client's own is kept")
	assert.Empty(t, header(byKey["tr-1-b"], kafkatxn.TraceParentHeader), "and none is added")
}

// An aborted request: the transaction's span and the failing database's carry the error by its
// class and SQLSTATE, and the abort is traced.
func TestTraceAbortedRequest(t *testing.T) {
	t.Parallel()
	e, exp := tracedEnv(t)
	insert := map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{"tr-2-secret"}}
	r := e.postTraced(t, incoming, map[string]any{
		"id":    "tr-2",
		"sql":   []map[string]any{insert, insert}, // the second violates the primary key
		"kafka": []map[string]any{{"topic": e.topic, "value": "v"}},
	})
	require.Equal(t, http.StatusConflict, r.Status, "%v", r.Body)

	in, err := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	require.NoError(t, err)
	spans := spansOfTrace(t, exp, in, "POST /v1/transactions")
	assert.EqualValues(t, 409, spanAttrs(only(t, spans, "POST /v1/transactions"))["http.response.status_code"].AsInt64())
	for _, name := range []string{coord.SpanTransaction, coord.SpanSQL} {
		s := only(t, spans, name)
		assert.Equal(t, codes.Error, s.Status.Code, name)
		a := spanAttrs(s)
		assert.Equal(t, string(txntype.ClassAbortable), a[coord.AttrErrorType].AsString(), name)
		assert.Equal(t, "23505", a[coord.AttrSQLState].AsString(), name)
		assert.Empty(t, s.Events, "%s: no error message (it quotes the key's value)", name)
	}
	assert.Equal(t, "aborted", spanAttrs(only(t, spans, coord.SpanTransaction))[coord.AttrState].AsString())
	only(t, spans, coord.SpanAbort)
	assert.Equal(t, "aborted", spanAttrs(only(t, spans, coord.SpanLogFinal))[coord.AttrState].AsString())
	assert.Empty(t, spans[coord.SpanLogPrepared])
}

// A recovery pass is a span; the prepared rows it resolves by the page (C1) have a page's span
// under it, with one span per transaction and the rules' steps of the page under that.
func TestTraceRecoveryPass(t *testing.T) {
	t.Parallel()
	e, exp := tracedEnv(t)
	ctx := context.Background()
	require.NoError(t, prepareOne(ctx, e, e.db, "tr-3"))
	gid := e.svc.Coord.GID("tr-3")

	// The pass's span ends after the whole pass: wait for it too.
	var (
		resolve, page, pass tracetest.SpanStub
		spans               tracetest.SpanStubs
	)
	parent := func(of tracetest.SpanStub) (tracetest.SpanStub, bool) {
		for _, s := range spans {
			if s.SpanContext.SpanID() == of.Parent.SpanID() {
				return s, true
			}
		}
		return tracetest.SpanStub{}, false
	}
	require.Eventually(t, func() bool {
		spans = exp.GetSpans()
		found := false
		for _, s := range spans {
			if s.Name == recovery.SpanResolve && spanAttrs(s)[coord.AttrGID].AsString() == gid {
				resolve, found = s, true
			}
		}
		if !found {
			return false
		}
		if page, found = parent(resolve); !found {
			return false
		}
		pass, found = parent(page)
		return found
	}, time.Minute, 20*time.Millisecond, "recovery resolves %s in a traced pass", gid)
	got, err := e.svc.Log.Get(ctx, "tr-3")
	require.NoError(t, err)
	assert.Equal(t, txntype.StateCommitted, got.State)

	ra := spanAttrs(resolve)
	assert.Equal(t, "committed", ra[recovery.AttrOutcome].AsString())
	assert.Equal(t, "prepared", ra[coord.AttrState].AsString(), "the state it was found in")
	assert.Equal(t, e.prefix+"-dead-tr-3", ra[coord.AttrTransactionalID].AsString())
	assert.Equal(t, recovery.SpanResolvePage, page.Name, "under its page")
	assert.EqualValues(t, 1, spanAttrs(page)[recovery.AttrResolved].AsInt64())
	assert.Equal(t, recovery.SpanPass, pass.Name, "the page under its pass")
	assert.Positive(t, spanAttrs(pass)[recovery.AttrResolved].AsInt64())

	children := map[string]int{}
	for _, s := range spans {
		if s.Parent.SpanID() == page.SpanContext.SpanID() && s.Name != recovery.SpanResolve {
			children[s.Name]++
		}
	}
	assert.Equal(t, map[string]int{coord.SpanLogClaim: 1, coord.SpanEndTxn: 1, coord.SpanSQLPhase2: 1, coord.SpanLogFinal: 1}, children)
}

// Without a tracer nothing is added to the records, whatever the request carries.
func TestTraceOffAddsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	r := e.postTraced(t, incoming, map[string]any{"id": "tr-4", "kafka": []map[string]any{{"topic": e.topic, "key": "tr-4", "value": "v"}}})
	require.Equal(t, http.StatusOK, r.Status, "%v", r.Body)
	recs := e.committedRecords(e.topic)
	require.Len(t, recs, 1)
	for _, rec := range recs {
		assert.Empty(t, rec.Headers)
	}
}
