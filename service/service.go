// Package service assembles the coordinator: the log, the participants, the protocol and the
// HTTP API, from one Config. cmd/coordinator and the tests both start it through Open.
package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kpgtx/coordinator/api"
	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/history"
	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/metrics"
	"github.com/kpgtx/coordinator/operator"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/retention"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
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
	// Operator is what an operator sees and can do (the in-doubt, hanging and status views; retry,
	// abort, resolve).
	Operator *operator.Desk
	// Retention removes expired final rows from the log (COORDINATOR_RETENTION).
	Retention *retention.Service
	Metrics   *metrics.Metrics // the service's own registry, served at /metrics
	// History samples Metrics for the console's overview (GET /v1/history).
	History *history.Sampler
	// Ownership is this instance's lock and epoch (fencing); lost, the instance starts nothing.
	Ownership *recovery.Ownership
	logger    *slog.Logger
	tls       *tls.Config // the API's (COORDINATOR_TLS_*); nil: plain HTTP
	// traceShutdown flushes and stops the trace provider the service made (trace.go); nil:
	// none, or one the caller injected.
	traceShutdown func(context.Context) error

	// closeWait > 0: a shutdown abandoned requests at its bound (Serve); Close then waits at
	// most this long, since those requests may still hold connections.
	closeWait atomic.Int64
}

// Open checks the configuration and the dependencies, migrates the log and starts the
// participants. Every refusal names the setting or dependency at fault.
func Open(ctx context.Context, cfg Config, logger *slog.Logger, opts ...Option) (*Service, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The API's certificate is read first: a bad one is refused before anything is touched.
	serverTLS, err := cfg.ServerTLS(logger)
	if err != nil {
		return nil, err
	}
	s := &Service{Config: cfg, logger: logger, Metrics: metrics.New(), tls: serverTLS}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	tracer, shutdown, err := cfg.tracer(ctx, o, logger)
	if err != nil {
		return nil, err
	}
	s.traceShutdown = shutdown

	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = cfg.MaxConns
	txlog.ConfigurePool(pcfg)
	logPool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	s.Log = txlog.New(logPool, txlog.Options{GroupCommit: !cfg.NoGroupCommit, Observer: s.Metrics})
	s.Metrics.WatchLog(logPool, 2*time.Second)
	s.Metrics.WatchWaitingMax(cfg.WaitingBound())
	if err := logPool.Ping(ctx); err != nil {
		return nil, fmt.Errorf("DATABASE_URL: cannot reach PostgreSQL: %w", err)
	}
	if err := txlog.Migrate(ctx, s.Log, "up"); err != nil {
		return nil, err
	}

	dsns := map[string]string{txntype.DefaultDatabase: cfg.DatabaseURL}
	for name, dsn := range cfg.Databases {
		dsns[name] = dsn
	}
	s.SQL, err = sqltxn.Open(ctx, dsns, sqltxn.Options{MaxConns: cfg.MaxConns, StatementRole: cfg.StatementRole, Logger: logger})
	if err != nil {
		return nil, err
	}
	// The log's namespace (gid prefix) in every participant database: its sweeps act only
	// inside it, and no other log may use it.
	logID, logName, err := s.Log.Identity(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.SQL.ClaimNamespace(ctx, cfg.GIDPrefix, logID, logName); err != nil {
		return nil, err
	}

	// I8: one live process per instance id. The lock is taken before any transactional id of
	// this instance is touched.
	owner, err := recovery.Claim(ctx, cfg.DatabaseURL, cfg.Instance, cfg.ClaimWait)
	if err != nil {
		return nil, err
	}
	s.Ownership = recovery.NewOwnership(cfg.DatabaseURL, cfg.Instance, owner)
	if err := s.Log.RegisterInstance(ctx, cfg.Instance, cfg.TxnIDPrefix, cfg.PoolSize); err != nil {
		return nil, err
	}

	var kafka txntype.Kafka
	if len(cfg.Brokers) > 0 {
		// I1: ids of this instance's in-doubt transactions stay out of the pool.
		quarantined, err := s.Log.InDoubtTransactionalIDs(ctx, cfg.Instance)
		if err != nil {
			return nil, err
		}
		kopts, err := cfg.KafkaClientOpts(logger) // TLS, SASL
		if err != nil {
			return nil, err
		}
		s.Kafka, err = kafkatxn.NewPool(ctx, kafkatxn.Config{
			Brokers:            cfg.Brokers,
			IDPrefix:           cfg.TxnIDPrefix,
			Instance:           cfg.Instance,
			PoolSize:           cfg.PoolSize,
			TransactionTimeout: cfg.KafkaTxnTimeout,
			ClientOpts:         kopts,
			RecordTopics:       s.Log.RecordTopics,
			Logger:             logger,
		}, quarantined)
		if err != nil {
			return nil, fmt.Errorf("KAFKA_BROKERS=%v%s: %w", cfg.Brokers, cfg.kafkaSecurityNote(), err)
		}
		kafka = s.Kafka
		// The topics written to within the last day (recorded before their first record,
		// kafkatxn.Config.RecordTopics): hanging transactions of a previous run are looked for
		// there before the first id is leased (kafkatxn/hanging.go).
		topics, err := s.Log.RecentTopics(ctx, 24*time.Hour)
		if err != nil {
			return nil, err
		}
		s.Kafka.RememberTopics(topics...)
	}

	schemas, err := newSchemas(cfg.SchemaRegistry)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Coord = coord.New(coord.Config{
		Schemas:   schemas,
		Instance:  cfg.Instance,
		GIDPrefix: cfg.GIDPrefix,
		Limits: txntype.Limits{MaxStatements: cfg.MaxStatements, MaxRecords: cfg.MaxRecords, MaxTimeout: cfg.MaxTimeout, Statements: cfg.Statements, Topics: cfg.Topics, ConfinedSQL: cfg.StatementRole != "",
			MaxRecordBytes: cfg.MaxBodyBytes},
		DefaultTimeout: cfg.DefaultTimeout,
		FinishTimeout:  cfg.FinishTimeout,
		Ownership:      s.Ownership,
		Logger:         logger,
		Fault:          faultHook(cfg.Fault, logger),
		Observer:       s.Metrics,
		Tracer:         tracer,
		// More shared transactions at once than ids would only wait for ids.
		External: coord.External{Bound: DecideBound(cfg.KafkaTxnTimeout), Max: cfg.WaitingBound(),
			Count: func(ctx context.Context) (int, error) {
				st, err := s.Log.WaitingStats(ctx, cfg.Instance)
				return st.Count, err
			}},
		Batch: coord.BatchConfig{MaxMembers: cfg.SharedMax, Concurrency: min(cfg.SharedConcurrency, cfg.PoolSize),
			ShareSQL: cfg.SharedSQL, DeferRows: cfg.DeferRows},
	}, s.Log, kafka, s.SQL)

	s.Recovery = recovery.New(recovery.Config{
		Instance:        cfg.Instance,
		GIDPrefix:       cfg.GIDPrefix,
		DSN:             cfg.DatabaseURL,
		Interval:        cfg.RecoveryInterval,
		Lease:           cfg.InstanceLease,
		KafkaTxnTimeout: cfg.KafkaTxnTimeout,
		QuarantineGrace: cfg.MaxTimeout + cfg.FinishTimeout, // the request budget and the finish bound
		TakeoverGuard:   cfg.MaxTimeout + cfg.FinishTimeout,
		MarkerAge:       cfg.MarkerAge,
		Logger:          logger,
		Tracer:          tracer,
		Fault:           faultHook(cfg.Fault, logger),
	}, s.Ownership, s.Log, s.SQL, s.Kafka, s.Coord)
	// Startup pass: every in-doubt transaction of this instance is resolved (or scheduled) before
	// the first request is served.
	if st, err := s.Recovery.RunOnce(ctx); err != nil {
		logger.Warn("startup recovery pass incomplete; the loop retries", "error", err,
			"resolved", st.Resolved, "failed", st.Failed)
	}
	s.Operator = operator.New(operator.Config{
		Instance:      cfg.Instance,
		GIDPrefix:     cfg.GIDPrefix,
		DSN:           cfg.DatabaseURL,
		InstanceLease: cfg.InstanceLease,
		Log:           s.Log,
		SQL:           s.SQL,
		Kafka:         s.Kafka,
		Coord:         s.Coord,
		Loop:          s.Recovery,
		MaxWaiting:    cfg.WaitingBound(),
		Logger:        logger,
	})
	s.History = history.New(s.Metrics.Registry(), history.Options{Interval: o.historyInterval, Logger: logger})
	s.API = api.NewServer(api.Config{MaxBodyBytes: cfg.MaxBodyBytes, MaxInFlight: cfg.MaxInFlight,
		MaxBodyMemory: cfg.MaxBodyMemory, Logger: logger, Tokens: cfg.Tokens,
		Tracer: tracer},
		api.Deps{Coord: s.Coord, Log: s.Log, Recovery: s.Recovery, Operator: s.Operator, SQL: s.SQL, Kafka: s.Kafka, Metrics: s.Metrics, History: s.History})
	s.Metrics.WatchRecovery(s.Recovery)
	var open retention.Kafka // nil without Kafka, not a nil *kafkatxn.Pool
	if s.Kafka != nil {
		open = s.Kafka
	}
	s.Retention = retention.New(retention.Config{Retention: cfg.Retention, Interval: cfg.RetentionInterval, Logger: logger}, s.Log, s.SQL, open)
	s.Metrics.WatchRetention(s.Retention)
	s.Metrics.WatchConnPools(s.connPools)
	s.Metrics.WatchInstanceLock(func() bool {
		_, err := s.Ownership.Fence()
		return err == nil
	})
	if s.Kafka != nil {
		s.Metrics.WatchPool(s.Kafka, cfg.PoolSize)
	}
	ok = true
	return s, nil
}

// Start runs the background services (the recovery loop, the Kafka pool's restart watch, the
// retention, the metrics history) until ctx is done.
func (s *Service) Start(ctx context.Context) {
	s.History.Start(ctx)
	if s.Kafka != nil {
		s.Kafka.Start(ctx) // the restart watch (kafkatxn/hanging.go)
	}
	s.Recovery.Start(ctx)
	s.Retention.Start(ctx)
}

// DecideBound is the longest a transaction may wait for its caller's decision (X1): the Kafka
// transaction timeout less a tenth (at least 2 s), so that a commit taken just before
// decide_by still reaches Kafka before its timeout aborts the transaction.
func DecideBound(kafkaTxnTimeout time.Duration) time.Duration {
	return kafkaTxnTimeout - max(kafkaTxnTimeout/10, 2*time.Second)
}

// faultHook is the test-only COORDINATOR_FAULT: the process kills itself (SIGKILL, no cleanup)
// when the protocol reaches the named step, as a crash would.
func faultHook(point string, logger *slog.Logger) func(txntype.FaultPoint) {
	if point == "" {
		return nil
	}
	return func(p txntype.FaultPoint) {
		if string(p) != point {
			return
		}
		if p == txntype.FaultDecidedBeforePhase2 {
			// The decided answer (D1) is on its way back: let it reach the caller, so that a
			// test sees a 200 followed by the crash it must survive.
			time.Sleep(250 * time.Millisecond)
		}
		logger.Error("COORDINATOR_FAULT reached: killing the process", "fault_point", point)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never continue past the fault point
	}
}

// MaxHeaderBytes bounds a request's headers (a bearer token and a few standard headers fit
// many times over).
const MaxHeaderBytes = 64 << 10

// Handler is the HTTP API.
func (s *Service) Handler() http.Handler { return s.API.Handler() }

// Serve runs the background services and serves the API on ln until ctx is done, then shuts
// down within Config.ShutdownTimeout (COORDINATOR_SHUTDOWN_TIMEOUT):
//
//  1. the listener closes (no new requests) and the recovery loop stops;
//  2. requests in flight run on until a quarter of the bound (at most 5 s) is left;
//  3. then their contexts are cancelled: a transaction before its decision aborts at once, on
//     both sides; one past its decision goes on with phase 2;
//  4. just before the bound the connections are closed and Serve returns. A request still
//     running is abandoned as a crash would leave it: its row stays active, prepared or
//     committing, and recovery resolves it at the next start (or another instance takes it
//     over). The gids and states left are logged.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	s.Start(loopCtx)
	if err := s.servePprof(loopCtx); err != nil {
		return fmt.Errorf("COORDINATOR_PPROF_LISTEN: %w", err)
	}
	// Request contexts derive from base, so step 3 can cancel them all.
	base, cancelRequests := context.WithCancel(context.Background())
	defer cancelRequests()
	srv := &http.Server{
		Handler: s.Handler(),
		// Slow or idle clients are disconnected (COORDINATOR_*_TIMEOUT): a connection cannot be
		// held open by trickling headers or a body, or by idling between requests.
		ReadHeaderTimeout: s.Config.ReadHeaderTimeout,
		ReadTimeout:       s.Config.ReadTimeout,
		WriteTimeout:      s.Config.HTTPWriteTimeout(),
		IdleTimeout:       s.Config.IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	scheme := "http"
	if s.tls != nil {
		// ServeTLS with the certificate of GetCertificate (reloaded as the files change), and
		// HTTP/2 as Go's server offers it over TLS.
		scheme = "https"
		srv.TLSConfig = s.tls
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	s.logger.Info("coordinator listening", "addr", ln.Addr().String(), "scheme", scheme, "instance", s.Config.Instance)
	select {
	case err := <-errc:
		stopLoop()
		s.Recovery.Wait()
		s.Retention.Wait()
		return err
	case <-ctx.Done():
	}

	bound := s.Config.ShutdownTimeout
	if bound <= 0 {
		bound = Defaults().ShutdownTimeout
	}
	deadline := time.Now().Add(bound)
	grace := min(bound/4, 5*time.Second) // for step 3
	tail := min(bound/10, time.Second)   // for step 4: log what is left, close
	stopLoop()
	s.logger.Info("coordinator shutting down: no new requests; requests in flight finish within the bound",
		"shutdown_timeout", bound.String(), "in_flight", len(s.Coord.InFlightGIDs()))

	err := shutdownBy(srv, deadline.Add(-grace))
	var states <-chan leftStates
	if err != nil {
		gids := s.Coord.InFlightGIDs()
		s.logger.Warn("shutdown bound near: cancelling the requests in flight (before its decision a transaction aborts)",
			"in_flight", len(gids), "gids", gids)
		// Their logged states are read now, while there is time, for the log line at the
		// bound: the tail alone is too short for a read on a busy machine.
		states = s.readStates(gids, deadline.Add(-tail/2))
		cancelRequests()
		err = shutdownBy(srv, deadline.Add(-tail))
	}
	if err != nil {
		_ = srv.Close()
		s.closeWait.Store(int64(max(tail/2, 10*time.Millisecond)))
		s.logLeft(s.Coord.InFlightGIDs(), states)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	// Commits already answered finish their final write (coord/finals.go); one cut off by the
	// bound leaves its row to recovery.
	fctx, fcancel := context.WithDeadline(context.Background(), deadline)
	if err := s.Coord.WaitFinals(fctx); err != nil {
		s.logger.Warn("final writes still pending at the shutdown bound; recovery completes them", "error", err)
	}
	fcancel()
	select {
	case <-s.recoveryDone():
	case <-time.After(time.Until(deadline)):
		s.logger.Warn("recovery pass still running at the shutdown bound; not waiting for it")
	}
	return nil
}

// shutdownBy is http.Server.Shutdown until the deadline. It may be called again after it ran
// out of time: the listeners are closed already, and it waits for the connections again.
func shutdownBy(srv *http.Server, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return srv.Shutdown(ctx)
}

// recoveryDone is closed when the recovery loop has stopped.
func (s *Service) recoveryDone() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		s.Recovery.Wait()
		s.Retention.Wait() // a batch in flight ends with its context
		close(done)
	}()
	return done
}

// leftStates is the logged state of the requests a shutdown cancelled.
type leftStates struct {
	states map[string]txntype.State
	err    error
}

// readStates reads the logged states of gids until the deadline, in the background.
func (s *Service) readStates(gids []string, deadline time.Time) <-chan leftStates {
	out := make(chan leftStates, 1)
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		st, err := s.Log.States(ctx, gids)
		out <- leftStates{st, err}
	}()
	return out
}

// logLeft says which transactions a shutdown abandoned, with their logged state (read when
// they were cancelled), for the operator: recovery resolves them at the next start.
func (s *Service) logLeft(gids []string, read <-chan leftStates) {
	if len(gids) == 0 {
		s.logger.Warn("shutdown bound reached: connections closed; no transaction was left in flight")
		return
	}
	r := leftStates{err: errors.New("not read")}
	if read != nil {
		r = <-read // bounded by its own deadline
	}
	states, err := r.states, r.err
	left := make([]string, len(gids))
	for i, g := range gids {
		st, ok := states[g]
		switch {
		case err != nil:
			left[i] = g + " (state not read)"
		case !ok:
			left[i] = g + " (no log row: nothing was begun)"
		default:
			left[i] = g + " " + string(st)
		}
	}
	s.logger.Warn("shutdown bound reached: transactions left in flight; recovery resolves them at the next start (or another instance takes them over)",
		"count", len(gids), "left", left, "shutdown_timeout", s.Config.ShutdownTimeout.String())
}

// Close releases every connection and client. After a shutdown that abandoned requests (Serve)
// it waits only briefly: those requests may still hold connections, and the process is about to
// exit, which releases everything as a crash would.
func (s *Service) Close() {
	wait := time.Duration(s.closeWait.Load())
	if wait <= 0 {
		s.close()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.close()
	}()
	select {
	case <-done:
	case <-time.After(wait):
		s.logger.Warn("connections still held by abandoned requests; not waiting for them")
	}
}

func (s *Service) close() {
	if s.Kafka != nil {
		s.Kafka.Close()
	}
	if s.SQL != nil {
		s.SQL.Close()
	}
	if s.Ownership != nil {
		s.Ownership.Close(context.Background())
	}
	if s.Log != nil {
		s.Log.Close()
		s.Log.Pool().Close()
	}
	if s.traceShutdown != nil {
		ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
		defer cancel()
		if err := s.traceShutdown(ctx); err != nil {
			s.logger.Warn("traces not all exported at shutdown", "error", err)
		}
	}
}
