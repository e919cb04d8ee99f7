package service

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WithHistoryInterval samples the metrics history (GET /v1/history, the console's overview)
// every d instead of history.DefaultInterval: tests that want several samples quickly.
func WithHistoryInterval(d time.Duration) Option {
	return func(o *options) { o.historyInterval = d }
}

// connPools are the PostgreSQL pools the metrics report: the log's ("log") and each database's.
func (s *Service) connPools() map[string]*pgxpool.Pool {
	out := map[string]*pgxpool.Pool{}
	if s.Log != nil {
		out["log"] = s.Log.Pool()
	}
	if s.SQL != nil {
		for _, name := range s.SQL.Names() {
			if p, err := s.SQL.Pool(name); err == nil {
				out[name] = p
			}
		}
	}
	return out
}
