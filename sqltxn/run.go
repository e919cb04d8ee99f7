package sqltxn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kpgtx/coordinator/sqlpolicy"
	"github.com/kpgtx/coordinator/txntype"
)

// Run executes one database's part of a global transaction in a single round trip: BEGIN, the
// statements, each followed by a guard, the marker row, then PREPARE TRANSACTION (or COMMIT for
// one phase), pipelined in one batch. After a failing statement PostgreSQL skips the rest of the
// batch, so nothing is prepared or committed; the connection's transaction is then rolled back.
//
// I13, second line of defence (the first is sqlpolicy, at validation): the transaction's own id
// is stored in a transaction-local setting right after BEGIN, and the guard after every client
// statement fails unless the connection is still inside that transaction (and, with a statement
// role, still runs as that role). A statement that ended the transaction therefore makes the
// guard fail before the marker row or PREPARE can run outside it: whatever that statement did is
// reported as a confinement breach (txntype.ErrConfinementBreach) with the evidence, and the
// connection is discarded. Every connection is reset (DISCARD ALL) before it goes back to the
// pool, so no session state a client statement left behind reaches the next request: on success
// the reset rides in the same round trip, right after PREPARE (or COMMIT), which ended the
// transaction; after a failure it is sent after the ROLLBACK.
//
// The coordinator's own statements (the marker row, PREPARE or COMMIT) run after RESET ALL: a
// client's SET LOCAL or set_config(…, true) ends with its statements, as it does for a member of
// a shared transaction (S6). Otherwise a client's statement_timeout or lock_timeout could fail
// the coordinator's statements, and its synchronous_commit = off would make a one-phase COMMIT,
// which is the decision, return before it is durable: a 200 that a crash of PostgreSQL can undo.
// RESET ALL clears the transaction-local setting the guards read, so the last statement's guard
// is a statement of its own, before it. RESET ALL cannot end a read-only mode, which the
// coordinator's marker row cannot be written in: the guard refuses a statement that made the
// transaction read-only (errReadOnly), alone and in a shared transaction alike.
func (d *Databases) Run(ctx context.Context, database string, stmts []txntype.Statement, gid string, onePhase bool, afterWork func()) ([]txntype.SQLResult, error) {
	db, err := d.db(database)
	if err != nil {
		return nil, classify(database, err)
	}
	if len(stmts) == 0 {
		return nil, classify(database, errEmpty)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, classify(database, fmt.Errorf("acquire connection: %w", err))
	}
	discard, resetDone := false, false
	defer func() { d.reset(ctx, conn, database, discard, resetDone) }()

	// PostgreSQL takes an isolation level only before the transaction's first query: the
	// request's leading SET TRANSACTION ISOLATION LEVEL statements run before the enter
	// statement. Such a statement sets only this transaction's characteristics
	// (sqlpolicy.SetsIsolation), so it needs no guard, nor the statement role.
	lead := 0
	for lead < len(stmts) && sqlpolicy.SetsIsolation(stmts[lead].Statement) {
		lead++
	}
	role := ""
	if lead < len(stmts) {
		role = d.role
	}
	b := &statements{}
	b.Queue("BEGIN")
	for _, s := range stmts[:lead] {
		b.Queue(s.Statement, args(s.Args)...)
	}
	queueAs(b, enterStmts, role)
	queueClient(b, stmts[lead:], role)
	// The client's settings end with its statements, before any statement of the coordinator's
	// runs (the last statement's guard included): RESET ALL, then that guard, which cannot read
	// the setting RESET ALL cleared and checks instead that the transaction still has the id the
	// enter statement gave it. Without a role the guard is the marker insert's own condition.
	b.Queue("RESET ALL")
	switch {
	case lead == len(stmts): // only isolation levels: nothing to guard
		b.Queue("INSERT INTO "+db.markers+" (gid) VALUES ($1)", gid)
	case role != "":
		// The marker row is the coordinator's: back to the session's own role for it (RESET
		// ALL leaves the role alone).
		b.Queue("SELECT "+lastGuards[1]+", pg_catalog.set_config('role', 'none', true)", role)
		b.Queue("INSERT INTO "+db.markers+" (gid) VALUES ($1)", gid)
	default:
		b.Queue("INSERT INTO "+db.markers+" (gid) SELECT $1 WHERE "+lastGuards[0]+" IS NOT NULL", gid)
	}
	if onePhase {
		b.Queue("COMMIT")
	} else {
		b.Queue("PREPARE TRANSACTION " + quoteGID(gid))
	}
	b.Queue("DISCARD ALL") // skipped by the server when anything before it failed

	br := d.send(ctx, conn.Conn(), b)
	results, err := readResults(br, database, stmts, lead, role != "", afterWork)
	if err == nil {
		// PREPARE (or COMMIT) answered: the outcome is known whatever happens to the reset.
		resetDone = d.readReset(br, database)
		discard = !resetDone
		return results, nil
	}
	_ = br.Close()
	if errors.Is(err, txntype.ErrConfinementBreach) {
		discard = true
		d.logger.Error("a client statement left the coordinator's transaction; connection discarded",
			"database", database, "gid", gid, "error", err)
	}
	d2, _ := d.endFailed(ctx, conn, db, database)
	discard = d2 || discard
	f := classify(database, err)
	if onePhase && !refused(err) {
		// The COMMIT went out with the batch and no answer said no: it may have committed.
		// Only the marker can tell (SettleOnePhase), never this error.
		f.Err = fmt.Errorf("%w: %w", txntype.ErrCommitUnknown, f.Err)
		f.Unavailable = false
	}
	return nil, f
}

// readReset reads the answer of the DISCARD ALL queued last in a batch and closes it; a
// connection whose reset did not answer is not reused (done=false).
func (d *Databases) readReset(br batchResults, database string) (done bool) {
	_, err := br.Exec()
	if err = errors.Join(err, br.Close()); err != nil {
		d.logger.Warn("could not reset a connection; closing it", "database", database, "error", err)
		return false
	}
	return true
}

// endFailed makes sure a session whose batch failed keeps no open (aborted) transaction and
// that a cut-off backend has exited; discard: the connection must not be reused. gone: nothing
// sent on the session can still run (the server answered the ROLLBACK, or the backend was seen
// to exit); otherwise a PREPARE that was sent may still land.
func (d *Databases) endFailed(ctx context.Context, conn *pgxpool.Conn, db *database, database string) (discard, gone bool) {
	if conn.Conn().IsClosed() {
		return false, d.terminate(ctx, db.pool, database, conn.Conn().PgConn().PID())
	}
	if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		conn.Conn().Close(context.WithoutCancel(ctx))
		return true, d.terminate(ctx, db.pool, database, conn.Conn().PgConn().PID())
	}
	return false, true
}

// enterSQL runs right after BEGIN: it remembers the transaction's id in a transaction-local
// setting, which the guards compare with the current transaction. While it is set, the
// coordinator's tables refuse writes (owntables.go).
const enterSQL = "SELECT " + enterExpr

// enterExpr is enterSQL's expression; with a statement role, roleExpr follows it.
const (
	enterExpr = "pg_catalog.set_config('kpgtx.xid', pg_catalog.pg_current_xact_id()::text, true)"
	roleExpr  = "pg_catalog.set_config('role', $1, true)"
)

// The coordinator's statements that differ with a statement role, built once: [0] without one,
// [1] with one, its name the statement's $1 (queueAs).
var (
	enterStmts = [2]string{enterSQL, enterSQL + ", " + roleExpr}
	guardStmts = [2]string{guardSQL(false), guardSQL(true)}
	lastGuards = [2]string{lastGuard(false), lastGuard(true)}
	// guardEnterStmts end a shared transaction's member (sqltxn/shared.go): its last
	// statement's guard, then the enter statement for the next member (or for leaveSQL).
	guardEnterStmts = [2]string{"SELECT " + lastGuard(false) + ", " + enterExpr,
		"SELECT " + lastGuard(true) + ", " + enterExpr + ", " + roleExpr}
)

// queueAs queues stmts[1] with the statement role as $1, or stmts[0] when there is none ("").
func queueAs(b *statements, stmts [2]string, role string) {
	if role != "" {
		b.Queue(stmts[1], role)
	} else {
		b.Queue(stmts[0])
	}
}

// leaveSQL clears what enterSQL set, as RESET ALL does: the coordinator's own statements follow.
const leaveSQL = "pg_catalog.set_config('kpgtx.xid', '', true)"

// guardLeft is the setting the guard reads when the connection left the transaction: reading
// an unknown setting fails with SQLSTATE 42704 and this name in the message.
const guardLeft = "kpgtx.client_statement_left_the_transaction"

// lastGuard is the guard after the last client statement, read after RESET ALL (which clears
// kpgtx.xid): it fails like guardSQL, checking that the transaction still has the id the enter
// statement assigned it. After a statement ended the transaction, the next one runs in a fresh
// transaction, which has no id until it writes, and RESET ALL does not write. With a role ($1)
// it also checks that the statements still ran as it.
func lastGuard(role bool) string {
	inside := "pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL"
	if role {
		inside += " AND current_user = $1"
	}
	return guardCase(inside, "server_version")
}

// guardReadOnly is the setting the guard reads when the transaction was made read-only.
const guardReadOnly = "kpgtx.client_statement_made_the_transaction_read_only"

// guardSQL fails (42704, naming guardLeft) unless the connection is still inside the
// transaction that enterSQL marked and, with a role ($1), still runs as that role; and (naming
// guardReadOnly) when the transaction is read-only.
func guardSQL(role bool) string {
	inside := "pg_catalog.current_setting('kpgtx.xid', true) = pg_catalog.pg_current_xact_id()::text"
	if role {
		inside += " AND current_user = $1"
	}
	return "SELECT " + guardCase(inside, "kpgtx.xid")
}

// guardCase is an expression that reads the setting ok when the condition inside holds and the
// transaction is read-write, and otherwise fails naming guardLeft (inside is false or unknown:
// fail closed) or guardReadOnly.
func guardCase(inside, ok string) string {
	return "pg_catalog.current_setting(CASE WHEN (" + inside + ") IS NOT TRUE THEN '" + guardLeft +
		"' WHEN pg_catalog.current_setting('transaction_read_only') = 'on' THEN '" + guardReadOnly + "' ELSE '" + ok + "' END)"
}

// resetTimeout bounds the reset of a connection before it returns to the pool.
const resetTimeout = 5 * time.Second

// reset returns a connection to the pool after DISCARD ALL (already done when done is set), off
// the request's path; a connection that cannot be reset, or that a client statement broke out
// of, is closed instead.
func (d *Databases) reset(ctx context.Context, conn *pgxpool.Conn, database string, discard, done bool) {
	if done && !discard {
		conn.Release()
		return
	}
	go func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resetTimeout)
		defer cancel()
		c := conn.Conn()
		if !discard && !c.IsClosed() {
			if _, err := c.Exec(rctx, "DISCARD ALL"); err != nil {
				d.logger.Warn("could not reset a connection; closing it", "database", database, "error", err)
				discard = true
			}
		}
		if discard && !c.IsClosed() {
			_ = c.Close(rctx)
		}
		conn.Release() // a closed connection is destroyed by the pool
	}()
}

// refused reports whether the server answered the batch with an ERROR (a statement, the marker
// insert or the COMMIT itself said no): the transaction then did not commit. Anything else (a
// cut connection, an expired budget, a terminated backend's FATAL) leaves a sent COMMIT's
// outcome unknown.
func refused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Severity == "ERROR"
}

// terminate makes sure the server backend of a connection that was cut off (context canceled,
// network error) has exited before Run returns: otherwise the batch could still reach PREPARE
// TRANSACTION on the server after the coordinator looked for the gid to roll it back, leaving
// an orphan. pg_terminate_backend with a timeout waits for the backend to exit (PostgreSQL 14+).
//
// gone reports that the backend is known to have exited: pg_terminate_backend said so, or no
// backend with that pid is left (it had exited already). A backend that may still run is
// logged.
func (d *Databases) terminate(ctx context.Context, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, database string, pid uint32) (gone bool) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := pool.QueryRow(tctx, `SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)
    THEN pg_terminate_backend($1, 5000) ELSE true END`, int64(pid)).Scan(&gone)
	if err != nil || !gone {
		d.logger.Warn("could not see the backend of a cut-off connection exit; recovery rolls back any orphan",
			"database", database, "backend_pid", pid, "error", err)
		return false
	}
	return true
}

// readResults reads BEGIN, the lead statements that set the isolation level, the enter
// statement, each other statement's result (rows when it returns any) and its guard, RESET ALL,
// the last statement's guard (with a role; otherwise it is the marker insert's condition), the
// marker and PREPARE (or COMMIT).
func readResults(br batchResults, database string, stmts []txntype.Statement, lead int, role bool, afterWork func()) ([]txntype.SQLResult, error) {
	results := make([]txntype.SQLResult, len(stmts))
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	for i := range lead {
		res, _, err := readOne(br, database)
		if err != nil {
			return nil, fmt.Errorf("statement %d: %w", i, err)
		}
		results[i] = res
	}
	if _, err := br.Exec(); err != nil { // enter
		return nil, fmt.Errorf("begin: %w", err)
	}
	last, lastTag := len(stmts)-1, ""
	for i := lead; i < len(stmts); i++ {
		res, tag, err := readOne(br, database)
		if err != nil {
			return nil, fmt.Errorf("statement %d: %w", i, err)
		}
		results[i], lastTag = res, tag
		if err := readGuard(br, i, tag, i == last); err != nil {
			return nil, err
		}
	}
	if afterWork != nil {
		afterWork()
	}
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("reset the client's settings: %w", err)
	}
	if role {
		if _, err := br.Exec(); err != nil {
			return nil, guardError(last, lastTag, err)
		}
	}
	if _, err := br.Exec(); err != nil {
		switch {
		case isGuardFailure(err) || isReadOnlyGuard(err):
			return nil, guardError(last, lastTag, err)
		case sqlstate(err) == sqlstateReadOnly:
			// The insert is refused before its condition runs: a statement of the client's
			// made the transaction read-only.
			return nil, fmt.Errorf("statement %d: %w (%w)", last, errReadOnly, err)
		}
		return nil, fmt.Errorf("marker row: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	return results, nil
}

// queueClient queues the client's statements, each followed by its guard (with the statement
// role, when there is one), except the last one: its guard follows RESET ALL (queued by the
// caller), and before that SET CONSTRAINTS ALL IMMEDIATE runs the client's deferred constraint
// checks and triggers now, while the transaction still counts as the client's, rather than at
// PREPARE or COMMIT: a trigger that writes the coordinator's tables is refused there as in a
// statement (owntables.go). After a statement that ended the transaction, SET CONSTRAINTS only
// warns, and the guard after RESET ALL reports the breach.
func queueClient(b *statements, stmts []txntype.Statement, role string) {
	for i, s := range stmts {
		b.Queue(s.Statement, args(s.Args)...)
		if i == len(stmts)-1 {
			b.Queue("SET CONSTRAINTS ALL IMMEDIATE")
		} else {
			queueAs(b, guardStmts, role)
		}
	}
}

// readGuard reads what queueClient queued after statement i (command tag tag): its guard, or
// for the last one its deferred checks.
func readGuard(br batchResults, i int, tag string, last bool) error {
	_, err := br.Exec()
	switch {
	case err == nil:
		return nil
	case last:
		return fmt.Errorf("statement %d: its deferred constraints or triggers: %w", i, err)
	}
	return guardError(i, tag, err)
}

// guardError is the failure of the guard after statement i (command tag tag).
func guardError(i int, tag string, err error) error {
	switch {
	case isGuardFailure(err):
		return fmt.Errorf("%w: statement %d (command tag %q) ended or left the transaction; "+
			"what it did before that may be committed: %v", txntype.ErrConfinementBreach, i, tag, err)
	// The server's answer stays in the chain: it refused, so nothing committed (refused).
	case isReadOnlyGuard(err):
		return fmt.Errorf("statement %d: %w (%w)", i, errReadOnly, err)
	}
	return fmt.Errorf("after statement %d: %w", i, err)
}

func readOne(br batchResults, database string) (txntype.SQLResult, string, error) {
	rows, err := br.Query()
	if err != nil {
		return txntype.SQLResult{}, "", err
	}
	defer rows.Close()
	res := txntype.SQLResult{Database: database}
	fields := rows.FieldDescriptions()
	if len(fields) > 0 {
		res.Rows = []map[string]any{}
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return txntype.SQLResult{}, "", err
		}
		row := make(map[string]any, len(fields))
		for j, f := range fields {
			row[f.Name] = jsonValue(vals[j])
		}
		res.Rows = append(res.Rows, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return txntype.SQLResult{}, "", err
	}
	tag := rows.CommandTag()
	res.RowsAffected = tag.RowsAffected()
	return res, tag.String(), nil
}

// args turns JSON scalars into driver arguments. Numbers keep their text form so that the
// server's inferred parameter type decides (an integer column gets an integer, numeric keeps
// every digit).
func args(in []any) []any {
	out := make([]any, len(in))
	for i, a := range in {
		switch v := a.(type) {
		case json.Number:
			out[i] = v.String()
		default:
			out[i] = v
		}
	}
	return out
}

// CommitPrepared commits a prepared transaction. A gid that no longer exists was finished
// before: the marker row says how (I4).
func (d *Databases) CommitPrepared(ctx context.Context, database, gid string) error {
	return d.finishPrepared(ctx, database, gid, true)
}

// RollbackPrepared rolls back a prepared transaction; idempotent like CommitPrepared.
func (d *Databases) RollbackPrepared(ctx context.Context, database, gid string) error {
	return d.finishPrepared(ctx, database, gid, false)
}

func (d *Databases) finishPrepared(ctx context.Context, database, gid string, commit bool) error {
	db, err := d.db(database)
	if err != nil {
		return classify(database, err)
	}
	pool := db.pool
	verb := "ROLLBACK PREPARED "
	if commit {
		verb = "COMMIT PREPARED "
	}
	_, err = pool.Exec(ctx, verb+quoteGID(gid))
	if err == nil {
		return nil
	}
	if sqlstate(err) != sqlstateUndefinedObject {
		return classify(database, fmt.Errorf("%s%s: %w", verb, gid, err))
	}
	// The gid is gone: it was committed or rolled back earlier (by us before a crash, or by
	// hand). The marker row, written inside that transaction, tells which.
	var committed bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+d.markerTable(database)+" WHERE gid = $1 AND NOT aborted)", gid).Scan(&committed); err != nil {
		return classify(database, fmt.Errorf("read marker of %s: %w", gid, err))
	}
	if committed != commit {
		ended := "rolled back"
		if committed {
			ended = "committed"
		}
		return classify(database, fmt.Errorf("%w: %s on %s was %s by someone else", txntype.ErrHeuristic, gid, database, ended))
	}
	return nil
}

// SettleOnePhase decides a one-phase transaction from its marker, for good (txntype.SQL): the
// marker row it committed means committed. Otherwise a fencing marker (aborted = true) is
// inserted under the same key, so the transaction's own marker insert, should its batch still
// run, fails with a unique violation and its COMMIT cannot happen. A transaction that inserted
// its marker and has not ended holds the key: the insert waits for it (bounded by ctx), then
// sees its outcome.
func (d *Databases) SettleOnePhase(ctx context.Context, database, gid string) (bool, error) {
	pool, err := d.Pool(database)
	if err != nil {
		return false, classify(database, err)
	}
	var aborted bool
	m := d.markerTable(database)
	err = pool.QueryRow(ctx, `WITH ins AS (
    INSERT INTO `+m+` (gid, aborted) VALUES ($1, true) ON CONFLICT (gid) DO NOTHING RETURNING aborted
)
SELECT aborted FROM ins
UNION ALL
SELECT aborted FROM `+m+` WHERE gid = $1 AND NOT EXISTS (SELECT 1 FROM ins)`, gid).Scan(&aborted)
	if errors.Is(err, pgx.ErrNoRows) {
		// Conflict, and the conflicting row is not visible to the statement's snapshot (it
		// committed while the insert waited for it): read it again.
		err = pool.QueryRow(ctx, `SELECT aborted FROM `+m+` WHERE gid = $1`, gid).Scan(&aborted)
	}
	if err != nil {
		return false, classify(database, fmt.Errorf("settle one-phase %s: %w", gid, err))
	}
	return !aborted, nil
}

// DeleteMarkers removes marker rows of transactions whose final state is durable in the log;
// they are needed only while a gid may still be in doubt.
func (d *Databases) DeleteMarkers(ctx context.Context, database string, gids []string) error {
	db, err := d.db(database)
	if err != nil {
		return err
	}
	_, err = db.pool.Exec(ctx, "DELETE FROM "+db.markers+" WHERE gid = ANY($1)", gids)
	return err
}
