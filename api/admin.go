package api

import "github.com/go-chi/chi/v5"

// adminRoutes mounts the operator API: the in-doubt view and resolution.
func (s *Server) adminRoutes(r chi.Router) {}
