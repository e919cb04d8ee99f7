package api

import (
	"errors"
	"net/http"

	"github.com/kpgtx/coordinator/txntype"
)

// Sentinels of the HTTP layer.
var (
	// errBodyTooLarge: the body exceeds the configured limit (413); nothing was run.
	errBodyTooLarge = errors.New("request body too large")
	// errOverloaded: too many requests in flight, or too much memory held by request bodies
	// (limits.go); nothing was run: retry after Retry-After (429).
	errOverloaded = errors.New("server busy")
	// errUnauthorized: no bearer token, or one the server does not know (auth.go, 401).
	errUnauthorized = errors.New("unauthorized")
	// errForbidden: the token lacks the role the route needs (auth.go, 403).
	errForbidden = errors.New("forbidden")
	// errCrossOrigin: a browser's state-changing request from another origin (console.go, 403).
	errCrossOrigin = errors.New("cross-origin request refused")
	// errMetricsDisabled: the server was built without metrics (metrics.go, 404).
	errMetricsDisabled = errors.New("metrics are not enabled")
	// errNotReady: a readiness check failed (health.go, 503); the body names the failing checks.
	errNotReady = errors.New("not ready")
)

// refusal is an error of the HTTP layer said as its message, whose sentinel chooses the status
// (statusTable): the middlewares refuse with it through writeError, as handlers return errors.
type refusal struct {
	sentinel error
	msg      string
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.sentinel }

// refuse is a refusal of the sentinel's class with the message msg.
func refuse(sentinel error, msg string) error { return &refusal{sentinel: sentinel, msg: msg} }

// statusTable maps each sentinel to its HTTP status: the one place where errors become
// statuses. Checked in order; the first match wins. An outcome (txntype.OutcomeError) is mapped
// by its own sentinel only: its cause says why, never what the request may do next (a lookup
// that found no row under an id still in flight is not "not found").
var statusTable = []struct {
	err    error
	status int
	class  string
}{
	{errBodyTooLarge, http.StatusRequestEntityTooLarge, "invalid_request"},
	{errUnsupportedMediaType, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	{errOverloaded, http.StatusTooManyRequests, "overloaded"},
	{errUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{errForbidden, http.StatusForbidden, "forbidden"},
	{errCrossOrigin, http.StatusForbidden, "cross_origin"},
	{errMetricsDisabled, http.StatusNotFound, "not_found"},
	{errNotReady, http.StatusServiceUnavailable, "not_ready"},
	{txntype.ErrInvalidRequest, http.StatusBadRequest, "invalid_request"},
	{txntype.ErrIDConflict, http.StatusUnprocessableEntity, "id_conflict"},
	{txntype.ErrNotFound, http.StatusNotFound, "not_found"},
	{txntype.ErrAborted, http.StatusConflict, "aborted"},
	// The operator's refusals (operator/errors.go) wrap txntype.ErrNotAllowed: the same class.
	{txntype.ErrNotAllowed, http.StatusConflict, "not_allowed"},
	// A caller's decision of a transaction that does not wait for one, or against the one
	// taken (decide.go).
	{txntype.ErrNotWaiting, http.StatusConflict, "not_allowed"},
	{txntype.ErrDecided, http.StatusConflict, "decided"},
	{txntype.ErrInDoubt, http.StatusAccepted, "in_doubt"},
	{txntype.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
}

func statusOf(err error) (int, string) {
	var oe *txntype.OutcomeError
	if errors.As(err, &oe) {
		err = oe.Sentinel
	}
	for _, e := range statusTable {
		if errors.Is(err, e.err) {
			return e.status, e.class
		}
	}
	return http.StatusInternalServerError, "internal"
}

// retryLater reports whether an answer of this status may be sent again as is, after a pause
// (Retry-After): nothing was left prepared.
func retryLater(status int) bool {
	return status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests
}

// serverError reports whether the status is the server's fault (a span in error, a log line).
func serverError(status int) bool { return status >= http.StatusInternalServerError }
