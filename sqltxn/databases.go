package sqltxn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/kpgtx/coordinator/txntype"
)

// Databases is the SQL participant: one connection pool per named database.
type Databases struct {
	dbs    map[string]*database
	role   string
	logger *slog.Logger
	// send sends a round trip's statements: (*statements).send, or in BenchmarkRun the
	// baseline it is measured against.
	send func(context.Context, *pgx.Conn, *statements) batchResults
}

// database is one configured database.
type database struct {
	pool *pgxpool.Pool
	// markers is the marker table, schema-qualified: a client statement's SET LOCAL
	// search_path must not send the coordinator's marker row elsewhere.
	markers string
}

// Options tune Open.
type Options struct {
	// MaxConns bounds each database's pool (0: pgxpool's default).
	MaxConns int32
	// StatementRole, when set, is the role client statements run as (SET LOCAL ROLE, per
	// transaction). The coordinator's login must be a member of it; it needs no rights on the
	// coordinator's tables. The marker row is written with the login's own role.
	StatementRole string
	Logger        *slog.Logger
}

var _ txntype.SQL = (*Databases)(nil)

// markerDDL creates the coordinator-owned marker table (also in migrations for the default
// database). A marker row is inserted inside the participant's transaction: after a crash, its
// presence means the prepared transaction committed (I4).
const markerDDL = `CREATE TABLE IF NOT EXISTS coordinator_markers (
    gid        text        PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    aborted    boolean     NOT NULL DEFAULT false
)`

// Open connects to every database (name → DSN), refuses a server whose
// max_prepared_transactions is 0, creates the marker table where missing, and checks that the
// statement role, if any, can be taken.
func Open(ctx context.Context, dsns map[string]string, o Options) (*Databases, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	d := &Databases{dbs: map[string]*database{}, role: o.StatementRole, logger: o.Logger, send: sendStatements}
	for name, dsn := range dsns {
		db, err := openDatabase(ctx, name, dsn, o)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.dbs[name] = db
	}
	return d, nil
}

func openDatabase(ctx context.Context, name, dsn string, o Options) (*database, error) {
	pool, err := openPool(ctx, name, dsn, o.MaxConns)
	if err != nil {
		return nil, err
	}
	db := &database{pool: pool}
	var schema *string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil || schema == nil {
		pool.Close()
		return nil, fmt.Errorf("database %q: no current schema for the marker table (check search_path): %v", name, err)
	}
	db.markers = pgx.Identifier{*schema, "coordinator_markers"}.Sanitize()
	if err := guardOwnTables(ctx, pool, name, "", o.Logger); err != nil {
		pool.Close()
		return nil, err
	}
	if o.StatementRole != "" {
		if err := checkRole(ctx, pool, o.StatementRole, db.markers); err != nil {
			pool.Close()
			return nil, fmt.Errorf("database %q: %w", name, err)
		}
	}
	return db, nil
}

// checkRole takes the statement role once, in a transaction that is rolled back, and refuses a
// role that could reach the marker table.
func checkRole(ctx context.Context, pool *pgxpool.Pool, role, markers string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.set_config('role', $1, true)", role); err != nil {
		return fmt.Errorf("%w %q: the coordinator's login must be a member of it (GRANT %s TO <login>): %v",
			ErrStatementRole, role, pgx.Identifier{role}.Sanitize(), err)
	}
	var super, canWrite bool
	err = tx.QueryRow(ctx, `SELECT rolsuper, has_table_privilege(current_user, $1, 'INSERT,UPDATE,DELETE')
FROM pg_catalog.pg_roles WHERE rolname = current_user`, markers).Scan(&super, &canWrite)
	if err != nil {
		return fmt.Errorf("%w %q: %v", ErrStatementRole, role, err)
	}
	if super || canWrite {
		return fmt.Errorf("%w %q: it must not be a superuser nor write the coordinator's tables (REVOKE ALL ON coordinator_markers FROM %s)",
			ErrStatementRole, role, pgx.Identifier{role}.Sanitize())
	}
	return nil
}

// markerTable is the database's schema-qualified marker table.
func (d *Databases) markerTable(database string) string {
	if db, ok := d.dbs[database]; ok {
		return db.markers
	}
	return ""
}

func openPool(ctx context.Context, name, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("database %q: bad DSN: %w", name, err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	// User statements go through the extended protocol without a describe round trip: the
	// server infers parameter types from the statement (so "10" fits an integer column), and a
	// string holding several statements is refused by PostgreSQL itself.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database %q: %w", name, err)
	}
	if err := CheckPrepared(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %q: %w", name, err)
	}
	if _, err := pool.Exec(ctx, markerDDL); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %q: create marker table: %w", name, err)
	}
	if err := addAbortedColumn(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %q: marker table: %w", name, err)
	}
	return pool, nil
}

// addAbortedColumn adds the marker table's aborted column (fencing markers, SettleOnePhase)
// where it is missing. The catalog is read first: ALTER TABLE waits for every prepared
// transaction holding a marker row, which only recovery, after startup, finishes.
func addAbortedColumn(ctx context.Context, pool *pgxpool.Pool) error {
	var has bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
WHERE attrelid = 'coordinator_markers'::regclass AND attname = 'aborted' AND NOT attisdropped)`).Scan(&has); err != nil {
		return err
	}
	if has {
		return nil
	}
	_, err := pool.Exec(ctx, `ALTER TABLE coordinator_markers ADD COLUMN IF NOT EXISTS aborted boolean NOT NULL DEFAULT false`)
	return err
}

// Querier is what CheckPrepared needs (a pool or a connection).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckPrepared refuses a server on which PREPARE TRANSACTION cannot work, saying what to change.
func CheckPrepared(ctx context.Context, q Querier) error {
	var n int
	if err := q.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&n); err != nil {
		return fmt.Errorf("read max_prepared_transactions: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: PREPARE TRANSACTION would fail; set max_prepared_transactions = 100 "+
			"(at least the coordinator's concurrency) in postgresql.conf or with "+
			"`ALTER SYSTEM SET max_prepared_transactions = 100`, then restart PostgreSQL", ErrNoPreparedTransactions)
	}
	return nil
}

// Has reports whether the database is configured.
func (d *Databases) Has(name string) bool { _, ok := d.dbs[name]; return ok }

// Pool returns the named database's pool.
func (d *Databases) Pool(name string) (*pgxpool.Pool, error) {
	db, err := d.db(name)
	if err != nil {
		return nil, err
	}
	return db.pool, nil
}

func (d *Databases) db(name string) (*database, error) {
	db, ok := d.dbs[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownDatabase, name)
	}
	return db, nil
}

// Close closes every pool.
func (d *Databases) Close() {
	for _, db := range d.dbs {
		db.pool.Close()
	}
}

// quoteGID quotes a gid as a string literal for PREPARE/COMMIT PREPARED, which take no
// parameters.
func quoteGID(gid string) string { return "'" + strings.ReplaceAll(gid, "'", "''") + "'" }

var errEmpty = errors.New("no statements")
