package api

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
)

func TestStatusOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		status int
		class  string
	}{
		{"body too large", errBodyTooLarge, http.StatusRequestEntityTooLarge, "invalid_request"},
		{"body too large wrapped", fmt.Errorf("%w: the limit is 1024 bytes", errBodyTooLarge), http.StatusRequestEntityTooLarge, "invalid_request"},
		{"invalid request", txntype.ErrInvalidRequest, http.StatusBadRequest, "invalid_request"},
		{"overloaded", refuse(errOverloaded, "server busy: 64 requests in flight"), http.StatusTooManyRequests, "overloaded"},
		{"no token", refuse(errUnauthorized, "missing bearer token"), http.StatusUnauthorized, "unauthorized"},
		{"token lacks the role", refuse(errForbidden, "token lacks the admin role"), http.StatusForbidden, "forbidden"},
		{"cross origin", refuse(errCrossOrigin, "cross-origin request refused"), http.StatusForbidden, "cross_origin"},
		{"metrics off", refuse(errMetricsDisabled, "metrics are not enabled"), http.StatusNotFound, "not_found"},
		{"invalid error", &txntype.InvalidError{}, http.StatusBadRequest, "invalid_request"},
		{"invalid error with field", &txntype.InvalidError{Field: "sql[0].statement", Reason: "must not be empty"}, http.StatusBadRequest, "invalid_request"},
		{"invalid error wrapped", fmt.Errorf("decode: %w", &txntype.InvalidError{Field: "id"}), http.StatusBadRequest, "invalid_request"},
		{"id conflict", txntype.ErrIDConflict, http.StatusUnprocessableEntity, "id_conflict"},
		{"id conflict wrapped", fmt.Errorf("r1: %w", txntype.ErrIDConflict), http.StatusUnprocessableEntity, "id_conflict"},
		{"not found", txntype.ErrNotFound, http.StatusNotFound, "not_found"},
		{"not found wrapped", fmt.Errorf("get r1: %w", txntype.ErrNotFound), http.StatusNotFound, "not_found"},
		{"aborted", txntype.ErrAborted, http.StatusConflict, "aborted"},
		{"in doubt", txntype.ErrInDoubt, http.StatusAccepted, "in_doubt"},
		{"not allowed", txntype.ErrNotAllowed, http.StatusConflict, "not_allowed"},
		{"not allowed wrapped", fmt.Errorf("%w: prepared: Kafka decides", txntype.ErrNotAllowed), http.StatusConflict, "not_allowed"},
		{"unavailable", txntype.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
		{"outcome aborted", &txntype.OutcomeError{Sentinel: txntype.ErrAborted}, http.StatusConflict, "aborted"},
		{"outcome aborted with cause", &txntype.OutcomeError{Sentinel: txntype.ErrAborted, Cause: errors.New("23505"), Txn: &txntype.Transaction{ID: "r1"}}, http.StatusConflict, "aborted"},
		{"outcome in doubt", &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt}, http.StatusAccepted, "in_doubt"},
		{"outcome unavailable", &txntype.OutcomeError{Sentinel: txntype.ErrUnavailable, Cause: errors.New("dial tcp: refused")}, http.StatusServiceUnavailable, "unavailable"},
		{"outcome wrapped", fmt.Errorf("execute: %w", &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt}), http.StatusAccepted, "in_doubt"},
		// The sentinel decides, not a cause that would map elsewhere.
		{"outcome aborted caused by unavailable", &txntype.OutcomeError{Sentinel: txntype.ErrAborted, Cause: txntype.ErrUnavailable}, http.StatusConflict, "aborted"},
		// An outcome is mapped by its own sentinel, whatever its cause wraps: an id in flight whose
		// row was not found yet is not "not found".
		{"outcome unavailable caused by not found", &txntype.OutcomeError{Sentinel: txntype.ErrUnavailable, Cause: fmt.Errorf("get: %w", txntype.ErrNotFound)}, http.StatusServiceUnavailable, "unavailable"},
		{"outcome in doubt caused by not found", &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Cause: txntype.ErrNotFound}, http.StatusAccepted, "in_doubt"},
		{"outcome in doubt caused by invalid", &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Cause: &txntype.InvalidError{Field: "id"}}, http.StatusAccepted, "in_doubt"},
		{"outcome in doubt caused by id conflict, wrapped", fmt.Errorf("execute: %w", &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Cause: txntype.ErrIDConflict}), http.StatusAccepted, "in_doubt"},
		{"unknown", errors.New("boom"), http.StatusInternalServerError, "internal"},
		{"kafka aborted is not a status", txntype.ErrKafkaAborted, http.StatusInternalServerError, "internal"},
		{"failure", &txntype.Failure{Participant: "kafka", Class: txntype.ClassInternal, Err: errors.New("x")}, http.StatusInternalServerError, "internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			status, class := statusOf(tt.err)
			assert.Equal(t, tt.status, status)
			assert.Equal(t, tt.class, class)
		})
	}
}

func TestStatusTableUnique(t *testing.T) {
	t.Parallel()
	// One entry per sentinel; a status may serve several (409: aborted, not_allowed).
	seen := map[error]bool{}
	for _, e := range statusTable {
		assert.False(t, seen[e.err], "sentinel %v appears twice", e.err)
		seen[e.err] = true
		status, class := statusOf(e.err)
		assert.Equal(t, e.status, status, "%v", e.err)
		assert.Equal(t, e.class, class, "%v", e.err)
	}
}
