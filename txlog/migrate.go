package txlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	pgxv5 "github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/kpgtx/coordinator/migrations"
)

// migrationLockTimeout bounds a migration's waits for locks (Migrate).
const migrationLockTimeout = time.Minute

// Migrate applies (up) or reverts (down) the embedded migrations in the pool's current schema
// (search_path), so tests can use a schema of their own.
func Migrate(ctx context.Context, l *Log, direction string) error {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return fmt.Errorf("txlog: migrations: %w", err)
	}
	// A pool of its own, with a lock timeout longer than the log's: golang-migrate waits for
	// another process's migration on an advisory lock, for as long as that migration takes. It
	// is bounded all the same, so that a lock kept by a prepared transaction (which only
	// recovery, after startup, ends) fails the start with an error instead of hanging it.
	cfg := l.pool.Config()
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprint(migrationLockTimeout.Milliseconds())
	cfg.MinConns, cfg.MaxConns = 0, 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("txlog: migrate pool: %w", err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	drv, err := pgx.WithInstance(db, &pgx.Config{MigrationsTable: "coordinator_schema_migrations"})
	if err != nil {
		return fmt.Errorf("txlog: migrate driver: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		return fmt.Errorf("txlog: migrate: %w", err)
	}
	// The driver holds one connection of the pool until closed.
	defer m.Close()
	switch direction {
	case "up":
		err = m.Up()
	case "down":
		err = m.Down()
	default:
		return fmt.Errorf("txlog: migrate direction %q: want up or down", direction)
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("txlog: migrate %s: %w", direction, err)
	}
	return nil
}

// SchemaVersion reads the log's schema version and whether a migration failed half-way
// (golang-migrate's table); ErrNotMigrated when no migration ran.
func (l *Log) SchemaVersion(ctx context.Context) (version int64, dirty bool, err error) {
	err = l.pool.QueryRow(ctx, "SELECT version, dirty FROM coordinator_schema_migrations LIMIT 1").Scan(&version, &dirty)
	if errors.Is(err, pgxv5.ErrNoRows) {
		return 0, false, ErrNotMigrated
	}
	if err != nil {
		return 0, false, fmt.Errorf("read the log's schema version: %w", err)
	}
	return version, dirty, nil
}

// Unfinished counts the log's transactions not in a final clean state (in doubt or heuristic:
// the ones recovery or an operator still needs); 0 when the log's tables do not exist.
func (l *Log) Unfinished(ctx context.Context) (int, error) {
	var exists bool
	if err := l.pool.QueryRow(ctx, `SELECT to_regclass('coordinator_transactions') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("look for the coordinator log: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var n int
	err := l.pool.QueryRow(ctx, `SELECT count(*) FROM coordinator_transactions WHERE state NOT IN ('committed', 'aborted')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unfinished transactions: %w", err)
	}
	return n, nil
}
