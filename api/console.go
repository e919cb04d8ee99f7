package api

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
)

// The web console: static HTML, CSS and JavaScript modules embedded in the binary (no build
// step), served at /ui/: the overview (charts of GET /v1/history, drawn with the vendored uPlot
// in ui/vendor), the in-doubt list, every transaction by state and age, the search by id or
// gid, one transaction, and the hanging Kafka transactions (GET /v1/kafka/hanging). The pages
// hold no data: every figure they show comes from the API
// (GET /v1/transactions, GET /v1/transactions/{id}, GET /v1/status, …) and every action goes
// through it (POST …/retry, …/abort, …/resolve), with the caller's bearer token, so the roles
// and the audit trail are the API's own.
//
// Security of the console:
//
//   - The pages are open (like /openapi.yaml): they carry no data. The token an operator types
//     is kept in the tab's sessionStorage and sent only as "Authorization: Bearer" by fetch:
//     never in a URL (so never in an access log or a Referer) and never in a cookie, so the
//     browser never attaches it to a request another site makes.
//   - Every /ui answer carries a strict Content-Security-Policy (scripts and styles from this
//     origin only, no inline code, connections to this origin only, no framing: clickjacking
//     is refused with frame-ancestors 'none' and X-Frame-Options DENY), nosniff and
//     no-referrer.
//   - State-changing API requests that a browser marks as cross-origin are refused
//     (crossOrigin below), whatever their credentials.

//go:embed ui
var consoleFiles embed.FS

// ConsolePath is where the console is served.
const ConsolePath = "/ui/"

// consoleCSP is the Content-Security-Policy of every console answer.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ConsoleFiles are the console's files, as served under /ui/.
func ConsoleFiles() fs.FS {
	files, err := fs.Sub(consoleFiles, "ui")
	if err != nil {
		panic("api: the embedded console is missing: " + err.Error()) // a build defect
	}
	return files
}

// consoleRoutes mounts the console: /ui redirects to /ui/, /ui/* serves the embedded files.
func (s *Server) consoleRoutes(r chi.Router) {
	static := http.StripPrefix("/ui", http.FileServerFS(ConsoleFiles()))
	r.Get("/ui", func(w http.ResponseWriter, r *http.Request) {
		consoleHeaders(w)
		http.Redirect(w, r, ConsolePath, http.StatusMovedPermanently)
	})
	r.Get("/ui/*", func(w http.ResponseWriter, r *http.Request) {
		consoleHeaders(w)
		static.ServeHTTP(w, r)
	})
}

// consoleHeaders sets the security headers of a console answer.
func consoleHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	// The files change with the binary: revalidate rather than keep a stale console.
	h.Set("Cache-Control", "no-cache")
}

// isConsolePath reports a path of the console's static files (open to GET and HEAD, auth.go).
func isConsolePath(path string) bool {
	return path == "/ui" || strings.HasPrefix(path, ConsolePath)
}

// crossOrigin refuses state-changing requests (any method but GET, HEAD and OPTIONS) that a
// browser marks as coming from another origin: Sec-Fetch-Site other than same-origin or none,
// or, from browsers that do not send it, an Origin whose host is not the request's Host
// (net/http's CrossOriginProtection). Requests without either header (curl, the CLI, other
// services) are not browsers' and pass: bearer tokens, never cookies, authenticate them. It
// runs before authentication, so a forged request is refused whatever it carries.
func (s *Server) crossOrigin() func(http.Handler) http.Handler {
	protect := http.NewCrossOriginProtection()
	protect.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, dropped := s.refusalLog.allow(); ok {
			s.cfg.Logger.Warn("request refused: cross-origin", refusalAttrs(r, dropped)...)
		}
		s.writeError(w, r, refuse(errCrossOrigin, "cross-origin request refused: state-changing requests from a browser must come from this server's own pages"))
	}))
	return protect.Handler
}
