package recovery

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// Config tunes the recovery loop.
type Config struct {
	Instance  string
	GIDPrefix string
	// DSN of the log, for the owner's dedicated connection (re-claimed after it is lost).
	DSN string
	// Interval between passes (and heartbeats).
	Interval time.Duration
	// Lease: an instance silent for longer, whose lock is free, is taken over.
	Lease time.Duration
	// BackoffBase and BackoffMax bound the per-transaction exponential backoff (with jitter).
	BackoffBase, BackoffMax time.Duration
	// Parallelism is how many transactions a pass resolves at once.
	Parallelism int
	// RowByRow resolves every row alone, prepared rows too, as passes did before C1
	// (page.go): the recovery benchmark's baseline, in the same run.
	RowByRow bool
	// MarkerAge: marker rows of final transactions older than this are deleted.
	MarkerAge time.Duration
	// KafkaTxnTimeout is the producers' transaction timeout, to explain aborts.
	KafkaTxnTimeout time.Duration
	// QuarantineGrace: a quarantined transactional id that no transaction in doubt names is
	// returned to the pool after this long (the largest request budget plus the finish bound:
	// no request can still be running with it). hanging.go.
	QuarantineGrace time.Duration
	// TakeoverGuard: a takeover leaves alone active rows younger than this (the largest request
	// budget plus the finish bound): their request may still be running in a process that
	// lost its lock. Fencing makes acting on them safe; waiting spares live requests.
	TakeoverGuard time.Duration
	// OwnerCheck is how often the instance lock's session is checked (at most Interval).
	OwnerCheck time.Duration
	Logger     *slog.Logger
	// Tracer starts each pass's span (trace.go); nil: no traces.
	Tracer trace.Tracer
	// Fault, when set, is called at the decision's step boundaries (test-only,
	// COORDINATOR_FAULT).
	Fault func(txntype.FaultPoint)
}

func (c *Config) defaults() {
	if c.Interval <= 0 {
		c.Interval = 5 * time.Second
	}
	if c.Lease <= 0 {
		c.Lease = 3 * c.Interval
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = 500 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = time.Minute
	}
	if c.Parallelism <= 0 {
		c.Parallelism = 16
	}
	if c.MarkerAge <= 0 {
		c.MarkerAge = time.Minute
	}
	if c.QuarantineGrace <= 0 {
		c.QuarantineGrace = 2 * time.Minute
	}
	if c.OwnerCheck <= 0 || c.OwnerCheck > c.Interval {
		c.OwnerCheck = min(c.Interval, time.Second)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Coordinator is what the loop needs from the live coordinator.
type Coordinator interface {
	// InFlight reports transactions this process is running right now.
	InFlight(gid string) bool
	// TakeQuarantined returns the transactional id that a transaction of this process left
	// quarantined without logging it (its outcome was unknown before prepared).
	TakeQuarantined(gid string) (string, bool)
}

// Loop resolves in-doubt transactions: once at startup (before the pool serves), then
// periodically, and at once on Trigger. One shape for every background service: New, Start(ctx)
// (stops when ctx is done), Wait.
type Loop struct {
	cfg   Config
	log   *txlog.Log
	sql   *sqltxn.Databases
	kafka *kafkatxn.Pool // nil without Kafka
	coord Coordinator

	own      *Ownership
	lostSaid atomic.Bool // the loss of the lock was logged

	trigger chan struct{}
	done    chan struct{}

	passes   atomic.Int64
	failures atomic.Int64

	orphanAge time.Duration // orphanMinAge; tests lower it

	totalMu sync.Mutex
	total   Stats // the sum of every pass's Stats (Totals)
}

// New returns a loop. own is the instance's standing (its claimed lock and epoch); every row
// the loop resolves is claimed with that epoch first.
func New(cfg Config, own *Ownership, log *txlog.Log, sql *sqltxn.Databases, kafka *kafkatxn.Pool, c Coordinator) *Loop {
	cfg.defaults()
	if own == nil {
		own = NewOwnership("", cfg.Instance, nil)
	}
	return &Loop{cfg: cfg, own: own, log: log, sql: sql, kafka: kafka, coord: c, orphanAge: orphanMinAge,
		trigger: make(chan struct{}, 1), done: make(chan struct{})}
}

// Stats counts one pass.
type Stats struct {
	Resolved  int // reached a final state
	Failed    int // attempt failed; retried after backoff
	Orphans   int // prepared gids without a log row, rolled back
	Markers   int // marker rows deleted
	TakenOver int // dead instances taken over
	// HangingRepaired: hanging Kafka transactions repaired with the marker the broker skipped;
	// Healed: quarantined ids returned to the pool by healQuarantine (hanging.go).
	HangingRepaired int
	Healed          int
	// Deadlines: transactions their callers did not decide by decide_by, aborted (X4).
	Deadlines int
}

// Start runs passes every Interval and on Trigger until ctx is done, and checks the instance
// lock's session every OwnerCheck.
func (l *Loop) Start(ctx context.Context) {
	go l.watchOwnership(ctx)
	go l.beat(ctx)
	go func() {
		defer close(l.done)
		t := time.NewTicker(l.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-l.trigger:
			}
			_, err := l.RunOnce(ctx)
			if err != nil && ctx.Err() == nil && !errors.Is(err, txntype.ErrNotOwner) {
				l.cfg.Logger.Warn("recovery pass failed", "error", err) // a lost lock is said once
			}
		}
	}()
}

// Wait blocks until the loop started by Start has stopped.
func (l *Loop) Wait() { <-l.done }

// Trigger asks for a pass now.
func (l *Loop) Trigger() {
	select {
	case l.trigger <- struct{}{}:
	default:
	}
}

// Instance is the id of the instance this loop resolves for.
func (l *Loop) Instance() string { return l.cfg.Instance }

// Passes and Failures count passes and failed passes since start.
func (l *Loop) Passes() int64   { return l.passes.Load() }
func (l *Loop) Failures() int64 { return l.failures.Load() }

// Totals sums the Stats of every pass since start.
func (l *Loop) Totals() Stats {
	l.totalMu.Lock()
	defer l.totalMu.Unlock()
	return l.total
}

// RunOnce is one pass: heartbeat, this instance's due transactions, orphans, old markers, and
// takeover of dead instances.
func (l *Loop) RunOnce(ctx context.Context) (Stats, error) {
	l.passes.Add(1)
	var st Stats
	ctx, span := l.startPass(ctx)
	err := l.runOnce(ctx, &st)
	endPass(span, st, err)
	if err != nil {
		l.failures.Add(1)
	}
	l.totalMu.Lock()
	l.total.Resolved += st.Resolved
	l.total.Failed += st.Failed
	l.total.Orphans += st.Orphans
	l.total.Markers += st.Markers
	l.total.TakenOver += st.TakenOver
	l.total.HangingRepaired += st.HangingRepaired
	l.total.Healed += st.Healed
	l.total.Deadlines += st.Deadlines
	l.totalMu.Unlock()
	if st.Resolved+st.Orphans+st.TakenOver+st.HangingRepaired+st.Healed > 0 {
		l.cfg.Logger.Info("recovery pass", "resolved", st.Resolved, "failed", st.Failed, "deadlines", st.Deadlines,
			"orphans", st.Orphans, "markers", st.Markers, "taken_over", st.TakenOver,
			"hanging_repaired", st.HangingRepaired, "healed", st.Healed)
	}
	return st, err
}

func (l *Loop) runOnce(ctx context.Context, st *Stats) error {
	var errs error
	if err := l.keepOwnership(ctx); err != nil {
		// Nothing without the lock: no heartbeat (a process that lost it must look dead to the
		// others, so that its rows are taken over), no claim (it would be refused anyway).
		return err
	}
	if err := l.log.Heartbeat(ctx, l.cfg.Instance); err != nil {
		errs = errors.Join(errs, err)
	}
	if err := l.resolveDue(ctx, l.cfg.Instance, 0, st); err != nil {
		errs = errors.Join(errs, err)
	}
	if err := l.deadlines(ctx, st); err != nil {
		errs = errors.Join(errs, err)
	}
	if err := l.orphans(ctx, st); err != nil {
		errs = errors.Join(errs, err)
	}
	if err := l.sweepMarkers(ctx, st); err != nil {
		errs = errors.Join(errs, err)
	}
	if err := l.takeover(ctx, st); err != nil {
		errs = errors.Join(errs, err)
	}
	if err := l.repairHanging(ctx, st); err != nil {
		errs = errors.Join(errs, err)
	}
	if err := l.healQuarantine(ctx, st); err != nil {
		errs = errors.Join(errs, err)
	}
	return errs
}

// keepOwnership checks the instance lock's session; when it was lost (PostgreSQL restarted,
// the backend terminated, the network cut) the instance stops starting transactions and claims
// the lock again, with a new epoch, as soon as PostgreSQL lets it.
func (l *Loop) keepOwnership(ctx context.Context) error {
	if l.cfg.DSN == "" {
		return nil
	}
	reclaimed, err := l.own.Keep(ctx, l.cfg.OwnerCheck)
	if reclaimed {
		f, _ := l.own.Fence()
		l.cfg.Logger.Warn("instance lock claimed again after its session was lost; serving again",
			"instance", l.cfg.Instance, "epoch", f.Epoch)
	}
	// Said once per loss, not at every check.
	if err != nil && ctx.Err() == nil && l.lostSaid.CompareAndSwap(false, true) {
		l.cfg.Logger.Warn("instance lock lost; not starting transactions until it is claimed again",
			"instance", l.cfg.Instance, "error", err)
	}
	if err == nil {
		l.lostSaid.Store(false)
	}
	return err
}

// beat writes the instance's heartbeat every Interval on a ticker of its own, beside the passes:
// a pass may take longer than the lease (slow resolves, a takeover, Kafka timeouts) and the
// heartbeat's age must not depend on it. Only while the lock is held: a process that lost it
// must look dead to the others. The heartbeat is informational (the status page, a bound on
// taking over an instance that never held its lock): liveness is the lock (I8).
func (l *Loop) beat(ctx context.Context) {
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l.cfg.DSN != "" {
			if _, err := l.own.Fence(); err != nil {
				continue
			}
		}
		if err := l.log.Heartbeat(ctx, l.cfg.Instance); err != nil && ctx.Err() == nil {
			l.cfg.Logger.Warn("heartbeat not written; the next one is tried in an interval", "error", err)
		}
	}
}

// watchOwnership runs keepOwnership every OwnerCheck, between passes, until ctx is done.
func (l *Loop) watchOwnership(ctx context.Context) {
	if l.cfg.DSN == "" {
		return
	}
	t := time.NewTicker(l.cfg.OwnerCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = l.keepOwnership(ctx)
	}
}

// Ownership is the instance's standing (for /readyz).
func (l *Loop) Ownership() *Ownership { return l.own }

// resolveDue resolves the instance's due transactions, Parallelism at a time, until none is
// left that this pass has not tried. Active rows younger than activeGuard are left alone.
func (l *Loop) resolveDue(ctx context.Context, instance string, activeGuard time.Duration, st *Stats) error {
	if _, err := l.own.Fence(); err != nil {
		return err // nothing can be claimed without the instance lock
	}
	tried := map[string]bool{}
	var mu sync.Mutex
	// A page far larger than the parallelism: each query reads every in-doubt row of the
	// instance to order them, so small pages made a pass over n rows cost n²/page row reads.
	page := max(4*l.cfg.Parallelism, duePage)
	for {
		rows, err := l.log.Due(ctx, instance, activeGuard, page)
		if err != nil {
			return err
		}
		var todo, prepared []*txntype.Transaction
		for _, t := range rows {
			if !tried[t.GID] && !(instance == l.cfg.Instance && l.coord.InFlight(t.GID)) {
				tried[t.GID] = true
				if t.State == txntype.StatePrepared && !l.cfg.RowByRow {
					prepared = append(prepared, t) // by the page (C1)
				} else {
					todo = append(todo, t)
				}
			}
		}
		if len(todo)+len(prepared) == 0 {
			return nil
		}
		l.resolvePage(ctx, prepared, instance == l.cfg.Instance, st)
		sem := make(chan struct{}, l.cfg.Parallelism)
		var wg sync.WaitGroup
		for _, group := range coord.Mates(todo) {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				for _, t := range group {
					err := l.resolve(ctx, t, instance == l.cfg.Instance)
					if errors.Is(err, errMovedOn) {
						continue
					}
					mu.Lock()
					if err != nil {
						st.Failed++
					} else {
						st.Resolved++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// duePage is the least number of due rows a pass reads per query. A page's prepared rows are
// resolved together (C1), so a larger page is fewer reads, claims and final writes, and more
// Kafka transactions decided at once (BenchmarkRecovery: about half the pass's time against
// pages of 512, docs/decisions.md).
const duePage = 2048

// backoff is exponential in the attempt count with full jitter in [d/2, d].
func (l *Loop) backoff(attempts int) time.Duration {
	d := l.cfg.BackoffBase << min(attempts, 16)
	if d > l.cfg.BackoffMax || d <= 0 {
		d = l.cfg.BackoffMax
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}
