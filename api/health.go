package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"
)

// healthRoutes mounts /healthz (alive).
func (s *Server) healthRoutes(r chi.Router) {
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}
