package service

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/kpgtx/coordinator/coord"
)

func TestOTLPEndpointSetting(t *testing.T) {
	t.Parallel()
	c, err := Load(func(k string) string {
		return map[string]string{"COORDINATOR_OTLP_ENDPOINT": "http://collector:4318"}[k]
	})
	require.NoError(t, err)
	assert.Equal(t, "http://collector:4318", c.OTLPEndpoint)
	c.DatabaseURL = "postgres://localhost/app"
	require.NoError(t, c.Validate())

	for _, bad := range []string{"collector:4318", "ftp://collector", "http://", "://x"} {
		c.OTLPEndpoint = bad
		err := c.Validate()
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "COORDINATOR_OTLP_ENDPOINT", bad)
	}
}

// Off unless configured: no endpoint and no injected provider means no tracer at all.
func TestTracerOff(t *testing.T) {
	t.Parallel()
	tr, shutdown, err := Defaults().tracer(context.Background(), options{}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	assert.Nil(t, tr)
	assert.Nil(t, shutdown)
}

// With COORDINATOR_OTLP_ENDPOINT the spans reach the collector over OTLP/HTTP (flushed at the
// latest when the service closes), named by the service and its instance.
func TestTracerExportsOTLP(t *testing.T) {
	t.Parallel()
	got := make(chan *collectorpb.ExportTraceServiceRequest, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var req collectorpb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- &req
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	t.Cleanup(srv.Close)

	cfg := Defaults()
	cfg.Instance = "node-7"
	cfg.OTLPEndpoint = srv.URL
	tr, shutdown, err := cfg.tracer(context.Background(), options{}, slog.New(slog.NewTextHandler(testLog{t}, nil)))
	require.NoError(t, err)
	require.NotNil(t, tr)
	require.NotNil(t, shutdown)
	_, span := tr.Start(context.Background(), coord.SpanTransaction)
	span.End()
	require.NoError(t, shutdown(context.Background()))

	require.Len(t, got, 1, "one export, at the flush")
	req := <-got
	require.Len(t, req.ResourceSpans, 1)
	res := map[string]string{}
	for _, kv := range req.ResourceSpans[0].Resource.Attributes {
		res[kv.Key] = kv.Value.GetStringValue()
	}
	assert.Equal(t, "node-7", res["service.instance.id"])
	if os.Getenv("OTEL_SERVICE_NAME") == "" && !strings.Contains(os.Getenv("OTEL_RESOURCE_ATTRIBUTES"), "service.name") {
		assert.Equal(t, serviceName, res["service.name"])
	}
	require.Len(t, req.ResourceSpans[0].ScopeSpans, 1)
	assert.Equal(t, coord.TracerName, req.ResourceSpans[0].ScopeSpans[0].Scope.Name)
	require.Len(t, req.ResourceSpans[0].ScopeSpans[0].Spans, 1)
	assert.Equal(t, coord.SpanTransaction, req.ResourceSpans[0].ScopeSpans[0].Spans[0].Name)
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
