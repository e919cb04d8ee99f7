package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrInstanceLive: another live process runs with the same instance id. Two owners of the same
// transactional ids would fence each other forever (I8), so the second is refused.
var ErrInstanceLive = errors.New("instance id already in use by a live coordinator")

// Owner holds an instance's liveness: a session-level advisory lock on a dedicated connection.
// PostgreSQL frees it the moment the owner's connection is gone (kill -9, crash, network), so a
// restart of the same instance does not wait for a lease to expire, and another instance can
// tell a dead owner from a live one by trying the lock (I8).
type Owner struct {
	conn     *pgx.Conn
	instance string
}

// lockKey is the advisory-lock key of an instance, per schema so that separate logs (and
// tests) on one database do not collide.
const lockKey = `hashtextextended(current_schema() || '/kpgtx-instance/' || $1, 0)`

// Claim takes the instance's lock, retrying for up to wait (a takeover by another instance
// holds it for a moment), and refuses with ErrInstanceLive when a live process keeps it.
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
