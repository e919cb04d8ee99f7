package recovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// ErrInstanceLive: another live process runs with the same instance id. Two owners of the same
// transactional ids would fence each other forever (I8), so the second is refused.
var ErrInstanceLive = errors.New("instance id already in use by a live coordinator")

// Owner holds an instance's liveness: a session-level advisory lock on a dedicated connection.
// PostgreSQL frees it the moment the owner's connection is gone (kill -9, crash, network), so a
// restart of the same instance does not wait for a lease to expire, and another instance can
// tell a dead owner from a live one by trying the lock (I8).
//
// Taking the lock bumps the instance's epoch (the fencing token, txlog.BumpEpoch) on the same
// session: every log write of the instance names the epoch it holds and fails once the epoch
// moved on, so a process that lost its lock (and whose rows may have been taken over) writes
// nothing more.
type Owner struct {
	conn     *pgx.Conn
	instance string
	epoch    int64
}

// lockKey is the advisory-lock key of an instance, per schema so that separate logs (and
// tests) on one database do not collide.
const lockKey = `hashtextextended(current_schema() || '/kpgtx-instance/' || $1, 0)`

// Claim takes the instance's lock, retrying for up to wait (a takeover by another instance
// holds it for a moment), and refuses with ErrInstanceLive when a live process keeps it. Once
// the lock is held the instance's epoch is bumped.
func Claim(ctx context.Context, dsn, instance string, wait time.Duration) (*Owner, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("instance lock: connect: %w", err)
	}
	o := &Owner{conn: conn, instance: instance}
	deadline := time.Now().Add(wait)
	for {
		ok, err := o.TryLock(ctx, instance)
		if err != nil {
			conn.Close(ctx)
			return nil, fmt.Errorf("instance lock: %w", err)
		}
		if ok {
			if o.epoch, err = txlog.BumpEpoch(ctx, conn, instance); err != nil {
				conn.Close(ctx)
				return nil, fmt.Errorf("instance lock: %w", err)
			}
			return o, nil
		}
		if time.Now().After(deadline) {
			conn.Close(ctx)
			return nil, fmt.Errorf("%w: instance %q is held by another process on this log; "+
				"give every coordinator its own COORDINATOR_INSTANCE", ErrInstanceLive, instance)
		}
		select {
		case <-ctx.Done():
			conn.Close(ctx)
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Epoch is the epoch this owner's claim gave the instance.
func (o *Owner) Epoch() int64 { return o.epoch }

// TryLock takes another instance's lock on the owner's session; true means that instance is not
// running (or is ours).
func (o *Owner) TryLock(ctx context.Context, instance string) (bool, error) {
	var ok bool
	err := o.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+lockKey+`)`, instance).Scan(&ok)
	return ok, err
}

// Unlock releases a lock taken with TryLock.
func (o *Owner) Unlock(ctx context.Context, instance string) error {
	_, err := o.conn.Exec(ctx, `SELECT pg_advisory_unlock(`+lockKey+`)`, instance)
	return err
}

// Check verifies that the owner's session (and with it the lock) is still there.
func (o *Owner) Check(ctx context.Context) error {
	return o.conn.Ping(ctx)
}

// Close releases the lock by closing the session.
func (o *Owner) Close(ctx context.Context) {
	if o != nil && o.conn != nil {
		_ = o.conn.Close(ctx)
	}
}

// LockFor takes another instance's lock on a connection of its own (a takeover, an operator
// acting on that instance's row) and bumps that instance's epoch, so that the instance, should
// it still be running without its lock, writes nothing more. free=false: the instance runs.
// Closing the returned owner releases the lock.
func LockFor(ctx context.Context, dsn, instance string) (o *Owner, free bool, err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, false, fmt.Errorf("instance lock of %q: %w", instance, err)
	}
	o = &Owner{conn: conn, instance: instance}
	free, err = o.TryLock(ctx, instance)
	if err == nil && free {
		o.epoch, err = txlog.BumpEpoch(ctx, conn, instance)
	}
	if err != nil || !free {
		o.Close(context.WithoutCancel(ctx))
		if err != nil {
			return nil, false, fmt.Errorf("instance lock of %q: %w", instance, err)
		}
		return nil, false, nil
	}
	return o, true, nil
}

// Ownership is this instance's standing: the lock it holds and the epoch that lock gave it, or
// why it holds none. The request path asks it before starting a transaction (txntype.Ownership);
// the recovery loop checks the lock's session and claims the lock again after it was lost.
type Ownership struct {
	dsn      string
	instance string

	keepMu sync.Mutex // one Keep at a time: the lock's connection serves one caller
	mu     sync.Mutex
	owner  *Owner // nil while the lock is lost
	reason string // why the lock is lost
	since  time.Time
}

var _ txntype.Ownership = (*Ownership)(nil)

// NewOwnership starts from a claimed lock.
func NewOwnership(dsn, instance string, o *Owner) *Ownership {
	return &Ownership{dsn: dsn, instance: instance, owner: o}
}

// Fence is the instance and epoch to write with, or txntype.ErrNotOwner (with the reason) while
// the lock is lost.
func (w *Ownership) Fence() (txntype.Fence, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.owner == nil {
		return txntype.Fence{}, fmt.Errorf("%w: %s (since %s); it is claimed again as soon as PostgreSQL allows",
			txntype.ErrNotOwner, w.reason, w.since.Format(time.RFC3339))
	}
	return txntype.Fence{Instance: w.instance, Epoch: w.owner.epoch}, nil
}

// Keep checks the lock's session within timeout (at least pingTimeout); a lost session marks
// the lock lost (the instance stops starting transactions) and a new claim is tried at once,
// with a new epoch. It returns the state afterwards: nil while the lock is held.
func (w *Ownership) Keep(ctx context.Context, timeout time.Duration) (reclaimed bool, err error) {
	w.keepMu.Lock()
	defer w.keepMu.Unlock()
	timeout = max(timeout, pingTimeout)
	w.mu.Lock()
	o := w.owner
	w.mu.Unlock()
	if o != nil {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := o.Check(cctx)
		cancel()
		if err == nil {
			return false, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		w.lose(fmt.Sprintf("the session holding the instance lock was lost: %v", err))
		o.Close(context.WithoutCancel(ctx))
	}
	if w.dsn == "" {
		_, err := w.Fence()
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, max(timeout, time.Second)+time.Second)
	defer cancel()
	o, err = Claim(cctx, w.dsn, w.instance, timeout)
	if err != nil {
		w.lose(fmt.Sprintf("the instance lock could not be claimed again: %v", err))
		_, ferr := w.Fence()
		return false, ferr
	}
	w.mu.Lock()
	w.owner, w.reason = o, ""
	w.mu.Unlock()
	return true, nil
}

// pingTimeout is the least time the lock's session is given to answer a check: a slow answer
// under load is not a lost lock.
const pingTimeout = 2 * time.Second

func (w *Ownership) lose(reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.owner != nil || w.reason == "" {
		w.since = time.Now()
	}
	w.owner, w.reason = nil, reason
}

// Close releases the lock.
func (w *Ownership) Close(ctx context.Context) {
	w.mu.Lock()
	o := w.owner
	w.owner, w.reason = nil, "closed"
	w.mu.Unlock()
	o.Close(ctx)
}
