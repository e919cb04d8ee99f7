package txlog

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kpgtx/coordinator/coord"
)

// ErrStateChanged: the row is no longer in the state the writer last saw, or no longer owned by
// the writer's fence (another resolver claimed it, or the writer's instance lost its epoch);
// someone else moved it. The writer must re-read, never overwrite. It matches coord.ErrMovedOn.
var ErrStateChanged = coord.ErrMovedOn

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
