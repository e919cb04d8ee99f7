package service

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/kpgtx/coordinator/coord"
)

// Traces (OpenTelemetry) are off unless COORDINATOR_OTLP_ENDPOINT names an OTLP/HTTP collector
// (http://collector:4318, or https:// for TLS). It is read as OTEL_EXPORTER_OTLP_ENDPOINT is:
// a base URL, to which /v1/traces is appended. Off, no tracer is wired at all: the protocol starts no span and allocates nothing for
// traces. On, the OpenTelemetry SDK batches the spans to the collector, and reads the standard
// variables where it reads them: OTEL_EXPORTER_OTLP_HEADERS / _TIMEOUT / _COMPRESSION /
// _CERTIFICATE (and their _TRACES_ forms), OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (the
// service name defaults to kpgtx-coordinator, service.instance.id to COORDINATOR_INSTANCE),
// OTEL_TRACES_SAMPLER / _ARG (default: parentbased_always_on), OTEL_BSP_*. The endpoint itself
// is COORDINATOR_OTLP_ENDPOINT: OTEL_EXPORTER_OTLP_ENDPOINT alone does not turn traces on.
// Tests inject a provider instead (WithTracerProvider).

// serviceName is the default service.name of the coordinator's traces.
const serviceName = "kpgtx-coordinator"

// Option adjusts what Open wires.
type Option func(*options)

type options struct {
	tracerProvider  trace.TracerProvider
	historyInterval time.Duration // history.go
}

// WithTracerProvider makes the service trace with tp (tests: an SDK provider with an in-memory
// exporter) instead of what COORDINATOR_OTLP_ENDPOINT says. The caller shuts tp down.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// validateTracing checks COORDINATOR_OTLP_ENDPOINT.
func (c Config) validateTracing() []string {
	if c.OTLPEndpoint == "" {
		return nil
	}
	u, err := url.Parse(c.OTLPEndpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return []string{"COORDINATOR_OTLP_ENDPOINT: want the URL of an OTLP/HTTP collector, http(s)://host:port (e.g. http://localhost:4318)"}
	}
	return nil
}

// tracer returns the service's tracer, or nil when traces are off. shutdown flushes and stops
// a provider the service made (nil for an injected one or none).
func (c Config) tracer(ctx context.Context, o options, logger *slog.Logger) (tr trace.Tracer, shutdown func(context.Context) error, err error) {
	if o.tracerProvider != nil {
		return o.tracerProvider.Tracer(coord.TracerName), nil, nil
	}
	if c.OTLPEndpoint == "" {
		return nil, nil, nil
	}
	u, err := url.Parse(c.OTLPEndpoint)
	if err != nil {
		return nil, nil, fmt.Errorf("COORDINATOR_OTLP_ENDPOINT: %w", err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, nil, fmt.Errorf("COORDINATOR_OTLP_ENDPOINT: %w", err)
	}
	// Later detectors win: the environment's OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the defaults.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", serviceName),
			attribute.String("service.instance.id", c.Instance)),
		resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	// The SDK reports export failures through the global handler: into the service's log.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("trace export failed", "error", err)
	}))
	logger.Info("traces exported over OTLP/HTTP", "endpoint", u.Redacted())
	return tp.Tracer(coord.TracerName), tp.Shutdown, nil
}

// traceFlushTimeout bounds the flush of the spans still batched when the service closes.
const traceFlushTimeout = 5 * time.Second
