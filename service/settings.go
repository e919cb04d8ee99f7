package service

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kpgtx/coordinator/api"
)

// Setting defines one setting, once. Everything that lists settings is derived from Settings:
// the environment (Load), the YAML file's keys (FileKey, ReadFile), the command's flags and its
// help table (cmd/coordinator), the configuration's log form (Config.LogValue, with secrets
// redacted), and — checked by a test — docs/configuration.md's table.
type Setting struct {
	Env  string // the environment variable; its file key is FileKey(Env)
	Flag string // the command-line flag overriding it ("" = none)
	Kind Kind
	// Help says what it does, in one line; `code` marks names and values (docs/configuration.md keeps the
	// backticks, the command's help drops them).
	Help string
	// DefaultText describes the default when it is not a value of Defaults() ("the host name").
	DefaultText string
	// Secret: the value never appears in logs (only whether it is set).
	Secret bool
	// Sep separates a list's items in the variable's text (KindList).
	Sep string
	// Field names the Config field it sets ("KafkaTLS.CAFile"); "" for the command's own
	// settings (the log level, the configuration file), which Config does not hold.
	Field string

	set     func(c *Config, v string) error           // parses the variable's text into c
	get     func(c Config) any                        // the value, for the log and the default
	log     func(c Config) any                        // overrides get for the log (redaction, summaries)
	fromMap func(m map[string]string) (string, error) // a YAML mapping as the variable's text (KindMap)
}

// Kind is a setting's type, which chooses its flag type and how a YAML value is read.
type Kind int

// Kinds of settings.
const (
	KindString Kind = iota
	KindInt
	KindDuration
	KindBool
	KindList // Sep-separated; a YAML list
	KindMap  // a YAML mapping (fromMap gives its text form)
)

// Command settings: read by the command itself, not held in Config.
const (
	EnvConfig   = "COORDINATOR_CONFIG"
	EnvLogLevel = "COORDINATOR_LOG_LEVEL"
)

// FileKey is a setting's key in the YAML file: its variable's name in lower case, without the
// COORDINATOR_ prefix (COORDINATOR_LISTEN → listen, KAFKA_BROKERS → kafka_brokers).
func FileKey(env string) string {
	return strings.ToLower(strings.TrimPrefix(env, "COORDINATOR_"))
}

// Default is the setting's default as text ("" = none): DefaultText, or its value in
// Defaults().
func (s Setting) Default() string {
	if s.DefaultText != "" || s.get == nil {
		return s.DefaultText
	}
	return formatValue(s.get(Defaults()))
}

// LookupSetting returns the setting of a variable.
func LookupSetting(env string) (Setting, bool) {
	for _, s := range Settings {
		if s.Env == env {
			return s, true
		}
	}
	return Setting{}, false
}

// LookupFlag returns the setting of a flag.
func LookupFlag(flag string) (Setting, bool) {
	for _, s := range Settings {
		if s.Flag == flag && flag != "" {
			return s, true
		}
	}
	return Setting{}, false
}

// formatValue writes a value as the variable's text would give it (durations without a
// trailing "0s": 1m, not 1m0s).
func formatValue(v any) string {
	switch x := v.(type) {
	case time.Duration:
		if x == 0 {
			return ""
		}
		s := x.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case int, int32, int64:
		return fmt.Sprint(x)
	}
	return ""
}

// Setting constructors: one per type, each with the parser and its error message.

func strSetting(env, flag, field, help string, p func(*Config) *string) Setting {
	return Setting{Env: env, Flag: flag, Kind: KindString, Field: field, Help: help,
		set: func(c *Config, v string) error { *p(c) = v; return nil },
		get: func(c Config) any { return *p(&c) }}
}

// intSetting parses an integer. keepZero: 0 leaves the default (kept from before the table).
func intSetting[T int | int32 | int64](env, flag, field, help string, keepZero bool, p func(*Config) *T) Setting {
	return Setting{Env: env, Flag: flag, Kind: KindInt, Field: field, Help: help,
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%s=%q: not an integer", env, v)
			}
			if n != 0 || !keepZero {
				*p(c) = T(n)
			}
			return nil
		},
		get: func(c Config) any { return *p(&c) }}
}

func durSetting(env, flag, field, help string, p func(*Config) *time.Duration) Setting {
	return Setting{Env: env, Flag: flag, Kind: KindDuration, Field: field, Help: help,
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%s=%q: not a duration (like 30s)", env, v)
			}
			*p(c) = d
			return nil
		},
		get: func(c Config) any { return *p(&c) }}
}

func boolSetting(env, field, help string, p func(*Config) *bool) Setting {
	return Setting{Env: env, Kind: KindBool, Field: field, Help: help,
		set: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%s=%q: true or false", env, v)
			}
			*p(c) = b
			return nil
		},
		get: func(c Config) any { return *p(&c) }}
}

func listSetting(env, flag, field, sep, help string, p func(*Config) *[]string) Setting {
	return Setting{Env: env, Flag: flag, Kind: KindList, Sep: sep, Field: field, Help: help,
		set: func(c *Config, v string) error { *p(c) = splitList(v, sep); return nil },
		get: func(c Config) any { return *p(&c) }}
}

// with returns s changed by f (for the few settings that need more than their constructor).
func (s Setting) with(f func(*Setting)) Setting { f(&s); return s }

// Settings is every setting, in the order of `coordinator help` and docs/configuration.md's table.
var Settings = []Setting{
	strSetting("DATABASE_URL", "database-url", "DatabaseURL",
		"PostgreSQL: the coordinator log and the `default` database (required by serve)",
		func(c *Config) *string { return &c.DatabaseURL }).with(func(s *Setting) {
		s.log = func(c Config) any { return RedactDSN(c.DatabaseURL) }
	}),
	{Env: "COORDINATOR_DATABASES", Kind: KindMap, Field: "Databases",
		Help: "more databases for statements: `name=dsn;name2=dsn2`",
		set: func(c *Config, v string) error {
			dbs, err := ParseDatabases(v)
			c.Databases = dbs
			return err
		},
		get: func(c Config) any { return c.Databases },
		log: func(c Config) any {
			dbs := map[string]string{}
			for name, dsn := range c.Databases {
				dbs[name] = RedactDSN(dsn)
			}
			return dbs
		},
		fromMap: func(m map[string]string) (string, error) {
			var parts []string
			for _, name := range slices.Sorted(maps.Keys(m)) {
				if strings.Contains(m[name], ";") {
					return "", fmt.Errorf("COORDINATOR_DATABASES: the DSN of %q contains \";\"", name)
				}
				parts = append(parts, name+"="+m[name])
			}
			return strings.Join(parts, ";"), nil
		}},
	listSetting("KAFKA_BROKERS", "kafka-brokers", "Brokers", ",", "comma-separated seed brokers; empty: SQL only",
		func(c *Config) *[]string { return &c.Brokers }).with(func(s *Setting) {
		s.log = func(c Config) any {
			if len(c.Brokers) == 0 {
				return "(none: SQL only)"
			}
			return strings.Join(c.Brokers, ",")
		}
	}),
	strSetting("COORDINATOR_LISTEN", "listen", "Listen", "HTTP address to listen on",
		func(c *Config) *string { return &c.Listen }),
	strSetting("COORDINATOR_PPROF_LISTEN", "pprof-listen", "PprofListen",
		"loopback address serving Go's profiler (`/debug/pprof/`); empty: off",
		func(c *Config) *string { return &c.PprofListen }),
	strSetting("COORDINATOR_INSTANCE", "instance", "Instance",
		"stable id of this instance; keep it across restarts, unique per live process",
		func(c *Config) *string { return &c.Instance }).with(func(s *Setting) { s.DefaultText = "the host name" }),
	strSetting("COORDINATOR_GID_PREFIX", "gid-prefix", "GIDPrefix",
		"prefix of the PostgreSQL prepared-transaction ids (letters, digits): the log's namespace, claimed in every database at startup (`kpgtx.namespaces`); another log with the same prefix is refused",
		func(c *Config) *string { return &c.GIDPrefix }),
	strSetting("KAFKA_TRANSACTIONAL_ID_PREFIX", "kafka-transactional-id-prefix", "TxnIDPrefix",
		"prefix of the Kafka transactional ids: they are `<prefix>-<instance>-<n>`",
		func(c *Config) *string { return &c.TxnIDPrefix }),
	intSetting("KAFKA_POOL_SIZE", "pool-size", "PoolSize", "transactional ids = concurrent Kafka transactions", false,
		func(c *Config) *int { return &c.PoolSize }),
	intSetting("COORDINATOR_MAX_WAITING", "max-waiting", "MaxWaiting",
		"most transactions of this instance waiting for their caller's commit or rollback (`\"decision\": \"external\"`) at once; a request over it is a 503 with nothing run. Below `KAFKA_POOL_SIZE`: each holds a transactional id until decided",
		false, func(c *Config) *int { return &c.MaxWaiting }).with(func(s *Setting) { s.DefaultText = "a quarter of `KAFKA_POOL_SIZE`, at least 1" }),
	intSetting("KAFKA_SHARED_MAX", "shared-max", "SharedMax",
		"most requests sharing one Kafka transaction (one EndTxn) when several are in flight; `1`: every request has its own",
		false, func(c *Config) *int { return &c.SharedMax }),
	boolSetting("COORDINATOR_SHARED_SQL", "SharedSQL",
		"`true`: requests that share a Kafka transaction and write to one database with plain queries and data changes also share one PostgreSQL transaction there (a savepoint each, one PREPARE); `false`: each has its own",
		func(c *Config) *bool { return &c.SharedSQL }),
	boolSetting("COORDINATOR_DEFER_ROWS", "DeferRows",
		"`true`: a request that joins a shared PostgreSQL transaction while every slot is taken logs no row of its own before the batch's prepared write, which inserts it (S8; fewer log writes under load, and no row while it runs); `false`: it logs its row first",
		func(c *Config) *bool { return &c.DeferRows }),
	intSetting("KAFKA_SHARED_CONCURRENCY", "shared-concurrency", "SharedConcurrency",
		"shared Kafka transactions running at once (at most `KAFKA_POOL_SIZE`); requests prepared meanwhile gather into the next one",
		false, func(c *Config) *int { return &c.SharedConcurrency }),
	durSetting("KAFKA_TRANSACTION_TIMEOUT", "kafka-transaction-timeout", "KafkaTxnTimeout",
		"the producer's `transaction.timeout.ms`, as a duration; checked against the broker's `transaction.max.timeout.ms` at startup",
		func(c *Config) *time.Duration { return &c.KafkaTxnTimeout }),
	durSetting("COORDINATOR_DEFAULT_TIMEOUT", "default-timeout", "DefaultTimeout", "time budget of a request without `timeout_ms`",
		func(c *Config) *time.Duration { return &c.DefaultTimeout }),
	durSetting("COORDINATOR_MAX_TIMEOUT", "max-timeout", "MaxTimeout",
		"largest `timeout_ms` accepted; must stay below `KAFKA_TRANSACTION_TIMEOUT`",
		func(c *Config) *time.Duration { return &c.MaxTimeout }),
	intSetting("COORDINATOR_MAX_BODY_BYTES", "", "MaxBodyBytes", "largest request body; larger bodies get 413", true,
		func(c *Config) *int64 { return &c.MaxBodyBytes }),
	intSetting("COORDINATOR_MAX_BODY_MEMORY", "", "MaxBodyMemory",
		"bytes all request bodies being read may hold together (each counts its `Content-Length`, or `COORDINATOR_MAX_BODY_BYTES`); beyond it 429 with `Retry-After`", true,
		func(c *Config) *int64 { return &c.MaxBodyMemory }),
	intSetting("COORDINATOR_MAX_IN_FLIGHT", "", "MaxInFlight",
		"requests served at once; beyond it 429 with `Retry-After` (`/healthz`, `/readyz`, `/metrics` exempt)", false,
		func(c *Config) *int { return &c.MaxInFlight }),
	durSetting("COORDINATOR_READ_HEADER_TIMEOUT", "", "ReadHeaderTimeout",
		"a client must send a request's headers within this, or the connection is closed",
		func(c *Config) *time.Duration { return &c.ReadHeaderTimeout }),
	durSetting("COORDINATOR_READ_TIMEOUT", "", "ReadTimeout", "a client must send the whole request, body included, within this",
		func(c *Config) *time.Duration { return &c.ReadTimeout }),
	durSetting("COORDINATOR_WRITE_TIMEOUT", "", "WriteTimeout",
		"from a request's headers to its answer written; must exceed `COORDINATOR_MAX_TIMEOUT` (phase 2 may run up to 30 s after the budget)",
		func(c *Config) *time.Duration { return &c.WriteTimeout }).with(func(s *Setting) {
		s.DefaultText = "`COORDINATOR_MAX_TIMEOUT` + 1m"
		s.log = func(c Config) any { return c.HTTPWriteTimeout() }
	}),
	durSetting("COORDINATOR_IDLE_TIMEOUT", "", "IdleTimeout", "a keep-alive connection without a request is closed after this",
		func(c *Config) *time.Duration { return &c.IdleTimeout }),
	intSetting("COORDINATOR_MAX_STATEMENTS", "", "MaxStatements", "most SQL statements in one request", false,
		func(c *Config) *int { return &c.MaxStatements }),
	intSetting("COORDINATOR_MAX_RECORDS", "", "MaxRecords", "most Kafka records in one request", false,
		func(c *Config) *int { return &c.MaxRecords }),
	intSetting("COORDINATOR_DB_MAX_CONNS", "", "MaxConns", "connections per database pool", true,
		func(c *Config) *int32 { return &c.MaxConns }),
	strSetting("COORDINATOR_STATEMENT_ROLE", "", "StatementRole",
		"role client statements run as (`SET LOCAL ROLE` per transaction), without rights on the coordinator's tables; `DO` and `CALL` are then refused; see docs/sql.md",
		func(c *Config) *string { return &c.StatementRole }).with(func(s *Setting) { s.DefaultText = "the login's own role" }),
	durSetting("COORDINATOR_RECOVERY_INTERVAL", "", "RecoveryInterval", "period of the recovery loop (and of the instance heartbeat)",
		func(c *Config) *time.Duration { return &c.RecoveryInterval }),
	durSetting("COORDINATOR_INSTANCE_LEASE", "", "InstanceLease", "an instance silent this long, whose lock is free, is taken over",
		func(c *Config) *time.Duration { return &c.InstanceLease }),
	durSetting("COORDINATOR_CLAIM_WAIT", "", "ClaimWait", "how long startup waits for this instance's lock before refusing",
		func(c *Config) *time.Duration { return &c.ClaimWait }),
	durSetting("COORDINATOR_FINISH_TIMEOUT", "", "FinishTimeout",
		"bound of phase 2 and the final log write after the caller's budget; a takeover leaves active transactions younger than this plus `COORDINATOR_MAX_TIMEOUT` alone",
		func(c *Config) *time.Duration { return &c.FinishTimeout }),
	durSetting("COORDINATOR_MARKER_AGE", "", "MarkerAge", "marker rows of transactions whose final state is durable are deleted once this old",
		func(c *Config) *time.Duration { return &c.MarkerAge }),
	durSetting("COORDINATOR_RETENTION", "", "Retention",
		"committed and aborted transactions are removed from the log, with their events, once their last change is this old (in the background, in batches); a request reusing a removed id is a new transaction; `0`: keep everything; refused below its floor, twice the sum of the retry window and the delays the coordinator relies on (docs/design.md R4)",
		func(c *Config) *time.Duration { return &c.Retention }),
	durSetting("COORDINATOR_RETENTION_INTERVAL", "", "RetentionInterval", "period of the retention's passes",
		func(c *Config) *time.Duration { return &c.RetentionInterval }),
	durSetting("COORDINATOR_RETRY_WINDOW", "", "RetryWindow",
		"how long clients may send the same request id again and get its outcome (the Go client and the pipeline helper stop retrying after `client.DefaultRetryWindow`, the same hour); the retention is never shorter than twice this plus the coordinator's own delays",
		func(c *Config) *time.Duration { return &c.RetryWindow }),
	durSetting("COORDINATOR_SHUTDOWN_TIMEOUT", "shutdown-timeout", "ShutdownTimeout",
		"on SIGTERM/SIGINT, requests in flight finish within this bound; then the process exits and recovery resolves what was left",
		func(c *Config) *time.Duration { return &c.ShutdownTimeout }),
	{Env: EnvLogLevel, Flag: "log-level", Kind: KindString, DefaultText: "info",
		Help: "`debug`, `info`, `warn` or `error`"},
	{Env: EnvConfig, Flag: "config", Kind: KindString,
		Help: "YAML file of these settings: keys are the variables in lower case without `COORDINATOR_` (`listen`, `database_url`, `kafka_brokers`, `tokens`, ...); unknown keys are refused; the environment and flags override it"},
	{Env: "COORDINATOR_TOKENS", Kind: KindList, Sep: ";", Field: "Tokens", Secret: true,
		Help: "API bearer tokens: `name:role[,role]:token` entries separated by `;`; roles `submit`, `read`, `admin`; tokens ≥ 16 characters; none: no authentication",
		set: func(c *Config, v string) error {
			tokens, err := api.ParseTokens(v)
			c.Tokens = tokens
			return err
		},
		log: func(c Config) any {
			if len(c.Tokens) == 0 {
				return []string{"(none: no authentication)"}
			}
			names := make([]string, len(c.Tokens))
			for i, t := range c.Tokens {
				names[i] = t.String() // name:roles, never the secret
			}
			return names
		}},
	boolSetting("COORDINATOR_ALLOW_INSECURE", "AllowInsecure",
		"`true`: serve a non-loopback `COORDINATOR_LISTEN` without tokens (refused otherwise)",
		func(c *Config) *bool { return &c.AllowInsecure }),
	strSetting("COORDINATOR_TLS_CERT_FILE", "", "APITLS.CertFile",
		"PEM certificate (chain) of the API: it then serves HTTPS; reloaded without a restart when the file changes (checked every 2 s at most, on a handshake)",
		func(c *Config) *string { return &c.APITLS.CertFile }),
	strSetting("COORDINATOR_TLS_KEY_FILE", "", "APITLS.KeyFile", "PEM private key of `COORDINATOR_TLS_CERT_FILE` (reloaded with it)",
		func(c *Config) *string { return &c.APITLS.KeyFile }),
	strSetting("COORDINATOR_TLS_CLIENT_CA_FILE", "", "APITLS.ClientCAFile",
		"PEM CAs of client certificates: every API client must then show one they signed (mutual TLS)",
		func(c *Config) *string { return &c.APITLS.ClientCAFile }),
	boolSetting("COORDINATOR_ALLOW_PLAINTEXT", "AllowPlaintext",
		"`true`: serve a non-loopback `COORDINATOR_LISTEN` over plain HTTP, without `COORDINATOR_TLS_CERT_FILE` (refused otherwise; e.g. behind a proxy that terminates TLS)",
		func(c *Config) *bool { return &c.AllowPlaintext }),
	{Env: "COORDINATOR_STATEMENTS", Kind: KindMap, Field: "Statements",
		Help: "allowlist of named SQL statements, a JSON object `{\"name\": \"SQL\", ...}`; requests then send `{\"name\":…,\"args\":[…]}` and SQL text is refused",
		set: func(c *Config, v string) error {
			var m map[string]string
			if err := json.Unmarshal([]byte(v), &m); err != nil || m == nil {
				return fmt.Errorf(`COORDINATOR_STATEMENTS: not a JSON object of statement names to SQL text, like {"insert_order": "INSERT INTO orders(id) VALUES ($1)"}: %v`, err)
			}
			c.Statements = m
			return nil
		},
		get: func(c Config) any { return c.Statements },
		log: func(c Config) any { return slices.Sorted(maps.Keys(c.Statements)) },
		fromMap: func(m map[string]string) (string, error) {
			b, err := json.Marshal(m)
			return string(b), err
		}},
	listSetting("COORDINATOR_TOPICS", "", "Topics", ",",
		"allowlist of topics, comma-separated (`prefix*` matches a prefix); records to other topics are then refused",
		func(c *Config) *[]string { return &c.Topics }),
	boolSetting("KAFKA_TLS", "KafkaTLS.Enabled", "`true`: connect to Kafka with TLS",
		func(c *Config) *bool { return &c.KafkaTLS.Enabled }),
	strSetting("KAFKA_TLS_CA_FILE", "", "KafkaTLS.CAFile", "PEM file of the CAs of the brokers' certificates",
		func(c *Config) *string { return &c.KafkaTLS.CAFile }).with(func(s *Setting) { s.DefaultText = "the system's roots" }),
	strSetting("KAFKA_TLS_CERT_FILE", "", "KafkaTLS.CertFile", "PEM client certificate for Kafka (mutual TLS), with `KAFKA_TLS_KEY_FILE`",
		func(c *Config) *string { return &c.KafkaTLS.CertFile }),
	strSetting("KAFKA_TLS_KEY_FILE", "", "KafkaTLS.KeyFile", "PEM private key of `KAFKA_TLS_CERT_FILE`",
		func(c *Config) *string { return &c.KafkaTLS.KeyFile }),
	boolSetting("KAFKA_TLS_INSECURE_SKIP_VERIFY", "KafkaTLS.InsecureSkipVerify",
		"`true`: do not verify the brokers' certificates (tests only)",
		func(c *Config) *bool { return &c.KafkaTLS.InsecureSkipVerify }),
	strSetting("KAFKA_SASL_MECHANISM", "", "KafkaSASL.Mechanism", "`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`; empty: no SASL",
		func(c *Config) *string { return &c.KafkaSASL.Mechanism }).with(func(s *Setting) {
		s.set = func(c *Config, v string) error {
			c.KafkaSASL.Mechanism = strings.ToUpper(strings.TrimSpace(v))
			return nil
		}
	}),
	strSetting("KAFKA_SASL_USER", "", "KafkaSASL.User", "Kafka SASL user",
		func(c *Config) *string { return &c.KafkaSASL.User }),
	{Env: "KAFKA_SASL_PASSWORD", Kind: KindString, Field: "KafkaSASL.Password", Secret: true,
		Help: "Kafka SASL password (never logged)",
		set:  func(c *Config, v string) error { c.KafkaSASL.Password = api.Secret(v); return nil },
		get:  func(c Config) any { return c.KafkaSASL.Password.Reveal() }},
	strSetting("COORDINATOR_SCHEMA_REGISTRY_URL", "", "SchemaRegistry.URL",
		"Schema Registry (Confluent's API; Apicurio serves it at `/apis/ccompat/v7`) that `avro`, `protobuf` and `jsonschema` record keys and values are encoded against; empty: those types are refused (docs/records.md)",
		func(c *Config) *string { return &c.SchemaRegistry.URL }),
	strSetting("COORDINATOR_SCHEMA_REGISTRY_USER", "", "SchemaRegistry.User", "Schema Registry user (HTTP basic authentication)",
		func(c *Config) *string { return &c.SchemaRegistry.User }),
	{Env: "COORDINATOR_SCHEMA_REGISTRY_PASSWORD", Kind: KindString, Field: "SchemaRegistry.Password", Secret: true,
		Help: "Schema Registry password (never logged)",
		set:  func(c *Config, v string) error { c.SchemaRegistry.Password = api.Secret(v); return nil },
		get:  func(c Config) any { return c.SchemaRegistry.Password.Reveal() }},
	strSetting("COORDINATOR_OTLP_ENDPOINT", "", "OTLPEndpoint",
		"OTLP/HTTP collector for OpenTelemetry traces, e.g. `http://localhost:4318` (a base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT`: `/v1/traces` is appended); the SDK's `OTEL_*` variables (headers, timeout, sampler, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) apply; see \"Traces\" in docs/operations.md",
		func(c *Config) *string { return &c.OTLPEndpoint }).with(func(s *Setting) { s.DefaultText = "no traces" }),
	strSetting("COORDINATOR_FAULT", "", "Fault",
		"**test only**: SIGKILL the process when a transaction reaches this step: `after_sql_work`, `after_prepare`, `after_kafka_flush`, `after_log_prepared`, `after_endtxn`, `after_commit_prepared`, `before_final_log`; in a shared Kafka transaction only: `shared_after_sql_prepare` (a shared PostgreSQL transaction prepared), `shared_after_kafka_flush`, `shared_after_log_prepared`, `shared_after_endtxn`; in a transaction its caller decides: `after_log_waiting` (waiting logged, not answered), and in the instance taking its decision `after_decision`, `decision_after_endtxn`, `decision_before_final_log`",
		func(c *Config) *string { return &c.Fault }),
}

// unexported Config fields set only by code, never by a variable: the reflection test skips
// them. NoGroupCommit is a benchmark's comparison switch.
var codeOnlyFields = []string{"NoGroupCommit"}

// logValue is the setting's value for the log: secrets show only whether they are set,
// durations read as text (30s).
func (s Setting) logValue(c Config) any {
	v := s.rawLogValue(c)
	if d, ok := v.(time.Duration); ok {
		return d.String()
	}
	return v
}

func (s Setting) rawLogValue(c Config) any {
	switch {
	case s.log != nil:
		return s.log(c)
	case s.Secret:
		if s.get == nil || formatValue(s.get(c)) == "" {
			return ""
		}
		return api.Redacted
	case s.get != nil:
		return s.get(c)
	}
	return nil
}

// plainHelp is the help text without the table's markup.
func (s Setting) plainHelp() string { return strings.NewReplacer("`", "", "**", "").Replace(s.Help) }

// PlainHelp is the setting's help for the terminal, with its default.
func (s Setting) PlainHelp() string {
	h := s.plainHelp()
	if d := s.Default(); d != "" {
		h += " (default " + strings.ReplaceAll(d, "`", "") + ")"
	}
	return h
}

// MarkdownTable is docs/configuration.md's table, generated from Settings.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| variable | flag | default | meaning |\n|---|---|---|---|\n")
	for _, s := range Settings {
		flag := ""
		if s.Flag != "" {
			flag = "`-" + s.Flag + "`"
		}
		def := s.Default()
		if s.DefaultText == "" && def != "" {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.Env, flag, def, strings.ReplaceAll(s.Help, "|", `\|`))
	}
	return b.String()
}
