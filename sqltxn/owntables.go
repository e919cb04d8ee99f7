package sqltxn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The coordinator's own tables refuse a client's writes (I13).
//
// sqlpolicy refuses a statement that names a coordinator_* table, but a client statement can
// write one without naming it: a DO block, a function it calls or a trigger it fires can run any
// SQL. Inside the coordinator's transaction that SQL could delete or rewrite log rows (a request
// logged prepared whose row is gone is rolled back as an orphan after Kafka committed), forge or
// delete marker rows (the evidence phase 2 and recovery decide by), or move an instance's epoch
// (fencing). With a statement role the grants keep such SQL out; without one it runs with the
// coordinator's own rights.
//
// So each of those tables carries a statement-level trigger that refuses INSERT, UPDATE, DELETE
// and TRUNCATE while the transaction is a client's: from the enter statement, which sets
// kpgtx.xid, to RESET ALL (or leaveSQL in a shared transaction), which clears it before the
// coordinator writes its marker row. The client's deferred triggers run inside that span too
// (queueClient's SET CONSTRAINTS ALL IMMEDIATE). The log's own sessions never set kpgtx.xid.
// The refusal is an error of the statement that wrote (SQLSTATE KP001, naming the table): the
// request is aborted, nothing of it commits, 409. A statement-level trigger fires once per
// statement, whatever the rows, so the log's writes pay a few microseconds each.
//
// What this does not stop, and only a statement role (a login without rights on these tables)
// keeps out: reads, and the locks a read FOR UPDATE or LOCK TABLE takes (a log write then waits
// for the transaction to end); DDL run by dynamic SQL (it could drop the trigger); client code
// that clears kpgtx.xid before it writes and sets it back after; and a superuser's client code
// (session_replication_role = replica switches triggers off).

// sqlstateOwnTable is the SQLSTATE of the refusal.
const sqlstateOwnTable = "KP001"

// guardedTables are the coordinator's tables in the schema a participant opens in: the log's in
// the log's database, the marker table in every database; and, in the kpgtx schema, the
// namespace registry. coordinator_schema_migrations is golang-migrate's, and never written
// inside a client's transaction.
var guardedTables = map[string][]string{
	"": {"coordinator_transactions", "coordinator_events", "coordinator_markers", "coordinator_shared_gids",
		"coordinator_instances", "coordinator_log", "coordinator_topics", "coordinator_pruned"},
	"kpgtx": {"namespaces"},
}

// refuseFunction is the trigger function, created in each guarded schema.
const refuseFunction = "coordinator_refuse_client_write"

// refuseFunctionSource is the trigger function's body.
const refuseFunctionSource = `
BEGIN
    IF coalesce(pg_catalog.current_setting('kpgtx.xid', true), '') <> '' THEN
        RAISE EXCEPTION USING ERRCODE = 'KP001',
            MESSAGE = pg_catalog.format('client statements may not change the coordinator''s table %I.%I (%s)',
                TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_OP),
            HINT = 'a function, a trigger or a DO block of the request wrote it; run client statements as a role without rights on it (COORDINATOR_STATEMENT_ROLE)';
    END IF;
    RETURN NULL;
END`

// startupLockTimeout bounds every lock wait of startup's own steps in a participant database
// (the table guards, the namespace claim): a prepared transaction keeps its locks until
// recovery, which runs only after startup, ends it. That may be a marker row's lock on the
// marker table, or a client's request that took the same advisory lock
// (pg_advisory_xact_lock is a client's to call) or locked the registry from code the parser
// never sees.
const startupLockTimeout = "2s"

// guardOwnTables creates the refusing trigger on each of the coordinator's tables of schema ("":
// the session's current schema) that exists in the database and lacks it. Concurrent first
// starts are serialised by an advisory lock per schema (guardLockKey).
func guardOwnTables(ctx context.Context, pool *pgxpool.Pool, database, schema string, logger *slog.Logger) error {
	for _, table := range guardedTables[schema] {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// Looked at before any lock: a restart finds every table guarded and takes none.
			g, err := lookGuard(ctx, tx, table, schema)
			if err != nil || g.done() {
				return err
			}
			// The timeout comes before the advisory lock: a client's request may take the same
			// one (pg_advisory_xact_lock is a client's to call), and its prepared transaction
			// keeps it until recovery, after startup, ends it.
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+startupLockTimeout+"'"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, guardLockKey(g.fn)); err != nil {
				return err
			}
			if g, err = lookGuard(ctx, tx, table, schema); err != nil || g.done() {
				return err // another start guarded it meanwhile
			}
			if !g.current { // missing, or an older body
				if _, err := tx.Exec(ctx, "CREATE OR REPLACE FUNCTION "+g.fn+"() RETURNS trigger LANGUAGE plpgsql AS $$"+
					refuseFunctionSource+"$$"); err != nil {
					return err
				}
			}
			if g.has {
				return nil
			}
			_, err = tx.Exec(ctx, "CREATE TRIGGER "+refuseFunction+" BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON "+
				g.qualified+" FOR EACH STATEMENT EXECUTE FUNCTION "+g.fn+"()")
			return err
		})
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "55P03": // lock_not_available
			logger.Warn("a prepared transaction holds a coordinator table or the guards' lock: the table refuses client writes from a later start on",
				"database", database, "table", table)
		case errors.As(err, &pe) && pe.Code == "42501": // insufficient_privilege: another role owns it
			logger.Warn("the coordinator's login does not own a coordinator table and cannot guard it: "+
				"client code may write it unless COORDINATOR_STATEMENT_ROLE is set", "database", database, "table", table, "error", err)
		case err != nil:
			return fmt.Errorf("database %q: guard the coordinator's table %s: %w", database, table, err)
		}
	}
	return nil
}

// guardLockKey names the advisory lock that serialises the first starts guarding the tables of
// one schema (fn: the schema's trigger function, schema-qualified): they create that function
// and the triggers. One lock per schema, not per database: a start whose CREATE TRIGGER waits
// for its own table (a prepared transaction holding it, up to the lock timeout) then holds only
// its namespace's lock, and the starts of the other namespaces in the database still guard
// theirs. Behind one lock for the database they timed out and ran unguarded (CI: a DO block
// deleted a log that should have refused it, with many starts at once).
func guardLockKey(fn string) string { return "kpgtx/write-guards/" + fn }

// guard is what a database has of one table's refusing trigger.
type guard struct {
	missing       bool   // the table is not in this database
	qualified, fn string // the table's and the trigger function's qualified names
	has, current  bool   // the trigger exists; the function has today's body
}

func (g guard) done() bool { return g.missing || (g.has && g.current) }

// lookGuard reads the catalog for table's trigger (schema "": the session's current schema).
func lookGuard(ctx context.Context, tx pgx.Tx, table, schema string) (guard, error) {
	var g guard
	err := tx.QueryRow(ctx, `SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname),
    pg_catalog.quote_ident(n.nspname) || '.' || $3,
    EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = c.oid AND t.tgname = $3),
    EXISTS (SELECT 1 FROM pg_catalog.pg_proc p WHERE p.pronamespace = n.oid AND p.proname = $3 AND p.prosrc = $4)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = $1 AND n.nspname = coalesce(nullif($2, ''), pg_catalog.current_schema())`,
		table, schema, refuseFunction, refuseFunctionSource).Scan(&g.qualified, &g.fn, &g.has, &g.current)
	if errors.Is(err, pgx.ErrNoRows) {
		return guard{missing: true}, nil
	}
	return g, err
}
