package txlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/kpgtx/coordinator/migrations"
)

// Migrate applies (up) or reverts (down) the embedded migrations in the pool's current schema
// (search_path), so tests can use a schema of their own.
func Migrate(ctx context.Context, l *Log, direction string) error {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return fmt.Errorf("txlog: migrations: %w", err)
	}
	db := stdlib.OpenDBFromPool(l.pool)
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
	_ = ctx
	return nil
}
