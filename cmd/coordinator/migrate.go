package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kpgtx/coordinator/txlog"
)

// migrateCommand applies (up) or reverts (down) the coordinator log's schema in the schema
// DATABASE_URL's search_path selects. down refuses while the log holds unfinished
// transactions, since recovery needs them, unless -force is given.
func migrateCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("migrate", "migrate [flags] up|down", stderr)
	defineFlags(fs, "database-url", "config")
	force := fs.Bool("force", false, "down: drop the log even when it holds unfinished (in-doubt or heuristic) transactions")
	help, err := parseFlags(fs, args)
	if help {
		fmt.Fprintln(stderr, "\nup applies the embedded migrations; down reverts them and drops the coordinator log.")
		return exitOK
	}
	if err != nil {
		return fail(stderr, err)
	}
	// Accept flags after the direction too: `migrate up -database-url ...`.
	direction := fs.Arg(0)
	if fs.NArg() > 1 {
		if _, err := parseFlags(fs, fs.Args()[1:]); err != nil {
			return fail(stderr, err)
		}
		if fs.NArg() > 0 {
			return fail(stderr, usagef("migrate: unexpected arguments %q; usage: coordinator migrate [-database-url URL] [-force] up|down", fs.Args()))
		}
	}
	if direction != "up" && direction != "down" {
		if direction == "" {
			return fail(stderr, usagef("migrate: missing direction; usage: coordinator migrate [-database-url URL] [-force] up|down"))
		}
		return fail(stderr, usagef("migrate: unknown direction %q; usage: coordinator migrate [-database-url URL] [-force] up|down", direction))
	}
	// The same precedence as serve: flags, then the environment, then the -config file.
	env, _, err := withConfigFile(overlay(fs, getenv))
	if err != nil {
		return fail(stderr, err)
	}
	dsn := env("DATABASE_URL")
	if dsn == "" {
		return fail(stderr, usagef("migrate: DATABASE_URL is not set (nor -database-url, nor in the -config file): nothing to migrate"))
	}
	if err := migrate(ctx, dsn, direction, *force); err != nil {
		return fail(stderr, startupError(ctx, err))
	}
	fmt.Fprintf(stdout, "migrate %s: done (%s)\n", direction, describeDSN(dsn))
	return exitOK
}

func migrate(ctx context.Context, dsn, direction string, force bool) error {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("DATABASE_URL: cannot reach PostgreSQL: %w", err)
	}
	log := txlog.New(pool, txlog.Options{})
	if direction == "down" && !force {
		n, err := log.Unfinished(ctx)
		if err != nil {
			return fmt.Errorf("migrate down: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("migrate down: the coordinator log holds %d unfinished transactions (in doubt or heuristic) "+
				"that recovery needs; resolve them first, or pass -force to drop them anyway", n)
		}
	}
	return txlog.Migrate(ctx, log, direction)
}
