package api

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// Metrics is what the API needs from the metrics package (metrics.Metrics): the scrape handler
// and the request instruments.
type Metrics interface {
	Handler() http.Handler
	HTTPStarted()
	HTTPDone()
	ObserveHTTP(method, route string, code int, d time.Duration)
}

// metricsRoutes mounts /metrics: the service's registry in the Prometheus exposition formats
// (404 when the server was built without metrics).
func (s *Server) metricsRoutes(r chi.Router) {
	r.Get("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if s.deps.Metrics == nil {
			s.writeError(w, r, refuse(errMetricsDisabled, "metrics are not enabled"))
			return
		}
		s.deps.Metrics.Handler().ServeHTTP(w, r)
	})
}

// instrument is the middleware that counts and times every request by method, route pattern
// and status. It runs before authentication, so refused requests (401/403) are counted too.
func (s *Server) instrument() func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		m := s.deps.Metrics
		if m == nil {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			m.HTTPStarted()
			defer m.HTTPDone()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			route := ""
			if rc := chi.RouteContext(r.Context()); rc != nil {
				route = rc.RoutePattern()
			}
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK
			}
			m.ObserveHTTP(r.Method, route, status, time.Since(start))
		})
	}
}
