package api

import (
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/operator"
	"github.com/kpgtx/coordinator/txntype"
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
		{"not abortable", fmt.Errorf("%w: committing", operator.ErrNotAbortable), http.StatusConflict, "not_allowed"},
		{"heuristic", fmt.Errorf("%w: r1 ended heuristic", operator.ErrHeuristic), http.StatusConflict, "not_allowed"},
		{"not heuristic", fmt.Errorf("%w: r1 is prepared", operator.ErrNotHeuristic), http.StatusConflict, "not_allowed"},
		{"in flight", fmt.Errorf("%w: r1 is in flight", operator.ErrInFlight), http.StatusConflict, "not_allowed"},
		{"instance alive", fmt.Errorf("%w: r1 belongs to instance b", operator.ErrInstanceAlive), http.StatusConflict, "not_allowed"},
		{"moved on", fmt.Errorf("%w: r1 was resolved meanwhile", operator.ErrMovedOn), http.StatusConflict, "not_allowed"},
		{"not ready", errNotReady, http.StatusServiceUnavailable, "not_ready"},
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

// An operator's refusal reads as it always has: txntype.ErrNotAllowed's text, then why.
func TestOperatorRefusalMessage(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("%w: r1 is committed: there is nothing to abort", operator.ErrNotAbortable)
	assert.Equal(t, txntype.ErrNotAllowed.Error()+": r1 is committed: there is nothing to abort", err.Error())
	assert.ErrorIs(t, err, txntype.ErrNotAllowed)
}

// Every error status of the API comes from its one table (statusTable): no 4xx or 5xx status
// constant of net/http appears in any other file of the package. Success statuses may.
func TestErrorStatusesOnlyInTable(t *testing.T) {
	t.Parallel()
	httpPkg, err := importer.Default().Import("net/http")
	require.NoError(t, err)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "errors.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		checked++
		http := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"net/http"` {
				http = "http"
				if imp.Name != nil {
					http = imp.Name.Name
				}
			}
		}
		if http == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || !strings.HasPrefix(sel.Sel.Name, "Status") {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != http {
				return true
			}
			c, ok := httpPkg.Scope().Lookup(sel.Sel.Name).(*types.Const)
			if !ok {
				return true // http.StatusText, a function
			}
			code, _ := constant.Int64Val(c.Val())
			assert.False(t, code >= 400, "%s: http.%s (%d) outside errors.go: give it a sentinel in statusTable",
				fset.Position(sel.Pos()), sel.Sel.Name, code)
			return true
		})
	}
	require.Positive(t, checked, "the package's files were read")
}
