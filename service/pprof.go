package service

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// servePprof serves Go's profiler on Config.PprofListen (loopback only, validateSecurity) until
// ctx is done; nothing when it is empty. Profiling is an operator's tool for one machine: it
// takes no tokens, so it must not be reachable from elsewhere.
func (s *Service) servePprof(ctx context.Context) error {
	if s.Config.PprofListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.Config.PprofListen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Warn("profiler stopped", "error", err)
		}
	}()
	s.logger.Info("profiler listening", "addr", ln.Addr().String())
	return nil
}
