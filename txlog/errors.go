package txlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/kpgtx/coordinator/txntype"
)

// ErrStateChanged: the row is no longer in the state the writer last saw, or no longer owned by
// the writer's fence (another resolver claimed it, or the writer's instance lost its epoch);
// someone else moved it. The writer must re-read, never overwrite. It matches txntype.ErrMovedOn.
var ErrStateChanged = txntype.ErrMovedOn

// ErrNotMigrated: the log's schema has no version yet (no migration ran on it).
var ErrNotMigrated = errors.New("the log's schema is not migrated")

// refusedSetting names the setting a statement reads to refuse itself (refuseUnless): reading
// an unknown setting fails with SQLSTATE 42704 and its name in the message.
const refusedSetting = "kpgtx.log_write_refused"

// refuseUnless is an SQL expression that fails the statement, and with it the transaction,
// unless cond holds: a condition checked by the server lets a write that must be all or nothing
// be pipelined with its BEGIN and COMMIT in one round trip (the COMMIT is skipped once a
// statement before it failed).
func refuseUnless(cond string) string {
	return "pg_catalog.current_setting(CASE WHEN " + cond + " THEN 'server_version' ELSE '" + refusedSetting + "' END)"
}

// asRefused turns the failure of a refuseUnless into ErrStateChanged (the condition did not
// hold: nothing was written); any other error is returned as is.
func asRefused(err error, what string) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42704" && strings.Contains(pe.Message, refusedSetting) {
		return fmt.Errorf("txlog: %s: %w", what, ErrStateChanged)
	}
	return err
}

// retryable reports a log transaction the server rolled back as a whole for a reason of the
// moment, not of its writes: a deadlock (40P01; two log transactions took the same keys in
// opposite orders) or a serialization failure (40001). Nothing of it committed, so sending it
// again is safe, and the group commit does, up to flushAttempts times, so that one such
// moment does not fail every write it carries. Anything else is the writes' own answer.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// flushAttempts bounds how often a retryable log transaction is sent.
const flushAttempts = 3

// LockTimeout bounds how long a log statement waits for a lock (the log's sessions run with it,
// ConfigurePool). The log's own writers hold their row locks for one round trip and a commit,
// so only a lock held by someone else waits longer: above all a client's statement that locked
// the log's rows or tables inside its request's transaction, which PREPARE then holds (the
// statements the parser never sees, a DO block or a function). Without a bound that request's
// own prepared write would wait for its own prepared transaction for ever, and every log write
// behind it. With it the write fails, its error proves nothing was written (ErrLogRefused), and
// the request aborts, which releases the lock.
const LockTimeout = 2 * time.Second

// ConfigurePool sets the log's session settings on the configuration of the pool that New
// gets, replacing any the connection string carries:
//   - the lock timeout (LockTimeout);
//   - no JIT compilation. The log's statements are short, each reaching a few rows by an index,
//     but a plan's cost estimate is what decides JIT, and estimates grow with the tables: the
//     sweep's DeleteShared (a subplan per registration) crossed jit_above_cost at a few
//     thousand registrations, and compiling it took 223 of its 244 ms over 15 calls at c=16
//     (pg_stat_statements), about 15 ms of PostgreSQL CPU per recovery pass.
func ConfigurePool(cfg *pgxpool.Config) {
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprint(LockTimeout.Milliseconds())
	cfg.ConnConfig.RuntimeParams["jit"] = "off"
}

// errOutcomeUnknown marks a server error that came after the server had acknowledged COMMIT:
// the write may be durable, whatever the error says.
type errOutcomeUnknown struct{ err error }

func (e errOutcomeUnknown) Error() string { return "after COMMIT: " + e.err.Error() }
func (e errOutcomeUnknown) Unwrap() error { return e.err }

// asLogRefused marks err with txntype.ErrLogRefused when it proves that the write's transaction
// did not commit: the server answered a statement of it (or its COMMIT) with an error of
// severity ERROR, which rolls a transaction back. Everything else leaves the outcome unknown
// and is returned as is: a lost connection, a context cut off, a FATAL or PANIC (the session
// ended, possibly after its commit was durable), the classes that say the server or the
// connection broke down (08 connection, 57 operator intervention, 58 system error, XX
// internal), and any error after an acknowledged COMMIT.
func asLogRefused(err error) error {
	var late errOutcomeUnknown
	var pe *pgconn.PgError
	if err == nil || errors.Is(err, txntype.ErrLogRefused) || errors.As(err, &late) || !errors.As(err, &pe) {
		return err
	}
	severity := pe.SeverityUnlocalized
	if severity == "" {
		severity = pe.Severity
	}
	if severity != "ERROR" || len(pe.Code) != 5 {
		return err
	}
	switch pe.Code[:2] {
	case "08", "57", "58", "XX":
		return err
	}
	return fmt.Errorf("%w: %w", txntype.ErrLogRefused, err)
}

// asUnsent marks err with txntype.ErrLogUnsent when it proves that the write never reached the
// server, so that nothing of it can be durable: pgx says nothing was sent on the connection
// (pgconn.SafeToRetry: a context that ended before the send, a connection busy or closed), no
// connection could be made (pgconn.ConnectError), or the log was closed. A write that was sent
// and whose answer was lost (a connection dropped after the send, a context cut off during the
// round trip, an error after an acknowledged COMMIT) is returned as is: it may have landed.
func asUnsent(err error) error {
	var late errOutcomeUnknown
	if err == nil || errors.Is(err, txntype.ErrLogUnsent) || errors.As(err, &late) {
		return err
	}
	var ce *pgconn.ConnectError
	if pgconn.SafeToRetry(err) || errors.As(err, &ce) || errors.Is(err, errClosed) {
		return fmt.Errorf("%w: %w", txntype.ErrLogUnsent, err)
	}
	return err
}

// onConn runs send on a connection of pool. A connection that could not be had (the pool's
// wait cut off by ctx, a connect that failed, a closed pool) fails with txntype.ErrLogUnsent:
// nothing of the write went out. pgxpool's own QueryRow and SendBatch return such a failure as
// a bare context error, which cannot be told from one cut off during the round trip.
func onConn(ctx context.Context, pool *pgxpool.Pool, send func(*pgxpool.Conn) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("%w: acquire a connection: %w", txntype.ErrLogUnsent, err)
	}
	defer conn.Release()
	return send(conn)
}
