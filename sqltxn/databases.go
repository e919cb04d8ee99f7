package sqltxn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kpgtx/coordinator/coord"
)

// Databases is the SQL participant: one connection pool per named database.
type Databases struct {
	pools map[string]*pgxpool.Pool
	// markers is each database's marker table, schema-qualified: the schema first on the
	// connection's search_path when the coordinator started (a later search_path of the role
	// cannot move it).
	markers map[string]string
	logger  *slog.Logger
}

var _ coord.SQL = (*Databases)(nil)

// markerDDL creates the coordinator-owned marker table (also in migrations for the default
// database). A marker row is inserted inside the participant's transaction: after a crash, its
// presence means the prepared transaction committed (I4).
const markerDDL = `CREATE TABLE IF NOT EXISTS coordinator_markers (
    gid        text        PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    aborted    boolean     NOT NULL DEFAULT false
)`

// Open connects to every database (name → DSN), refuses a server whose
// max_prepared_transactions is 0, and creates the marker table where missing.
func Open(ctx context.Context, dsns map[string]string, maxConns int32, logger *slog.Logger) (*Databases, error) {
	if logger == nil {
		logger = slog.Default()
	}
	d := &Databases{pools: map[string]*pgxpool.Pool{}, markers: map[string]string{}, logger: logger}
	for name, dsn := range dsns {
		pool, err := openPool(ctx, name, dsn, maxConns)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.pools[name] = pool
		var schema *string
		if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil || schema == nil {
			d.Close()
			return nil, fmt.Errorf("database %q: no schema on the search_path for the marker table (%v)", name, err)
		}
		d.markers[name] = pgx.Identifier{*schema, "coordinator_markers"}.Sanitize()
	}
	return d, nil
}

// markerTable is the database's schema-qualified marker table.
func (d *Databases) markerTable(database string) string { return d.markers[database] }

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
func (d *Databases) Has(name string) bool { _, ok := d.pools[name]; return ok }

// Pool returns the named database's pool.
func (d *Databases) Pool(name string) (*pgxpool.Pool, error) {
	p, ok := d.pools[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownDatabase, name)
	}
	return p, nil
}

// Close closes every pool.
func (d *Databases) Close() {
	for _, p := range d.pools {
		p.Close()
	}
}

// quoteGID quotes a gid as a string literal for PREPARE/COMMIT PREPARED, which take no
// parameters.
func quoteGID(gid string) string { return "'" + strings.ReplaceAll(gid, "'", "''") + "'" }

var errEmpty = errors.New("no statements")
