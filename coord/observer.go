package coord

import (
	"errors"
	"sort"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// Phase is one measured step of a global transaction (the metrics' phase label).
type Phase uint8

// The phases, in protocol order. Phase1 spans the concurrent SQL and Kafka sides; SQL is
// measured per database, Kafka once (pool lease included; PoolAcquire is the wait for a free
// transactional id alone).
const (
	PhaseLogBegin      Phase = iota // the active row (log insert)
	PhasePhase1                     // work and prepare of every participant, concurrently
	PhaseSQL                        // one database: statements, marker row, PREPARE (or COMMIT)
	PhaseKafka                      // Kafka: lease, begin, produce, flush
	PhasePoolAcquire                // waiting for a free transactional id
	PhaseLogPrepared                // the prepared row with the Kafka ids (I2)
	PhaseLogCommitting              // the committing row (the decision without Kafka)
	PhaseEndTxn                     // EndTxn(commit), retries by ids included: the decision
	PhasePhase2                     // COMMIT / ROLLBACK PREPARED on every database
	PhaseAbort                      // rolling back every participant before the decision
	PhaseLogFinal                   // the final row
	PhaseTotal                      // the whole request, from the log insert to the outcome
	PhaseSlotWait                   // a shared Kafka transaction's leader waiting for a slot
	PhaseAwaitBegins                // a sealed shared transaction waiting for its members' active rows
	NumPhases                       // the number of phases (not a phase)
)

var phaseNames = [NumPhases]string{
	PhaseLogBegin:      "log_begin",
	PhasePhase1:        "phase1",
	PhaseSQL:           "sql",
	PhaseKafka:         "kafka",
	PhasePoolAcquire:   "pool_acquire",
	PhaseLogPrepared:   "log_prepared",
	PhaseLogCommitting: "log_committing",
	PhaseEndTxn:        "endtxn",
	PhasePhase2:        "phase2",
	PhaseAbort:         "abort",
	PhaseLogFinal:      "log_final",
	PhaseTotal:         "total",
	PhaseSlotWait:      "slot_wait",
	PhaseAwaitBegins:   "await_begins",
}

// String is the phase's label value.
func (p Phase) String() string {
	if p < NumPhases {
		return phaseNames[p]
	}
	return "unknown"
}

// ClassNone is the class reported for an outcome without an error.
const ClassNone txntype.Class = "none"

// Observer receives the protocol's measurements (the metrics package implements it, so this
// package does not depend on a metrics library). Calls are made on the request's goroutines,
// concurrently, and must be cheap: no I/O, no blocking.
type Observer interface {
	// ObservePhase reports how long one phase of one transaction took.
	ObservePhase(p Phase, d time.Duration)
	// ObserveOutcome reports how a transaction run by this process ended: a final state, or,
	// for an outcome left to recovery (202), the state the row was left in. class is the
	// error's class, ClassNone without one.
	ObserveOutcome(s txntype.State, class txntype.Class)
	// ObserveConfinementBreach reports that a client statement left the coordinator's
	// transaction (ErrConfinementBreach): an alert, since the first line of defence missed it.
	ObserveConfinementBreach()
	// ObserveKafkaBatch reports a shared Kafka transaction about to run, with its members.
	ObserveKafkaBatch(members int)
	// ObserveSQLShared reports a shared PostgreSQL transaction prepared, with its members.
	ObserveSQLShared(members int)
}

// nopObserver is the default Observer: it drops everything.
type nopObserver struct{}

func (nopObserver) ObservePhase(Phase, time.Duration)           {}
func (nopObserver) ObserveOutcome(txntype.State, txntype.Class) {}
func (nopObserver) ObserveConfinementBreach()                   {}
func (nopObserver) ObserveKafkaBatch(int)                       {}
func (nopObserver) ObserveSQLShared(int)                        {}

// observeSince reports the time since start for phase p; use as
// defer c.observeSince(PhaseX, time.Now()).
func (c *Coordinator) observeSince(p Phase, start time.Time) {
	c.cfg.Observer.ObservePhase(p, time.Since(start))
}

// observeOutcome reports the outcome of a request that ran the protocol, and its total time.
func (c *Coordinator) observeOutcome(t *txntype.Transaction, err error, start time.Time) {
	c.cfg.Observer.ObservePhase(PhaseTotal, time.Since(start))
	if t == nil {
		return
	}
	class := ClassNone
	switch {
	case t.Error != nil && t.Error.Class != "":
		class = t.Error.Class
	case err != nil:
		var oe *txntype.OutcomeError
		if errors.As(err, &oe) && oe.Cause != nil {
			class = txntype.AsFailure(oe.Cause).Class
		} else {
			class = txntype.AsFailure(err).Class
		}
	}
	state := t.State
	if state == txntype.StateCommitting && err == nil {
		state = txntype.StateCommitted // answered at its decision (D1): its outcome is the commit
	}
	c.cfg.Observer.ObserveOutcome(state, class)
}

// InFlightGIDs lists the global transactions this process is running right now, sorted (what a
// shutdown that runs out of time leaves to recovery).
func (c *Coordinator) InFlightGIDs() []string {
	var gids []string
	c.inflight.Range(func(k, _ any) bool {
		gids = append(gids, k.(string))
		return true
	})
	sort.Strings(gids)
	return gids
}
