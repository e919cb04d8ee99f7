package api

import (
	"net/http"

	"github.com/kpgtx/coordinator/operator"
)

// GET /v1/status: a small read-only summary for the console's health strip (and for anyone
// with the read role): who the caller is, and the operator's status (operator/status.go): the
// instances registered on the log and their leases, this process's recovery passes, its pools,
// and the in-doubt view's size and oldest age.

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	body, err := s.operator.Status(r.Context())
	if err != nil {
		return err
	}
	body.Caller = caller(r, len(s.cfg.Tokens) > 0)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, body)
	return nil
}

// caller describes the request's caller (set by authenticate).
func caller(r *http.Request, auth bool) operator.Caller {
	if !auth {
		return operator.Caller{Name: who(r), Roles: []string{string(RoleAdmin)}}
	}
	roles, _ := r.Context().Value(callerRolesKey{}).([]Role)
	out := make([]string, 0, len(roles))
	for _, role := range roles {
		out = append(out, string(role))
	}
	return operator.Caller{Name: who(r), Roles: out, Auth: true}
}
