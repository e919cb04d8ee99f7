package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Bounded resources. The HTTP server's timeouts (service.Serve) close slow and idle
// connections; this middleware bounds what the requests being served may hold:
//
//   - at most Config.MaxInFlight requests run at once (COORDINATOR_MAX_IN_FLIGHT);
//   - their bodies hold at most Config.MaxBodyMemory bytes together
//     (COORDINATOR_MAX_BODY_MEMORY). A request reserves its Content-Length, or
//     MaxBodyBytes when it does not declare one, before its body is read.
//
// Beyond either, the answer is 429 with Retry-After, and nothing was run. Liveness, readiness
// and metrics are exempt: a busy server must still say that it is alive.

// limitExempt are the paths (GET or HEAD) that the limits never refuse.
var limitExempt = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

func (s *Server) limit() func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if (r.Method == http.MethodGet || r.Method == http.MethodHead) && limitExempt[r.URL.Path] {
				next.ServeHTTP(w, r)
				return
			}
			if n := s.inFlight.Add(1); s.cfg.MaxInFlight > 0 && n > int64(s.cfg.MaxInFlight) {
				s.inFlight.Add(-1)
				s.overloaded(w, r, fmt.Sprintf("%d requests in flight, the most this server serves at once (COORDINATOR_MAX_IN_FLIGHT)", s.cfg.MaxInFlight))
				return
			}
			defer s.inFlight.Add(-1)
			if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
				n := r.ContentLength
				if n < 0 || n > s.cfg.MaxBodyBytes {
					n = s.cfg.MaxBodyBytes // what readJSON reads at most
				}
				if held := s.bodyMemory.Add(n); s.cfg.MaxBodyMemory > 0 && held > s.cfg.MaxBodyMemory {
					s.bodyMemory.Add(-n)
					s.overloaded(w, r, fmt.Sprintf("request bodies being read hold %d bytes, the most this server holds at once (COORDINATOR_MAX_BODY_MEMORY)", s.cfg.MaxBodyMemory))
					return
				}
				defer s.bodyMemory.Add(-n)
			}
			next.ServeHTTP(w, r)
		})
	}
}

// overloaded answers 429 with Retry-After; the log line is rate-limited.
func (s *Server) overloaded(w http.ResponseWriter, r *http.Request, why string) {
	if ok, dropped := s.refusalLog.allow(); ok {
		s.cfg.Logger.Warn("request refused: server busy", "method", r.Method, "path", r.URL.Path,
			"remote", r.RemoteAddr, "reason", why, "suppressed", dropped)
	}
	s.writeError(w, r, refuse(errOverloaded, fmt.Sprintf("%v: %s; nothing was run, retry after %s s", errOverloaded, why, retryAfterSeconds)))
}

// logLimiter lets through at most burst log lines per period, so that a flood of refused
// requests (wrong tokens, overload) cannot flood the log; the next line let through reports how
// many were suppressed.
type logLimiter struct {
	period time.Duration
	burst  int

	mu      sync.Mutex
	start   time.Time
	n       int
	dropped int
}

func newLogLimiter(burst int, period time.Duration) *logLimiter {
	return &logLimiter{period: period, burst: burst}
}

// allow reports whether a line may be written now, and how many were suppressed before it.
func (l *logLimiter) allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.start) >= l.period {
		l.start, l.n = now, 0
	}
	if l.n >= l.burst {
		l.dropped++
		return false, 0
	}
	l.n++
	suppressed, l.dropped = l.dropped, 0
	return true, suppressed
}

// refusalAttrs are the attributes of a rate-limited refusal line.
func refusalAttrs(r *http.Request, suppressed int, more ...any) []any {
	return append([]any{slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("remote", r.RemoteAddr), slog.Int("suppressed", suppressed)}, more...)
}
