package api

import (
	"net/http"
	"strings"

	"github.com/kpgtx/coordinator/txntype"
)

// The caller's decision of a transaction it prepared with "decision": "external" (X2, X3 in
// docs/design.md): POST /v1/transactions/{id}/commit and /rollback. Any instance sharing the
// log takes it; both are idempotent (repeated, they answer the outcome).

// commitBody is the body of POST /v1/transactions/{id}/commit.
type commitBody struct {
	// PreparedState is the prepared_state the prepare answered: a stale one aborts (X2).
	PreparedState *string `json:"prepared_state"`
}

// rollbackBody is the body of POST /v1/transactions/{id}/rollback: nothing, or {}.
type rollbackBody struct{}

func (s *Server) commitTransaction(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var in commitBody
	if _, err := s.readJSON(w, r, &in, false); err != nil {
		return err
	}
	if in.PreparedState == nil || *in.PreparedState == "" {
		return &txntype.InvalidError{Field: "prepared_state", Reason: "required: the prepared_state the prepare answered"}
	}
	return s.decide(w, r, id, true, *in.PreparedState)
}

func (s *Server) rollbackTransaction(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var in rollbackBody
	if _, err := s.readJSON(w, r, &in, true); err != nil {
		return err
	}
	return s.decide(w, r, id, false, "")
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request, id string, commit bool, preparedState string) error {
	traceRequest(r, id)
	t, err := s.recovery.Decide(r.Context(), id, commit, preparedState)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t.Public())
	return nil
}

// decisionPath reports a path of a caller's decision: /v1/transactions/{id}/commit or
// /rollback (auth.go: the submit role's, as the request it decides).
func decisionPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/v1/transactions/")
	if !ok {
		return false
	}
	id, action, ok := strings.Cut(rest, "/")
	return ok && txntype.ValidID(id) && (action == "commit" || action == "rollback")
}
