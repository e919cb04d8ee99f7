package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/kpgtx/coordinator/migrations"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
)

// ReadyTimeout bounds each readiness check.
const ReadyTimeout = 2 * time.Second

// healthRoutes mounts /healthz (alive: the process serves), /readyz (the dependencies are
// usable) and /metrics (metrics.go).
func (s *Server) healthRoutes(r chi.Router) {
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.readyz)
	s.metricsRoutes(r)
}

// check is one readiness check's answer; the extra fields say what was found.
type check map[string]any

func passed(kv ...any) check {
	c := check{"ok": true}
	for i := 0; i+1 < len(kv); i += 2 {
		c[kv[i].(string)] = kv[i+1]
	}
	return c
}

func failed(err error, kv ...any) check {
	c := passed(kv...)
	c["ok"] = false
	c["error"] = err.Error()
	return c
}

// readyBody is the answer of /readyz.
type readyBody struct {
	Status string           `json:"status"` // "ready" or "not_ready"
	Failed []string         `json:"failed,omitempty"`
	Checks map[string]check `json:"checks"`
}

// readyz runs every check concurrently, each within ReadyTimeout, and answers 200 when all
// pass, 503 naming the failing ones otherwise:
//
//   - log: the coordinator log's PostgreSQL answers (ping);
//   - databases: every configured database answers and has max_prepared_transactions > 0;
//   - migrations: the log's schema version is the binary's latest migration, not dirty;
//   - kafka (when configured): metadata and ApiVersions answer; reports the cluster's
//     finalized transaction.version;
//   - ownership: this instance holds its instance lock (and reports the epoch); while the
//     lock's session is lost the instance starts no transaction (503) until it has claimed
//     the lock again.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	checks := map[string]func(context.Context) check{
		"log":        s.checkLog,
		"databases":  s.checkDatabases,
		"migrations": s.checkMigrations,
	}
	if s.deps.Kafka != nil {
		checks["kafka"] = s.checkKafka
	}
	if s.deps.Recovery != nil {
		checks["ownership"] = s.checkOwnership
	}
	body := readyBody{Status: "ready", Checks: map[string]check{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, run := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
			defer cancel()
			c := run(ctx)
			mu.Lock()
			defer mu.Unlock()
			body.Checks[name] = c
			if c["ok"] != true {
				body.Failed = append(body.Failed, name)
			}
		}()
	}
	wg.Wait()
	status := http.StatusOK
	if len(body.Failed) > 0 {
		sort.Strings(body.Failed)
		body.Status = "not_ready"
		status, _ = statusOf(errNotReady)
		s.cfg.Logger.Warn("not ready", "failed", body.Failed)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, body)
}

var errNotConfigured = errors.New("not configured")

func (s *Server) checkLog(ctx context.Context) check {
	if s.deps.Log == nil {
		return failed(errNotConfigured)
	}
	if err := s.deps.Log.Pool().Ping(ctx); err != nil {
		return failed(fmt.Errorf("PostgreSQL of the coordinator log (DATABASE_URL) does not answer: %w", err))
	}
	return passed()
}

// checkDatabases reads max_prepared_transactions on every configured database: it can change
// at a server restart, and 0 makes every PREPARE TRANSACTION fail.
func (s *Server) checkDatabases(ctx context.Context) check {
	if s.deps.SQL == nil {
		return failed(errNotConfigured)
	}
	names := s.deps.SQL.Names()
	sort.Strings(names)
	results := make([]check, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = checkDatabase(ctx, s.deps.SQL, name)
		}()
	}
	wg.Wait()
	dbs := map[string]check{}
	var errs []string
	for i, name := range names {
		c := results[i]
		dbs[name] = c
		if c["ok"] != true {
			errs = append(errs, fmt.Sprintf("database %q: %s", name, c["error"]))
		}
	}
	if len(errs) > 0 {
		return failed(errors.New(strings.Join(errs, "; ")), "databases", dbs)
	}
	return passed("databases", dbs)
}

func checkDatabase(ctx context.Context, sql *sqltxn.Databases, name string) check {
	pool, err := sql.Pool(name)
	if err != nil {
		return failed(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&n); err != nil {
		return failed(fmt.Errorf("does not answer: %w", err))
	}
	if n == 0 {
		// CheckPrepared says what to change.
		err := sqltxn.CheckPrepared(ctx, pool)
		if err == nil {
			err = errors.New("max_prepared_transactions is 0")
		}
		return failed(err, "max_prepared_transactions", n)
	}
	return passed("max_prepared_transactions", n)
}

// checkMigrations compares the log's schema version (golang-migrate's table) with the highest
// migration embedded in the binary.
func (s *Server) checkMigrations(ctx context.Context) check {
	if s.deps.Log == nil {
		return failed(errNotConfigured)
	}
	latest, err := latestMigration()
	if err != nil {
		return failed(err)
	}
	version, dirty, err := s.deps.Log.SchemaVersion(ctx)
	switch {
	case errors.Is(err, txlog.ErrNotMigrated):
		return failed(errors.New("the log's schema is not migrated: run `coordinator migrate up`"), "latest", latest)
	case err != nil:
		return failed(err, "latest", latest)
	case dirty:
		return failed(fmt.Errorf("the log's schema is dirty at version %d (a migration failed half-way): fix it by hand, then `coordinator migrate up`", version),
			"version", version, "latest", latest)
	case version < latest:
		return failed(fmt.Errorf("the log's schema is at version %d, this binary needs %d: run `coordinator migrate up`", version, latest),
			"version", version, "latest", latest)
	case version > latest:
		return failed(fmt.Errorf("the log's schema is at version %d, newer than this binary's %d: a newer coordinator migrated it", version, latest),
			"version", version, "latest", latest)
	}
	return passed("version", version, "latest", latest)
}

// latestMigration is the highest version among the embedded migrations.
var latestMigration = sync.OnceValues(func() (int64, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return 0, fmt.Errorf("embedded migrations: %w", err)
	}
	var latest int64 = -1
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok || !strings.HasSuffix(e.Name(), ".up.sql") {
			continue
		}
		if v, err := strconv.ParseInt(num, 10, 64); err == nil && v > latest {
			latest = v
		}
	}
	if latest < 0 {
		return 0, errors.New("no embedded migrations")
	}
	return latest, nil
})

func (s *Server) checkOwnership(context.Context) check {
	f, err := s.deps.Recovery.Ownership().Fence()
	if err != nil {
		return failed(err)
	}
	return passed("instance", f.Instance, "epoch", f.Epoch)
}

// checkKafka probes the cluster and reports the transactional-id pool: ids free, leased,
// quarantined (in doubt), held for hanging transactions, and low when fewer than a quarter can
// serve. With no id able to serve, no Kafka transaction can start: not ready.
func (s *Server) checkKafka(ctx context.Context) check {
	u := s.deps.Kafka.Detail()
	pool := map[string]any{"size": u.Size, "free": u.Free, "leased": u.Leased, "quarantined": u.Quarantined,
		"hanging": u.Hanging, "low": u.Low, "checking_after_restart": u.Checking}
	cp, err := s.deps.Kafka.Probe(ctx)
	if err != nil {
		return failed(err, "pool", pool)
	}
	if u.Size > 0 && u.Free+u.Leased == 0 {
		return failed(fmt.Errorf("no transactional id of the pool can serve: %d quarantined (in doubt), %d held for hanging transactions; recovery heals them (GET /v1/transactions?state=in-doubt)",
			u.Quarantined, u.Hanging), "pool", pool)
	}
	return passed("brokers", cp.Brokers, "reachable", cp.Reachable, "transaction_version", cp.TransactionVersion, "pool", pool)
}
