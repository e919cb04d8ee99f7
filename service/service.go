// Package service assembles the coordinator: the log, the participants, the protocol and the
// HTTP API, from one Config. cmd/coordinator and the tests both start it through Open.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kpgtx/coordinator/api"
	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
)

// Service is a running coordinator.
type Service struct {
	Config   Config
	Log      *txlog.Log
	SQL      *sqltxn.Databases
	Kafka    *kafkatxn.Pool // nil without brokers
	Coord    *coord.Coordinator
	API      *api.Server
	Recovery *recovery.Loop
	owner    *recovery.Owner
	logger   *slog.Logger
}

// Open checks the configuration and the dependencies, migrates the log and starts the
// participants. Every refusal names the setting or dependency at fault.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*Service, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{Config: cfg, logger: logger}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()

	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = cfg.MaxConns
	logPool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	s.Log = txlog.New(logPool, txlog.Options{GroupCommit: !cfg.NoGroupCommit})
	if err := logPool.Ping(ctx); err != nil {
		return nil, fmt.Errorf("DATABASE_URL: cannot reach PostgreSQL: %w", err)
	}
	if err := txlog.Migrate(ctx, s.Log, "up"); err != nil {
		return nil, err
	}

	dsns := map[string]string{coord.DefaultDatabase: cfg.DatabaseURL}
	for name, dsn := range cfg.Databases {
		dsns[name] = dsn
	}
	s.SQL, err = sqltxn.Open(ctx, dsns, cfg.MaxConns, logger)
	if err != nil {
		return nil, err
	}

	// I8: one live process per instance id. The lock is taken before any transactional id of
	// this instance is touched.
	s.owner, err = recovery.Claim(ctx, cfg.DatabaseURL, cfg.Instance, cfg.ClaimWait)
	if err != nil {
		return nil, err
	}
	if err := s.Log.RegisterInstance(ctx, cfg.Instance, cfg.TxnIDPrefix, cfg.PoolSize); err != nil {
		return nil, err
	}

	var kafka coord.Kafka
	if len(cfg.Brokers) > 0 {
		// I1: ids of this instance's in-doubt transactions stay out of the pool.
		quarantined, err := s.Log.InDoubtTransactionalIDs(ctx, cfg.Instance)
		if err != nil {
			return nil, err
		}
		s.Kafka, err = kafkatxn.NewPool(ctx, kafkatxn.Config{
			Brokers:            cfg.Brokers,
			IDPrefix:           cfg.TxnIDPrefix,
			Instance:           cfg.Instance,
			PoolSize:           cfg.PoolSize,
			TransactionTimeout: cfg.KafkaTxnTimeout,
			Logger:             logger,
		}, quarantined)
		if err != nil {
			return nil, fmt.Errorf("KAFKA_BROKERS=%v: %w", cfg.Brokers, err)
		}
		kafka = s.Kafka
	}

	s.Coord = coord.New(coord.Config{
		Instance:       cfg.Instance,
		GIDPrefix:      cfg.GIDPrefix,
		Limits:         coord.Limits{MaxStatements: cfg.MaxStatements, MaxRecords: cfg.MaxRecords, MaxTimeout: cfg.MaxTimeout},
		DefaultTimeout: cfg.DefaultTimeout,
		Logger:         logger,
		Fault:          faultHook(cfg.Fault, logger),
	}, s.Log, kafka, s.SQL)

	s.Recovery = recovery.New(recovery.Config{
		Instance:        cfg.Instance,
		GIDPrefix:       cfg.GIDPrefix,
		DSN:             cfg.DatabaseURL,
		Interval:        cfg.RecoveryInterval,
		Lease:           cfg.InstanceLease,
		KafkaTxnTimeout: cfg.KafkaTxnTimeout,
		Logger:          logger,
	}, s.owner, s.Log, s.SQL, s.Kafka, s.Coord)
	// Startup pass: every in-doubt transaction of this instance is resolved (or scheduled) before
	// the first request is served.
	if st, err := s.Recovery.RunOnce(ctx); err != nil {
		logger.Warn("startup recovery pass incomplete; the loop retries", "error", err,
			"resolved", st.Resolved, "failed", st.Failed)
	}
	s.API = api.NewServer(api.Config{MaxBodyBytes: cfg.MaxBodyBytes, Logger: logger},
		api.Deps{Coord: s.Coord, Log: s.Log, Recovery: s.Recovery, SQL: s.SQL, Kafka: s.Kafka})
	ok = true
	return s, nil
}

// Start runs the background services (the recovery loop) until ctx is done.
func (s *Service) Start(ctx context.Context) {
	s.Recovery.Start(ctx)
}

// faultHook is the test-only COORDINATOR_FAULT: the process kills itself (SIGKILL, no cleanup)
// when the protocol reaches the named step, as a crash would.
func faultHook(point string, logger *slog.Logger) func(coord.FaultPoint) {
	if point == "" {
		return nil
	}
	return func(p coord.FaultPoint) {
		if string(p) != point {
			return
		}
		logger.Error("COORDINATOR_FAULT reached: killing the process", "fault_point", point)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never continue past the fault point
	}
}

// Handler is the HTTP API.
func (s *Service) Handler() http.Handler { return s.API.Handler() }

// Serve runs the background services and serves the API on ln until ctx is done, then shuts down, letting requests in flight
// finish (within the bound) so that none is abandoned between prepare and decision.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	s.Start(ctx)
	defer s.Recovery.Wait()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.logger.Info("coordinator listening", "addr", ln.Addr().String(), "instance", s.Config.Instance)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.Config.MaxTimeout+5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close releases every connection and client.
func (s *Service) Close() {
	if s.Kafka != nil {
		s.Kafka.Close()
	}
	if s.SQL != nil {
		s.SQL.Close()
	}
	s.owner.Close(context.Background())
	if s.Log != nil {
		s.Log.Close()
		s.Log.Pool().Close()
	}
}
