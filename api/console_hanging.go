package api

import (
	"net/http"
)

// GET /v1/kafka/hanging: the console's page of hanging Kafka transactions, the operator's
// hanging view (operator/hanging.go). Read-only: the repair is the recovery loop's (POST
// /v1/recovery/run runs a pass now).

func (s *Server) hanging(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, s.operator.Hanging(r.Context()))
	return nil
}
