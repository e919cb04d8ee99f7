package operator

import (
	"log/slog"
	"time"

	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
)

// InFlight is what the desk needs from the live coordinator (coord.Coordinator).
type InFlight interface {
	// InFlight reports transactions this process is running right now.
	InFlight(gid string) bool
}

// Config is what the desk reads and acts with.
type Config struct {
	Instance  string
	GIDPrefix string
	// DSN of the log: a row of another instance is acted on while holding that instance's lock,
	// taken on a connection of its own (recovery.LockFor). "": only this instance's rows.
	DSN string
	// InstanceLease is COORDINATOR_INSTANCE_LEASE, reported with the instances (0: not reported).
	InstanceLease time.Duration
	// MaxWaiting is COORDINATOR_MAX_WAITING, this instance's bound on transactions waiting for
	// their callers, reported with them in the status (0: not reported).
	MaxWaiting int

	Log   *txlog.Log
	SQL   *sqltxn.Databases
	Kafka *kafkatxn.Pool // nil without Kafka
	Coord InFlight
	// Loop is the recovery loop: its counters, its standing (the epoch every claim is fenced
	// by), and its resolving machinery (recovery.Loop.ResolveOne, the shared-gid decisions).
	Loop   *recovery.Loop
	Logger *slog.Logger
}

// Desk is what an operator sees (the in-doubt, hanging and status read models) and can do
// (retry, abort, resolve) on this coordinator. It holds no state of its own: every view is
// read afresh and every action is decided on the row as it is.
type Desk struct {
	cfg   Config
	log   *txlog.Log
	sql   *sqltxn.Databases
	kafka *kafkatxn.Pool
	coord InFlight
	loop  *recovery.Loop
}

// New returns the operator's desk.
func New(cfg Config) *Desk {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Desk{cfg: cfg, log: cfg.Log, sql: cfg.SQL, kafka: cfg.Kafka, coord: cfg.Coord, loop: cfg.Loop}
}

// Instance is the id of the instance this desk serves.
func (d *Desk) Instance() string { return d.cfg.Instance }
