package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kpgtx/coordinator/service"
)

// A setting is one environment variable and, where it has one, the flag that overrides it.
type setting struct {
	env  string
	flag string // "" = environment only
	kind byte   // 's' string, 'i' integer, 'd' duration
	help string
	def  string // the default, for the help text; "" = none
}

const (
	envLogLevel = "COORDINATOR_LOG_LEVEL"
	envConfig   = "COORDINATOR_CONFIG"
)

// settings lists every environment variable the coordinator reads (service.Load, plus the
// log level, which is the command's concern).
var settings = func() []setting {
	d := service.Defaults()
	return []setting{
		{env: envConfig, flag: "config", kind: 's', help: "YAML file of settings: keys are these variables in lower case without COORDINATOR_ (listen, database_url, kafka_brokers, tokens, ...); the environment and flags override it"},
		{env: "DATABASE_URL", flag: "database-url", kind: 's', help: `PostgreSQL: the coordinator log and the "default" database (required by serve)`},
		{env: "COORDINATOR_DATABASES", kind: 's', help: `more databases for statements, "name=dsn;name2=dsn2"`},
		{env: "KAFKA_BROKERS", flag: "kafka-brokers", kind: 's', help: "comma-separated seed brokers; empty: SQL only"},
		{env: "KAFKA_TRANSACTIONAL_ID_PREFIX", flag: "kafka-transactional-id-prefix", kind: 's', help: "prefix of the Kafka transactional ids", def: d.TxnIDPrefix},
		{env: "KAFKA_POOL_SIZE", flag: "pool-size", kind: 'i', help: "transactional ids, i.e. concurrent Kafka transactions", def: strconv.Itoa(d.PoolSize)},
		{env: "KAFKA_TRANSACTION_TIMEOUT", flag: "kafka-transaction-timeout", kind: 'd', help: "the producer's transaction.timeout.ms, as a duration", def: d.KafkaTxnTimeout.String()},
		{env: "COORDINATOR_LISTEN", flag: "listen", kind: 's', help: "HTTP address to listen on", def: d.Listen},
		{env: "COORDINATOR_INSTANCE", flag: "instance", kind: 's', help: "stable id of this instance; keep it across restarts", def: "the host name"},
		{env: "COORDINATOR_GID_PREFIX", flag: "gid-prefix", kind: 's', help: "prefix of the PostgreSQL prepared-transaction ids (letters, digits)", def: d.GIDPrefix},
		{env: "COORDINATOR_DEFAULT_TIMEOUT", flag: "default-timeout", kind: 'd', help: "time budget of a request without timeout_ms", def: d.DefaultTimeout.String()},
		{env: "COORDINATOR_MAX_TIMEOUT", flag: "max-timeout", kind: 'd', help: "largest timeout_ms accepted; below KAFKA_TRANSACTION_TIMEOUT", def: d.MaxTimeout.String()},
		{env: "COORDINATOR_MAX_BODY_BYTES", kind: 'i', help: "largest request body", def: strconv.FormatInt(d.MaxBodyBytes, 10)},
		{env: "COORDINATOR_MAX_STATEMENTS", kind: 'i', help: "most SQL statements in one transaction", def: strconv.Itoa(d.MaxStatements)},
		{env: "COORDINATOR_MAX_RECORDS", kind: 'i', help: "most Kafka records in one transaction", def: strconv.Itoa(d.MaxRecords)},
		{env: "COORDINATOR_MAX_IN_FLIGHT", kind: 'i', help: "requests served at once; more are answered 429 with Retry-After", def: strconv.Itoa(d.MaxInFlight)},
		{env: "COORDINATOR_MAX_BODY_MEMORY", kind: 'i', help: "bytes all request bodies being read may hold together (each counts its Content-Length, or COORDINATOR_MAX_BODY_BYTES); more is answered 429", def: strconv.FormatInt(d.MaxBodyMemory, 10)},
		{env: "COORDINATOR_READ_HEADER_TIMEOUT", kind: 'd', help: "a client must send a request's headers within this; slower connections are closed", def: d.ReadHeaderTimeout.String()},
		{env: "COORDINATOR_READ_TIMEOUT", kind: 'd', help: "a client must send the whole request, body included, within this", def: d.ReadTimeout.String()},
		{env: "COORDINATOR_WRITE_TIMEOUT", kind: 'd', help: "bound from a request's headers to its answer written; must exceed COORDINATOR_MAX_TIMEOUT, and cover phase 2 (up to 30s) after it", def: "COORDINATOR_MAX_TIMEOUT + 1m"},
		{env: "COORDINATOR_IDLE_TIMEOUT", kind: 'd', help: "a keep-alive connection without a request is closed after this", def: d.IdleTimeout.String()},
		{env: "COORDINATOR_DB_MAX_CONNS", kind: 'i', help: "connections per database pool", def: strconv.Itoa(int(d.MaxConns))},
		{env: "COORDINATOR_STATEMENT_ROLE", kind: 's', help: "role client statements run as (SET LOCAL ROLE per transaction), without rights on the coordinator's tables; DO and CALL are then refused", def: "the login's own role"},
		{env: "COORDINATOR_RECOVERY_INTERVAL", kind: 'd', help: "period of the recovery loop (and of the instance heartbeat)", def: d.RecoveryInterval.String()},
		{env: "COORDINATOR_INSTANCE_LEASE", kind: 'd', help: "an instance silent this long, whose lock is free, is taken over", def: d.InstanceLease.String()},
		{env: "COORDINATOR_CLAIM_WAIT", kind: 'd', help: "how long startup waits for this instance's lock before refusing", def: d.ClaimWait.String()},
		{env: "COORDINATOR_FINISH_TIMEOUT", kind: 'd', help: "bound of phase 2 and the final log write after the caller's budget; with COORDINATOR_MAX_TIMEOUT, how long a takeover leaves a younger active transaction alone", def: d.FinishTimeout.String()},
		{env: "COORDINATOR_MARKER_AGE", kind: 'd', help: "marker rows of transactions whose final state is durable are deleted once this old", def: d.MarkerAge.String()},
		{env: "COORDINATOR_SHUTDOWN_TIMEOUT", flag: "shutdown-timeout", kind: 'd', help: "on SIGTERM/SIGINT, requests in flight finish within this bound; then the process exits and recovery resolves what was left", def: d.ShutdownTimeout.String()},
		{env: "COORDINATOR_FAULT", kind: 's', help: "TEST ONLY: kill the process (SIGKILL) when a transaction reaches this step: after_sql_work, after_prepare, after_kafka_flush, after_log_prepared, after_endtxn, after_commit_prepared, before_final_log"},
		{env: envLogLevel, flag: "log-level", kind: 's', help: "debug, info, warn or error", def: "info"},
		{env: "COORDINATOR_TOKENS", kind: 's', help: `API bearer tokens: "name:role[,role]:token" entries separated by ";"; roles submit, read, admin; none: no authentication`},
		{env: "COORDINATOR_ALLOW_INSECURE", kind: 's', help: "true: serve a non-loopback COORDINATOR_LISTEN without tokens (refused otherwise)", def: "false"},
		{env: "COORDINATOR_TLS_CERT_FILE", kind: 's', help: "PEM certificate (chain) of the API: it then serves HTTPS; reloaded without a restart when the file changes (checked every 2s at most)"},
		{env: "COORDINATOR_TLS_KEY_FILE", kind: 's', help: "PEM private key of COORDINATOR_TLS_CERT_FILE (reloaded with it)"},
		{env: "COORDINATOR_TLS_CLIENT_CA_FILE", kind: 's', help: "PEM CAs of client certificates: every API client must then show one they signed (mutual TLS)"},
		{env: "COORDINATOR_ALLOW_PLAINTEXT", kind: 's', help: "true: serve a non-loopback COORDINATOR_LISTEN over plain HTTP, without COORDINATOR_TLS_CERT_FILE (refused otherwise; e.g. behind a proxy that terminates TLS)", def: "false"},
		{env: "COORDINATOR_STATEMENTS", kind: 's', help: `allowlist of named SQL statements, a JSON object {"name": "SQL", ...}; when set, requests refer to statements by "name" and SQL text is refused`},
		{env: "COORDINATOR_TOPICS", kind: 's', help: `allowlist of topics, comma-separated ("prefix*" matches a prefix); when set, records to other topics are refused`},
		{env: "KAFKA_TLS", kind: 's', help: "true: connect to Kafka with TLS", def: "false"},
		{env: "KAFKA_TLS_CA_FILE", kind: 's', help: "PEM file of the CAs of the brokers' certificates", def: "the system's roots"},
		{env: "KAFKA_TLS_CERT_FILE", kind: 's', help: "PEM client certificate for Kafka (mutual TLS), with KAFKA_TLS_KEY_FILE"},
		{env: "KAFKA_TLS_KEY_FILE", kind: 's', help: "PEM private key of KAFKA_TLS_CERT_FILE"},
		{env: "KAFKA_TLS_INSECURE_SKIP_VERIFY", kind: 's', help: "true: do not verify the brokers' certificates (tests only)", def: "false"},
		{env: "KAFKA_SASL_MECHANISM", kind: 's', help: "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty: no SASL"},
		{env: "KAFKA_SASL_USER", kind: 's', help: "Kafka SASL user"},
		{env: "KAFKA_SASL_PASSWORD", kind: 's', help: "Kafka SASL password (never logged)"},
		{env: "COORDINATOR_OTLP_ENDPOINT", kind: 's', help: "OTLP/HTTP collector for OpenTelemetry traces, http(s)://host:port (a base URL: /v1/traces is appended); the standard OTEL_* variables (headers, sampler, resource) apply; empty: no traces"},
	}
}()

func printEnv(w io.Writer) {
	for _, s := range settings {
		line := fmt.Sprintf("  %-30s %s", s.env, s.help)
		if s.def != "" {
			line += " (default " + s.def + ")"
		}
		fmt.Fprintln(w, line)
	}
}

// defineFlags defines on fs the flags of the settings named (by flag name), all with zero
// defaults, so that only flags given on the command line override the environment.
func defineFlags(fs *flag.FlagSet, names ...string) {
	for _, name := range names {
		s, ok := settingOf(name)
		if !ok {
			panic("coordinator: no setting for flag " + name)
		}
		help := s.help + " (env " + s.env
		if s.def != "" {
			help += ", default " + s.def
		}
		help += ")"
		switch s.kind {
		case 'i':
			fs.Int(s.flag, 0, help)
		case 'd':
			fs.Duration(s.flag, 0, help)
		default:
			fs.String(s.flag, "", help)
		}
	}
}

func settingOf(flagName string) (setting, bool) {
	for _, s := range settings {
		if s.flag == flagName && flagName != "" {
			return s, true
		}
	}
	return setting{}, false
}

// overlay returns getenv with the flags given on fs in front of it: a flag reads as its
// environment variable. An empty flag value reads as unset.
func overlay(fs *flag.FlagSet, getenv func(string) string) func(string) string {
	given := map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		if s, ok := settingOf(f.Name); ok {
			given[s.env] = f.Value.String()
		}
	})
	return func(key string) string {
		if v, ok := given[key]; ok {
			return v
		}
		return getenv(key)
	}
}

// without returns getenv with the keys unset.
func without(getenv func(string) string, keys ...string) func(string) string {
	return func(key string) string {
		for _, k := range keys {
			if k == key {
				return ""
			}
		}
		return getenv(key)
	}
}

// parseFlags parses args. -h prints the command's usage (to the FlagSet's usage writer) and
// reports help; a bad flag is a usage error of one line.
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) { // Parse has printed the usage
		return true, nil
	}
	if err != nil {
		return false, usagef("%s: %v (see coordinator %s -h)", fs.Name(), err, fs.Name())
	}
	return false, nil
}

// newFlagSet returns a FlagSet that reports errors through parseFlags instead of printing or
// exiting; its Usage prints the synopsis and the flags to out.
func newFlagSet(name, synopsis string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: coordinator %s\n\nFlags:\n", synopsis)
		fs.SetOutput(out)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// logLevel reads COORDINATOR_LOG_LEVEL (or -log-level).
func logLevel(getenv func(string) string) (slog.Level, error) {
	var l slog.Level
	v := getenv(envLogLevel)
	if v == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return l, usagef("log level %q (-log-level, %s): want debug, info, warn or error", v, envLogLevel)
	}
	return l, nil
}

// describeDSN names the server and database of a DSN without its password (or user).
func describeDSN(dsn string) string {
	c, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "(unparseable)"
	}
	host := c.Host
	if strings.HasPrefix(host, "/") { // Unix socket directory
		return fmt.Sprintf("%s/.s.PGSQL.%d/%s", host, c.Port, c.Database)
	}
	return fmt.Sprintf("%s:%d/%s", host, c.Port, c.Database)
}

// describeConfig is what the startup log says about the configuration: no secrets.
func describeConfig(cfg service.Config) []any {
	names := append([]string{}, slices.Sorted(maps.Keys(cfg.Databases))...)
	brokers := strings.Join(cfg.Brokers, ",")
	if brokers == "" {
		brokers = "(none: SQL only)"
	}
	return []any{
		"instance", cfg.Instance,
		"listen", cfg.Listen,
		"database", describeDSN(cfg.DatabaseURL),
		"databases", names,
		"kafka_brokers", brokers,
		"pool_size", cfg.PoolSize,
		"kafka_transaction_timeout", cfg.KafkaTxnTimeout.String(),
		"gid_prefix", cfg.GIDPrefix,
		"transactional_id_prefix", cfg.TxnIDPrefix,
		"max_timeout", cfg.MaxTimeout.String(),
		"shutdown_timeout", cfg.ShutdownTimeout.String(),
		"tokens", tokenNames(cfg),
		"tls", cfg.APITLS.Enabled(),
		"tls_client_ca", cfg.APITLS.ClientCAFile != "",
		"statements", slices.Sorted(maps.Keys(cfg.Statements)),
		"topics", cfg.Topics,
		"kafka_tls", cfg.KafkaTLS.Enabled,
		"kafka_sasl_mechanism", cfg.KafkaSASL.Mechanism,
	}
}

// tokenNames lists the API tokens as name:roles (never the secrets); "(none: no
// authentication)" without tokens.
func tokenNames(cfg service.Config) []string {
	if len(cfg.Tokens) == 0 {
		return []string{"(none: no authentication)"}
	}
	names := make([]string, len(cfg.Tokens))
	for i, t := range cfg.Tokens {
		names[i] = t.String()
	}
	return names
}

// withConfigFile puts the YAML file that COORDINATOR_CONFIG (or -config) names under env:
// flags > environment > file > defaults. The file may set every setting but itself. blame
// adds to an error about the settings which of the variables it names the file set.
func withConfigFile(env func(string) string) (layered func(string) string, blame func(error) error, err error) {
	blame = func(err error) error { return err }
	path := env(envConfig)
	if path == "" {
		return env, blame, nil
	}
	var known []string
	for _, s := range settings {
		if s.env != envConfig {
			known = append(known, s.env)
		}
	}
	file, err := service.ReadFile(path, known)
	if err != nil {
		return nil, nil, err
	}
	blame = func(err error) error {
		var keys []string
		for _, key := range slices.Sorted(maps.Keys(file)) {
			// Whole words: KAFKA_TLS is not KAFKA_TLS_CA_FILE.
			if env(key) == "" && regexp.MustCompile(`\b`+key+`\b`).MatchString(err.Error()) {
				keys = append(keys, service.FileKey(key))
			}
		}
		if len(keys) == 0 {
			return err
		}
		return fmt.Errorf("%w (set in %s as %s)", err, path, strings.Join(keys, ", "))
	}
	return service.Layer(env, file), blame, nil
}
