package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/kpgtx/coordinator/devstack"
	"github.com/kpgtx/coordinator/service"
)

// The demo the dev banner shows, and what examples/pipeline and the examples of README.md and
// docs/ use (test/docs_examples_test.go runs them all against dev mode, after the banner's).
// The banner's order is not one of the README's, so a user may try both.
const (
	devExampleID  = "order-1"
	devExampleReq = `{"id":"order-1","sql":[{"statement":"INSERT INTO orders(id, total) VALUES ($1, $2)","args":["o-1",10]}],"kafka":[{"topic":"orders","key":"o-1","value":"{\"total\":10}"}]}`
	// devKafkaPort is the in-process Kafka's port unless -kafka-port says otherwise: Kafka's
	// usual one, which examples/pipeline and other clients try by default.
	devKafkaPort = 9092
	// devStatementRole is the role client statements run as unless COORDINATOR_STATEMENT_ROLE
	// names another (docs/sql.md, least privilege).
	devStatementRole = "kpgtx_client"
)

// devTopics are the topics dev mode creates (one partition each): the demo's orders and
// examples/pipeline's shipments.
var devTopics = []string{"orders", "shipments"}

// devTables are the tables dev mode creates, and devTableNames their names: orders for the
// demo (an id the database makes up when none is given, for the outbox example of
// docs/records.md) and shipments for examples/pipeline.
var devTables = []string{
	// md5 of random(), not gen_random_uuid(): the local server may be older than PostgreSQL 13.
	`CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY DEFAULT 'o-' || substr(md5(random()::text || clock_timestamp()::text), 1, 12), customer text, total numeric NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS shipments (order_id text NOT NULL, input_partition int NOT NULL, input_offset bigint NOT NULL)`,
}

var devTableNames = []string{"orders", "shipments"}

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
	kafkaPort := fs.Int("kafka-port", devKafkaPort, "the in-process Kafka's port on 127.0.0.1 (0: any free port); the default, when taken, is replaced by a free one")
	topics := fs.String("topics", "", "more topics to create besides "+strings.Join(devTopics, " and ")+", comma-separated (one partition each)")
	help, err := parseFlags(fs, args)
	if help {
		fmt.Fprintln(stderr, "\nRuns the coordinator on a throwaway PostgreSQL (tables orders and shipments) and an in-process")
		fmt.Fprintln(stderr, "Kafka (topics orders and shipments, more with -topics, or create them with any Kafka admin")
		fmt.Fprintln(stderr, "client: it answers CreateTopics), both removed on exit. Client statements run as the role")
		fmt.Fprintln(stderr, "COORDINATOR_STATEMENT_ROLE (default "+devStatementRole+", created with SELECT, INSERT, UPDATE and DELETE")
		fmt.Fprintln(stderr, "on those tables). For development only: no durability, no authentication.")
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
	if cfg.StatementRole == "" {
		cfg.StatementRole = devStatementRole
	}
	opts := devOptions{pgPath: getenv(envDevPostgresPath), kafkaPort: *kafkaPort, topics: devTopics}
	fs.Visit(func(f *flag.Flag) { opts.kafkaPortSet = opts.kafkaPortSet || f.Name == "kafka-port" })
	if opts.kafkaPort < 0 || opts.kafkaPort > 65535 {
		return fail(stderr, usagef("dev: -kafka-port %d: want a port, or 0 for any free one", opts.kafkaPort))
	}
	for _, t := range strings.Split(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" && !slices.Contains(opts.topics, t) {
			opts.topics = append(slices.Clip(opts.topics), t)
		}
	}
	if err := dev(ctx, cfg, opts, logger, stdout); err != nil {
		return fail(stderr, err)
	}
	logger.Info("dev: stopped")
	return exitOK
}

// devOptions are dev mode's own settings.
type devOptions struct {
	pgPath       string // COORDINATOR_DEV_POSTGRES_PATH
	kafkaPort    int    // -kafka-port
	kafkaPortSet bool   // -kafka-port was given: a taken port is an error, not replaced
	topics       []string
}

// dev starts the stack and the service, serves until ctx is done and tears everything down in
// reverse order: HTTP server, service (its Kafka clients), PostgreSQL (and its directory), Kafka.
func dev(ctx context.Context, cfg service.Config, opts devOptions, logger *slog.Logger, stdout io.Writer) (err error) {
	// Listen first: a port in use is reported before anything is started.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("dev: listen on %s (choose another address with -listen): %w", cfg.Listen, err)
	}
	defer ln.Close() // Serve closes it; this is for the early returns
	if host, _, _ := net.SplitHostPort(cfg.Listen); !isLoopback(host) {
		logger.Warn("dev mode listens beyond this machine; the API has no authentication", "listen", cfg.Listen)
	}

	// Kafka next (in-process, quick): a taken port is reported before PostgreSQL starts.
	kafka, err := devstack.StartKafkaOn(ctx, opts.kafkaPort, opts.topics...)
	if errors.Is(err, devstack.ErrPortInUse) && !opts.kafkaPortSet {
		// Another Kafka, or another dev mode, has the usual port: clients must be told the
		// one this run has (the banner prints it).
		logger.Warn(fmt.Sprintf("dev: port %d is taken; the in-process Kafka listens on another one (see the banner; -kafka-port chooses)", opts.kafkaPort))
		kafka, err = devstack.StartKafkaOn(ctx, 0, opts.topics...)
	}
	if errors.Is(err, devstack.ErrPortInUse) {
		return fmt.Errorf("dev: %w (choose another port with -kafka-port, 0 for any free one)", err)
	}
	if err != nil {
		return startupError(ctx, fmt.Errorf("dev: %w", err))
	}
	defer kafka.Stop()

	dir, err := os.MkdirTemp("", "coordinator-dev-")
	if err != nil {
		return fmt.Errorf("dev: temporary directory: %w", err)
	}
	pg, err := devstack.StartPostgres(ctx, devstack.PostgresOptions{Dir: dir, Logger: logger, Path: opts.pgPath})
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

	// An in-process registry of Confluent's API (franz-go's srfake), for avro, protobuf and
	// jsonschema values: register schemas at its URL; it forgets them on exit.
	schemaRegistry := srfake.New()
	defer schemaRegistry.Close()
	if cfg.SchemaRegistry.URL == "" {
		cfg.SchemaRegistry.URL = schemaRegistry.URL()
	}

	if err := createDemoTables(ctx, pg.DSN(), cfg.StatementRole); err != nil {
		return startupError(ctx, err)
	}

	cfg.DatabaseURL = pg.DSN()
	cfg.Brokers = kafka.Brokers()
	svc, err := service.Open(ctx, cfg, logger)
	if err != nil {
		return startupError(ctx, fmt.Errorf("dev: %w", err))
	}
	defer svc.Close()

	printBanner(stdout, devBanner{base: baseURL(ln.Addr(), cfg.APITLS.Enabled()), dsn: pg.DSN(), brokers: kafka.Brokers(),
		topics: opts.topics, role: cfg.StatementRole, schemaRegistry: cfg.SchemaRegistry.URL, dir: dir})

	go func() {
		<-ctx.Done()
		logger.Info("dev: stopping, removing the dev database and Kafka (signal again to force)")
	}()
	return svc.Serve(ctx, ln)
}

// createDemoTables creates the demo tables and the role client statements run as, with the
// rights on those tables and nothing else: a request may read and write their rows, but not
// drop or alter them, nor touch the coordinator's own tables.
func createDemoTables(ctx context.Context, dsn, role string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("dev: connect to the dev database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, stmt := range devTables {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("dev: create the demo tables: %w", err)
		}
	}
	id := pgx.Identifier{role}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1)", role).Scan(&exists); err != nil {
		return fmt.Errorf("dev: look up the statement role: %w", err)
	}
	stmts := []string{
		"GRANT USAGE ON SCHEMA public TO " + id,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + strings.Join(devTableNames, ", ") + " TO " + id,
	}
	if !exists {
		stmts = append([]string{"CREATE ROLE " + id + " NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"}, stmts...)
	}
	for _, stmt := range stmts {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("dev: the statement role %s: %s: %w", role, stmt, err)
		}
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

// devBanner is what the banner tells.
type devBanner struct {
	base, dsn      string
	brokers        []string
	topics         []string
	role           string
	schemaRegistry string
	dir            string
}

func printBanner(w io.Writer, d devBanner) {
	var b strings.Builder
	brokers := strings.Join(d.brokers, ",")
	fmt.Fprintf(&b, "\ncoordinator dev: throwaway PostgreSQL and in-process Kafka; everything is removed on exit\n\n")
	fmt.Fprintf(&b, "  API         %s  (spec: %s/openapi.yaml)\n", d.base, d.base)
	fmt.Fprintf(&b, "  PostgreSQL  %s  (tables %s)\n", d.dsn, strings.Join(devTableNames, ", "))
	fmt.Fprintf(&b, "  Statements  run as role %s: SELECT, INSERT, UPDATE, DELETE on those tables; no DDL, no DO or CALL\n", d.role)
	fmt.Fprintf(&b, "  Kafka       %s  (topics %s; create more with -topics or any Kafka admin client)\n", brokers, strings.Join(d.topics, ", "))
	fmt.Fprintf(&b, "  Registry    %s  (Schema Registry API, in-process: register schemas here)\n", d.schemaRegistry)
	fmt.Fprintf(&b, "  Data        %s\n\n", d.dir)
	fmt.Fprintf(&b, "Insert a row and produce a record, atomically:\n\n")
	fmt.Fprintf(&b, "  curl -s -X POST %s/v1/transactions -H 'Content-Type: application/json' -d '%s'\n\n", d.base, devExampleReq)
	fmt.Fprintf(&b, "Read the transaction back:\n\n")
	fmt.Fprintf(&b, "  curl -s %s/v1/transactions/%s\n\n", d.base, devExampleID)
	if _, err := exec.LookPath("psql"); err == nil {
		fmt.Fprintf(&b, "Look at the row:\n\n  psql '%s' -c 'SELECT * FROM orders'\n\n", d.dsn)
	}
	fmt.Fprintf(&b, "Run the exactly-once pipeline example (orders in, shipments out):\n\n")
	cmd := "go run ./examples/pipeline"
	if d.base != "http://127.0.0.1:8080" {
		cmd += " -coordinator " + d.base
	}
	if brokers != fmt.Sprintf("127.0.0.1:%d", devKafkaPort) {
		cmd += " -brokers " + brokers
	}
	fmt.Fprintf(&b, "  %s\n\n", cmd)
	fmt.Fprintf(&b, "Press Ctrl-C to stop.\n\n")
	_, _ = io.WriteString(w, b.String())
}
