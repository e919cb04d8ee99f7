package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/kpgtx/coordinator/service"
)

var serveFlags = []string{
	"listen", "database-url", "kafka-brokers", "instance", "gid-prefix",
	"kafka-transactional-id-prefix", "pool-size", "kafka-transaction-timeout",
	"default-timeout", "max-timeout", "log-level", "config", "shutdown-timeout",
}

// serveCommand runs the coordinator until ctx is done (SIGINT/SIGTERM), then shuts down
// gracefully: requests in flight finish, connections and clients are closed.
func serveCommand(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("serve", "serve [flags]", stderr)
	defineFlags(fs, serveFlags...)
	help, err := parseFlags(fs, args)
	if help {
		fmt.Fprintln(stderr, "\nA flag overrides its environment variable, which overrides the -config file; `coordinator help` lists them all.")
		fmt.Fprintln(stderr, "Prefer DATABASE_URL to -database-url: a password on the command line is visible to other users.")
		return exitOK
	}
	if err != nil {
		return fail(stderr, err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, usagef("serve takes no arguments, got %q", fs.Args()))
	}
	if getenv("DATABASE_URL") == "" && getenv(envConfig) == "" && fs.NFlag() == 0 {
		fmt.Fprint(stderr, `coordinator: nothing is configured: DATABASE_URL is not set.

Set DATABASE_URL (PostgreSQL with max_prepared_transactions > 0) and, for Kafka, KAFKA_BROKERS,
or pass -database-url and -kafka-brokers; `+"`coordinator help`"+` lists every setting.

To try the coordinator without any of that, run `+"`coordinator dev`"+`: it starts a throwaway
PostgreSQL and an in-process Kafka and prints a request to send.
`)
		return exitUsage
	}

	env, blame, err := withConfigFile(overlay(fs, getenv))
	if err != nil {
		return fail(stderr, err)
	}
	level, err := logLevel(env)
	if err != nil {
		return fail(stderr, err)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	cfg, err := service.Load(env)
	if err != nil {
		return fail(stderr, blame(err))
	}
	if err := cfg.Validate(); err != nil {
		return fail(stderr, blame(err))
	}
	logger.LogAttrs(ctx, slog.LevelInfo, "coordinator starting", append([]slog.Attr{slog.String("version", version())}, cfg.LogAttrs()...)...)

	if err := serve(ctx, cfg, logger); err != nil {
		logger.Error("coordinator failed", "error", err.Error())
		return fail(stderr, err)
	}
	logger.Info("coordinator stopped")
	return exitOK
}

// serve opens the service, serves it on cfg.Listen until ctx is done and closes it.
func serve(ctx context.Context, cfg service.Config, logger *slog.Logger) error {
	svc, err := service.Open(ctx, cfg, logger)
	if err != nil {
		return startupError(ctx, err)
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("COORDINATOR_LISTEN=%s: %w", cfg.Listen, err)
	}
	go func() {
		<-ctx.Done()
		logger.Info("coordinator stopping: finishing requests in flight (signal again to force)")
	}()
	if err := svc.Serve(ctx, ln); err != nil {
		return err
	}
	return nil
}

// startupError says so when startup ended because of a signal rather than a failure.
func startupError(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted during startup: %w", err)
	}
	return err
}
