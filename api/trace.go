package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kpgtx/coordinator/coord"
)

// Attribute keys of the request's span (OpenTelemetry's HTTP conventions).
const (
	attrMethod = attribute.Key("http.request.method")
	attrRoute  = attribute.Key("http.route")
	attrStatus = attribute.Key("http.response.status_code")
)

// traceContext is the propagation the API reads: W3C Trace Context (traceparent, tracestate).
var traceContext propagation.TextMapPropagator = propagation.TraceContext{}

// traced is the middleware that opens every request's server span, continuing the trace of the
// request's traceparent header when it has a valid one. It runs first, so that refused requests
// (401, 403, 429) are traced too. The span is named by the route pattern, never the path with
// its ids; it records the method, the route and the status, nothing of the headers or the body
// (a bearer token stays out). Without a tracer it is not installed at all.
func (s *Server) traced() func(http.Handler) http.Handler {
	tracer := s.cfg.Tracer
	return func(next http.Handler) http.Handler {
		if tracer == nil {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attrMethod.String(r.Method)))
			defer span.End()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r.WithContext(ctx))
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK
			}
			span.SetAttributes(attrStatus.Int(status))
			if rc := chi.RouteContext(ctx); rc != nil && rc.RoutePattern() != "" {
				span.SetName(r.Method + " " + rc.RoutePattern())
				span.SetAttributes(attrRoute.String(rc.RoutePattern()))
			}
			if serverError(status) {
				span.SetStatus(codes.Error, http.StatusText(status))
			}
		})
	}
}

// traceRequest names the transaction on the request's span once its body is read.
func traceRequest(r *http.Request, id string) {
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() && id != "" {
		span.SetAttributes(coord.AttrRequestID.String(id))
	}
}
