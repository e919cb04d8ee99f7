package api

import (
	"errors"
	"net/http"

	"github.com/kpgtx/coordinator/coord"
)

// Sentinels of the HTTP layer.
var (
	// errBodyTooLarge: the body exceeds the configured limit (413); nothing was run.
	errBodyTooLarge = errors.New("request body too large")
	// errOverloaded: too many requests in flight, or too much memory held by request bodies
	// (limits.go); nothing was run: retry after Retry-After (429).
	errOverloaded = errors.New("server busy")
)

// statusTable maps each sentinel to its HTTP status: the one place where errors become
// statuses. Checked in order; the first match wins. An outcome (coord.OutcomeError) is mapped
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
	{coord.ErrInvalidRequest, http.StatusBadRequest, "invalid_request"},
	{coord.ErrIDConflict, http.StatusUnprocessableEntity, "id_conflict"},
	{coord.ErrNotFound, http.StatusNotFound, "not_found"},
	{coord.ErrAborted, http.StatusConflict, "aborted"},
	{coord.ErrNotAllowed, http.StatusConflict, "not_allowed"},
	{coord.ErrInDoubt, http.StatusAccepted, "in_doubt"},
	{coord.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
}

func statusOf(err error) (int, string) {
	var oe *coord.OutcomeError
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
