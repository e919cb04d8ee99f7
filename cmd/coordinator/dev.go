package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/kpgtx/coordinator/devstack"
	"github.com/kpgtx/coordinator/service"
)

// The demo the dev banner shows.
const (
	devTopic      = "orders"
	devTable      = `CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, total numeric NOT NULL)`
	devExampleID  = "order-42"
	devExampleReq = `{"id":"order-42","sql":[{"statement":"INSERT INTO orders(id, total) VALUES ($1, $2)","args":["o-42",10]}],"kafka":[{"topic":"orders","key":"o-42","value":"{\"total\":10}"}]}`
)

// The settings dev replaces with its own stack.
var devReplaced = []string{"DATABASE_URL", "COORDINATOR_DATABASES", "KAFKA_BROKERS"}

// envDevPostgresPath, when set, is the only place dev looks for PostgreSQL server binaries
// (a PATH-like list); without any there it fetches a build (devstack/fetch.go).
const envDevPostgresPath = "COORDINATOR_DEV_POSTGRES_PATH"

// devCommand runs the coordinator on a throwaway PostgreSQL (initdb in a temporary directory)
// and an in-process Kafka, prints how to use it, and removes everything on SIGINT/SIGTERM.
func devCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("dev", "dev [flags]", stderr)
	defineFlags(fs, "listen", "log-level")
	help, err := parseFlags(fs, args)
	if help {
		fmt.Fprintln(stderr, "\nRuns the coordinator on a throwaway PostgreSQL and an in-process Kafka (topic \"orders\"),")
		fmt.Fprintln(stderr, "both removed on exit. For development only: no durability, no authentication.")
		fmt.Fprintln(stderr, "\nPostgreSQL comes from the local server binaries (pg_config or initdb on PATH,")
		fmt.Fprintln(stderr, "/usr/lib/postgresql/*/bin; "+envDevPostgresPath+", a PATH-like list, replaces these places);")
		fmt.Fprintln(stderr, "without any, a PostgreSQL "+devstack.PostgresVersion+" build is fetched from Maven Central once and cached.")
		return exitOK
	}
	if err != nil {
		return fail(stderr, err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, usagef("dev takes no arguments, got %q", fs.Args()))
	}
	env := overlay(fs, getenv)
	level, err := logLevel(env)
	if err != nil {
		return fail(stderr, err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	for _, key := range devReplaced {
		if getenv(key) != "" {
			logger.Warn("dev mode ignores "+key+"; use `coordinator serve` to run on your own services", "setting", key)
		}
	}
	cfg, err := service.Load(without(env, devReplaced...))
	if err != nil {
		return fail(stderr, err)
	}
	if err := dev(ctx, cfg, getenv(envDevPostgresPath), logger, stdout); err != nil {
		return fail(stderr, err)
	}
	logger.Info("dev: stopped")
	return exitOK
}

// dev starts the stack and the service, serves until ctx is done and tears everything down in
// reverse order: HTTP server, service (its Kafka clients), Kafka, PostgreSQL (and its directory).
func dev(ctx context.Context, cfg service.Config, pgPath string, logger *slog.Logger, stdout io.Writer) (err error) {
	// Listen first: a port in use is reported before anything is started.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("dev: listen on %s (choose another address with -listen): %w", cfg.Listen, err)
	}
	defer ln.Close() // Serve closes it; this is for the early returns
	if host, _, _ := net.SplitHostPort(cfg.Listen); !isLoopback(host) {
		logger.Warn("dev mode listens beyond this machine; the API has no authentication", "listen", cfg.Listen)
	}

	dir, err := os.MkdirTemp("", "coordinator-dev-")
	if err != nil {
		return fmt.Errorf("dev: temporary directory: %w", err)
	}
	pg, err := devstack.StartPostgres(ctx, devstack.PostgresOptions{Dir: dir, Logger: logger, Path: pgPath})
	if err != nil {
		_ = os.RemoveAll(dir) // StartPostgres removes it, unless it failed before using it
		return startupError(ctx, fmt.Errorf("dev: %w", err))
	}
	defer func() {
		if stopErr := pg.Stop(context.Background()); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("dev: %w", stopErr))
			return
		}
		logger.Info("dev: removed the PostgreSQL data", "dir", dir)
	}()

	kafka, err := devstack.StartKafka(ctx, devTopic)
	if err != nil {
		return startupError(ctx, fmt.Errorf("dev: %w", err))
	}
	defer kafka.Stop()

	// An in-process registry of Confluent's API (franz-go's srfake), for avro, protobuf and
	// jsonschema values: register schemas at its URL; it forgets them on exit.
	schemaRegistry := srfake.New()
	defer schemaRegistry.Close()
	if cfg.SchemaRegistry.URL == "" {
		cfg.SchemaRegistry.URL = schemaRegistry.URL()
	}

	if err := createDemoTable(ctx, pg.DSN()); err != nil {
		return startupError(ctx, err)
	}

	cfg.DatabaseURL = pg.DSN()
	cfg.Brokers = kafka.Brokers()
	svc, err := service.Open(ctx, cfg, logger)
	if err != nil {
		return startupError(ctx, fmt.Errorf("dev: %w", err))
	}
	defer svc.Close()

	printBanner(stdout, baseURL(ln.Addr(), cfg.APITLS.Enabled()), pg.DSN(), kafka.Brokers(), cfg.SchemaRegistry.URL, dir)

	go func() {
		<-ctx.Done()
		logger.Info("dev: stopping, removing the dev database and Kafka (signal again to force)")
	}()
	return svc.Serve(ctx, ln)
}

func createDemoTable(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("dev: connect to the dev database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, devTable); err != nil {
		return fmt.Errorf("dev: create the demo table: %w", err)
	}
	return nil
}

// baseURL is the URL a client on this machine uses for addr (an unspecified address such as
// [::]:8080 is reached through the loopback address).
func baseURL(addr net.Addr, https bool) string {
	scheme := "http://"
	if https {
		scheme = "https://"
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return scheme + net.JoinHostPort(host, port)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func printBanner(w io.Writer, base, dsn string, brokers []string, schemaRegistry, dir string) {
	var b strings.Builder
	fmt.Fprintf(&b, "\ncoordinator dev: throwaway PostgreSQL and in-process Kafka; everything is removed on exit\n\n")
	fmt.Fprintf(&b, "  API         %s  (spec: %s/openapi.yaml)\n", base, base)
	fmt.Fprintf(&b, "  PostgreSQL  %s  (table orders)\n", dsn)
	fmt.Fprintf(&b, "  Kafka       %s  (topic %s)\n", strings.Join(brokers, ","), devTopic)
	fmt.Fprintf(&b, "  Registry    %s  (Schema Registry API, in-process: register schemas here)\n", schemaRegistry)
	fmt.Fprintf(&b, "  Data        %s\n\n", dir)
	fmt.Fprintf(&b, "Insert a row and produce a record, atomically:\n\n")
	fmt.Fprintf(&b, "  curl -s -X POST %s/v1/transactions -H 'Content-Type: application/json' -d '%s'\n\n", base, devExampleReq)
	fmt.Fprintf(&b, "Read the transaction back:\n\n")
	fmt.Fprintf(&b, "  curl -s %s/v1/transactions/%s\n\n", base, devExampleID)
	if _, err := exec.LookPath("psql"); err == nil {
		fmt.Fprintf(&b, "Look at the row:\n\n  psql '%s' -c 'SELECT * FROM orders'\n\n", dsn)
	}
	fmt.Fprintf(&b, "Press Ctrl-C to stop.\n\n")
	_, _ = io.WriteString(w, b.String())
}
