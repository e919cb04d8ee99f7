package service

import (
	"fmt"

	"os"
	"regexp"
	"strings"
	"time"

	"github.com/kpgtx/coordinator/api"
	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/txntype"
)

// Config is everything the service needs. Every field is set by one Setting (settings.go):
// Load fills it from the environment, the command line overrides it with flags.
type Config struct {
	DatabaseURL string            // DATABASE_URL: the log and the "default" database
	Databases   map[string]string // COORDINATOR_DATABASES: more databases, "name=dsn;name2=dsn2"
	Brokers     []string          // KAFKA_BROKERS, comma-separated; empty: SQL only
	Listen      string            // COORDINATOR_LISTEN
	// PprofListen serves net/http/pprof on a loopback address (COORDINATOR_PPROF_LISTEN);
	// empty: off.
	PprofListen string
	Instance    string // COORDINATOR_INSTANCE: stable id of this instance (hostname)
	GIDPrefix   string // COORDINATOR_GID_PREFIX
	TxnIDPrefix string // KAFKA_TRANSACTIONAL_ID_PREFIX
	PoolSize    int    // KAFKA_POOL_SIZE: transactional ids (= concurrent Kafka transactions)
	// SharedMax caps the requests sharing one Kafka transaction (KAFKA_SHARED_MAX; 1: none
	// shared), SharedConcurrency the shared transactions running at once
	// (KAFKA_SHARED_CONCURRENCY).
	SharedMax int
	// MaxWaiting bounds this instance's transactions waiting for their caller's decision
	// (COORDINATOR_MAX_WAITING; below KAFKA_POOL_SIZE: each holds a transactional id); 0: a
	// quarter of KAFKA_POOL_SIZE, at least 1 (WaitingBound).
	MaxWaiting        int
	SharedConcurrency int
	// SharedSQL lets the members of a shared Kafka transaction on one database share one
	// PostgreSQL transaction too (COORDINATOR_SHARED_SQL; docs/batching.md section 12).
	SharedSQL bool
	// DeferRows lets a member that joins a batch while every slot is taken skip its Begin: the
	// batch's prepared write inserts its row (COORDINATOR_DEFER_ROWS, off by default;
	// docs/batching.md 12.7).
	DeferRows bool
	// KafkaTxnTimeout is the producer's transaction.timeout.ms (KAFKA_TRANSACTION_TIMEOUT).
	KafkaTxnTimeout time.Duration
	DefaultTimeout  time.Duration // COORDINATOR_DEFAULT_TIMEOUT: budget of a request without timeout_ms
	MaxTimeout      time.Duration // COORDINATOR_MAX_TIMEOUT: largest timeout_ms accepted
	MaxBodyBytes    int64         // COORDINATOR_MAX_BODY_BYTES
	MaxStatements   int           // COORDINATOR_MAX_STATEMENTS
	MaxRecords      int           // COORDINATOR_MAX_RECORDS
	MaxConns        int32         // COORDINATOR_DB_MAX_CONNS: per database pool
	// StatementRole is the role client statements run as, per transaction
	// (COORDINATOR_STATEMENT_ROLE); empty: the login's own role.
	StatementRole string
	// HTTP server bounds (Serve): a client slower than these is disconnected.
	ReadHeaderTimeout time.Duration // COORDINATOR_READ_HEADER_TIMEOUT: to send the request's headers
	ReadTimeout       time.Duration // COORDINATOR_READ_TIMEOUT: to send the whole request, body included
	WriteTimeout      time.Duration // COORDINATOR_WRITE_TIMEOUT: from the headers read to the answer written; 0: HTTPWriteTimeout's default
	IdleTimeout       time.Duration // COORDINATOR_IDLE_TIMEOUT: a keep-alive connection without a request
	// MaxInFlight bounds the requests served at once, MaxBodyMemory the bytes their bodies hold
	// together; beyond either the answer is 429 (api/limits.go).
	MaxInFlight   int   // COORDINATOR_MAX_IN_FLIGHT
	MaxBodyMemory int64 // COORDINATOR_MAX_BODY_MEMORY
	// RecoveryInterval is the period of the recovery loop (COORDINATOR_RECOVERY_INTERVAL).
	RecoveryInterval time.Duration
	// InstanceLease: an instance silent for longer (and whose lock is free) is taken over
	// (COORDINATOR_INSTANCE_LEASE).
	InstanceLease time.Duration
	// ClaimWait is how long startup waits for this instance's lock (COORDINATOR_CLAIM_WAIT).
	ClaimWait time.Duration
	// FinishTimeout bounds phase 2 and the final log write of a request, which run on after the
	// caller's budget (COORDINATOR_FINISH_TIMEOUT). With COORDINATOR_MAX_TIMEOUT it bounds a
	// request's life: a takeover leaves younger active rows alone.
	FinishTimeout time.Duration
	// MarkerAge: marker rows of transactions whose final state is durable are deleted once this
	// old (COORDINATOR_MARKER_AGE).
	MarkerAge time.Duration
	// Retention: final log rows whose last change is older are removed with their events
	// (COORDINATOR_RETENTION, package retention); 0 keeps everything. Never below
	// RetentionFloor (R4).
	Retention time.Duration
	// RetentionInterval is the period of the retention's passes (COORDINATOR_RETENTION_INTERVAL).
	RetentionInterval time.Duration
	// RetryWindow is how long clients may send the same request id again
	// (COORDINATOR_RETRY_WINDOW; client.DefaultRetryWindow is its default): the retention keeps
	// every row for longer (R4).
	RetryWindow time.Duration
	// ShutdownTimeout bounds a graceful shutdown (COORDINATOR_SHUTDOWN_TIMEOUT): requests in
	// flight finish within it, or are left to recovery (Service.Serve).
	ShutdownTimeout time.Duration
	// NoGroupCommit writes every log state change as its own statement instead of batching
	// concurrent ones (for comparison in benchmarks).
	NoGroupCommit bool
	// Fault makes the process kill itself at a protocol step (COORDINATOR_FAULT). Test-only.
	Fault string

	// Security (security.go).
	Tokens        []api.Token // COORDINATOR_TOKENS: bearer tokens "name:role[,role]:token"; none: no authentication
	AllowInsecure bool        // COORDINATOR_ALLOW_INSECURE: serve beyond the loopback interface without tokens
	APITLS        APITLS      // COORDINATOR_TLS_*: the API over TLS (tls.go)
	// AllowPlaintext (COORDINATOR_ALLOW_PLAINTEXT): serve plain HTTP beyond the loopback
	// interface (behind a proxy that terminates TLS, say).
	AllowPlaintext bool
	Statements     map[string]string // COORDINATOR_STATEMENTS: allowlist of named SQL statements, name → SQL text
	Topics         []string          // COORDINATOR_TOPICS: allowlist of topics ("prefix*" matches a prefix)
	KafkaTLS       KafkaTLS          // KAFKA_TLS, KAFKA_TLS_*
	KafkaSASL      KafkaSASL         // KAFKA_SASL_*
	SchemaRegistry SchemaRegistry    // COORDINATOR_SCHEMA_REGISTRY_*
	// OTLPEndpoint is the OTLP/HTTP collector traces go to (COORDINATOR_OTLP_ENDPOINT); empty:
	// no traces (trace.go).
	OTLPEndpoint string
}

// SchemaRegistry is where avro, protobuf and jsonschema record values are encoded against
// (schemas.go); no URL: those types are refused.
type SchemaRegistry struct {
	URL      string     // COORDINATOR_SCHEMA_REGISTRY_URL: Confluent's API (Apicurio: …/apis/ccompat/v7)
	User     string     // COORDINATOR_SCHEMA_REGISTRY_USER: HTTP basic authentication
	Password api.Secret // COORDINATOR_SCHEMA_REGISTRY_PASSWORD (never logged)
}

// WaitingBound is how many of this instance's transactions may wait for their caller's
// decision at once (COORDINATOR_MAX_WAITING, or a quarter of KAFKA_POOL_SIZE, at least 1).
func (c Config) WaitingBound() int {
	if c.MaxWaiting > 0 {
		return c.MaxWaiting
	}
	return max(1, c.PoolSize/4)
}

// Defaults returns the configuration with nothing set.
func Defaults() Config {
	host, _ := os.Hostname()
	return Config{
		Listen:            "127.0.0.1:8080",
		Instance:          sanitizeInstance(host),
		GIDPrefix:         "kpgtx",
		TxnIDPrefix:       "kpgtx",
		PoolSize:          32,
		SharedMax:         128,
		SharedConcurrency: 1,
		SharedSQL:         true,
		DeferRows:         false,
		KafkaTxnTimeout:   60 * time.Second,
		DefaultTimeout:    10 * time.Second,
		MaxTimeout:        30 * time.Second,
		MaxBodyBytes:      1 << 20,
		MaxStatements:     1000,
		MaxRecords:        1000,
		MaxConns:          64,

		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxInFlight:       512,
		MaxBodyMemory:     64 << 20,

		RecoveryInterval:  5 * time.Second,
		InstanceLease:     15 * time.Second,
		ClaimWait:         10 * time.Second,
		FinishTimeout:     30 * time.Second,
		MarkerAge:         time.Minute,
		Retention:         7 * 24 * time.Hour, // Kafka's transactional.id.expiration.ms default
		RetentionInterval: time.Minute,
		RetryWindow:       time.Hour, // client.DefaultRetryWindow
		ShutdownTimeout:   25 * time.Second,
	}
}

// writeTimeoutMargin is what the default write timeout adds to COORDINATOR_MAX_TIMEOUT: phase 2
// and the final log write run on after the budget (coord.Config.FinishTimeout, 30 s), and the
// answer must still be written.
const writeTimeoutMargin = time.Minute

// HTTPWriteTimeout is the HTTP server's write timeout: COORDINATOR_WRITE_TIMEOUT, or
// COORDINATOR_MAX_TIMEOUT plus a minute.
func (c Config) HTTPWriteTimeout() time.Duration {
	if c.WriteTimeout > 0 {
		return c.WriteTimeout
	}
	return c.MaxTimeout + writeTimeoutMargin
}

// Load reads the environment over the defaults: every setting of Settings whose variable is
// set. Every bad value is reported, each naming its variable.
func Load(getenv func(string) string) (Config, error) {
	c := Defaults()
	var errs []string
	for _, s := range Settings {
		if v := getenv(s.Env); v != "" && s.set != nil {
			if err := s.set(&c, v); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("configuration: %s", strings.Join(errs, "; "))
	}
	return c, nil
}

// ParseDatabases reads "name=dsn;name2=dsn2".
func ParseDatabases(s string) (map[string]string, error) {
	dbs := map[string]string{}
	for i, part := range splitList(s, ";") {
		name, dsn, ok := strings.Cut(part, "=")
		if !ok || !dbName.MatchString(name) || dsn == "" {
			// Only the name is quoted: the DSN may carry a password.
			return nil, fmt.Errorf("COORDINATOR_DATABASES: entry %d (name %q) is not name=dsn with a name of [a-z0-9_] (at most 32)", i+1, name)
		}
		dbs[name] = dsn
	}
	return dbs, nil
}

var (
	dbName     = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
	gidPrefix  = regexp.MustCompile(`^[A-Za-z0-9]{1,32}$`)
	instanceID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
)

// Validate refuses settings the service cannot run with, naming the setting.
func (c Config) Validate() error {
	var errs []string
	if c.DatabaseURL == "" {
		errs = append(errs, "DATABASE_URL is required (the coordinator log and the default database)")
	}
	if !gidPrefix.MatchString(c.GIDPrefix) {
		errs = append(errs, fmt.Sprintf("COORDINATOR_GID_PREFIX=%q: 1-32 letters or digits", c.GIDPrefix))
	}
	if !instanceID.MatchString(c.Instance) {
		errs = append(errs, fmt.Sprintf("COORDINATOR_INSTANCE=%q: 1-64 characters of [A-Za-z0-9._-]", c.Instance))
	}
	if !instanceID.MatchString(c.TxnIDPrefix) {
		errs = append(errs, fmt.Sprintf("KAFKA_TRANSACTIONAL_ID_PREFIX=%q: 1-64 characters of [A-Za-z0-9._-]", c.TxnIDPrefix))
	}
	if _, ok := c.Databases["default"]; ok {
		errs = append(errs, `COORDINATOR_DATABASES: "default" is DATABASE_URL; choose another name`)
	}
	if c.PoolSize < 1 || c.PoolSize > 1024 {
		errs = append(errs, fmt.Sprintf("KAFKA_POOL_SIZE=%d: from 1 to 1024", c.PoolSize))
	}
	if c.MaxWaiting < 0 || (len(c.Brokers) > 0 && c.PoolSize > 1 && c.MaxWaiting >= c.PoolSize) {
		errs = append(errs, fmt.Sprintf("COORDINATOR_MAX_WAITING=%d: from 1 to below KAFKA_POOL_SIZE=%d (0: a quarter of it): each waiting transaction holds a transactional id, and the others serve every other request", c.MaxWaiting, c.PoolSize))
	}
	if c.SharedMax < 1 || c.SharedMax > 1024 {
		errs = append(errs, fmt.Sprintf("KAFKA_SHARED_MAX=%d: from 1 (no shared Kafka transactions) to 1024", c.SharedMax))
	}
	if c.SharedConcurrency < 1 || c.SharedConcurrency > 1024 {
		errs = append(errs, fmt.Sprintf("KAFKA_SHARED_CONCURRENCY=%d: from 1 to 1024", c.SharedConcurrency))
	}
	if c.KafkaTxnTimeout < time.Second {
		errs = append(errs, fmt.Sprintf("KAFKA_TRANSACTION_TIMEOUT=%s: at least 1s", c.KafkaTxnTimeout))
	}
	if c.DefaultTimeout <= 0 || c.MaxTimeout < c.DefaultTimeout {
		errs = append(errs, fmt.Sprintf("COORDINATOR_DEFAULT_TIMEOUT=%s must be positive and at most COORDINATOR_MAX_TIMEOUT=%s", c.DefaultTimeout, c.MaxTimeout))
	}
	if c.MaxTimeout >= c.KafkaTxnTimeout && len(c.Brokers) > 0 {
		errs = append(errs, fmt.Sprintf("COORDINATOR_MAX_TIMEOUT=%s must be below KAFKA_TRANSACTION_TIMEOUT=%s: a request must not outlive its Kafka transaction", c.MaxTimeout, c.KafkaTxnTimeout))
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Sprintf("COORDINATOR_MAX_BODY_BYTES=%d: at least 1024", c.MaxBodyBytes))
	}
	if c.MaxBodyMemory < c.MaxBodyBytes {
		errs = append(errs, fmt.Sprintf("COORDINATOR_MAX_BODY_MEMORY=%d must be at least COORDINATOR_MAX_BODY_BYTES=%d (one largest body)", c.MaxBodyMemory, c.MaxBodyBytes))
	}
	if c.MaxInFlight < 1 {
		errs = append(errs, fmt.Sprintf("COORDINATOR_MAX_IN_FLIGHT=%d: at least 1", c.MaxInFlight))
	}
	for _, t := range []struct {
		key string
		d   time.Duration
	}{
		{"COORDINATOR_READ_HEADER_TIMEOUT", c.ReadHeaderTimeout},
		{"COORDINATOR_READ_TIMEOUT", c.ReadTimeout},
		{"COORDINATOR_IDLE_TIMEOUT", c.IdleTimeout},
	} {
		if t.d < 100*time.Millisecond {
			errs = append(errs, fmt.Sprintf("%s=%s: at least 100ms", t.key, t.d))
		}
	}
	if c.ReadTimeout < c.ReadHeaderTimeout {
		errs = append(errs, fmt.Sprintf("COORDINATOR_READ_TIMEOUT=%s must be at least COORDINATOR_READ_HEADER_TIMEOUT=%s (it includes the headers)", c.ReadTimeout, c.ReadHeaderTimeout))
	}
	if c.WriteTimeout < 0 || c.WriteTimeout != 0 && c.WriteTimeout <= c.MaxTimeout {
		errs = append(errs, fmt.Sprintf("COORDINATOR_WRITE_TIMEOUT=%s must exceed COORDINATOR_MAX_TIMEOUT=%s: the answer of the longest request must still be written", c.WriteTimeout, c.MaxTimeout))
	}
	if c.MaxStatements < 1 || c.MaxRecords < 1 {
		errs = append(errs, "COORDINATOR_MAX_STATEMENTS and COORDINATOR_MAX_RECORDS must be at least 1")
	}
	if c.RecoveryInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Sprintf("COORDINATOR_RECOVERY_INTERVAL=%s: at least 10ms", c.RecoveryInterval))
	}
	if c.InstanceLease < 2*c.RecoveryInterval {
		errs = append(errs, fmt.Sprintf("COORDINATOR_INSTANCE_LEASE=%s must be at least twice COORDINATOR_RECOVERY_INTERVAL=%s (the heartbeat period)", c.InstanceLease, c.RecoveryInterval))
	}
	if c.FinishTimeout < 100*time.Millisecond {
		errs = append(errs, fmt.Sprintf("COORDINATOR_FINISH_TIMEOUT=%s: at least 100ms", c.FinishTimeout))
	}
	if c.MarkerAge < time.Second {
		errs = append(errs, fmt.Sprintf("COORDINATOR_MARKER_AGE=%s: at least 1s", c.MarkerAge))
	}
	if c.RetryWindow <= 0 {
		errs = append(errs, fmt.Sprintf("COORDINATOR_RETRY_WINDOW=%s: must be positive", c.RetryWindow))
	}
	if c.RetentionInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Sprintf("COORDINATOR_RETENTION_INTERVAL=%s: at least 10ms", c.RetentionInterval))
	}
	if floor := c.RetentionFloor(); c.Retention != 0 && c.Retention < floor {
		errs = append(errs, fmt.Sprintf("COORDINATOR_RETENTION=%s is below its floor of %s, %s: a row must outlive every retry of its id and every delay the coordinator relies on, or a retry after its removal runs the request again; set 0 (keep everything) or at least the floor, or shorten those settings",
			c.Retention, floor, c.retentionFloorText()))
	}
	if c.ClaimWait < 0 {
		errs = append(errs, fmt.Sprintf("COORDINATOR_CLAIM_WAIT=%s: must not be negative", c.ClaimWait))
	}
	if c.ShutdownTimeout < 100*time.Millisecond {
		errs = append(errs, fmt.Sprintf("COORDINATOR_SHUTDOWN_TIMEOUT=%s: at least 100ms", c.ShutdownTimeout))
	}
	errs = append(errs, c.validateSecurity()...)
	errs = append(errs, c.validateTracing()...)
	if c.Fault != "" {
		if _, err := txntype.ParseFaultPoint(c.Fault); err != nil {
			errs = append(errs, "COORDINATOR_FAULT: "+err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("configuration: %s", strings.Join(errs, "; "))
	}
	return nil
}

// HangingScanEvery is the period of the Kafka pool's hanging-transaction scans
// (kafkatxn.HangingScanEvery), one of the delays the retention's floor covers.
const HangingScanEvery = kafkatxn.HangingScanEvery

// RetentionFloor is the shortest retention accepted (R4 in docs/design.md): twice the sum of
// every delay the coordinator relies on while a row is still needed. A client may retry an id
// for RetryWindow; a request runs for up to MaxTimeout, then its phase 2 and final write for
// up to FinishTimeout; its Kafka transaction may stay open for KafkaTxnTimeout; its marker rows
// live for MarkerAge; an instance's death is seen within InstanceLease and acted on at the next
// RecoveryInterval; a hanging transaction is looked for at least every HangingScanEvery. The
// factor two is a margin for clocks, slow passes and backlogs. A test that shortens those
// settings shortens the floor with them.
func (c Config) RetentionFloor() time.Duration {
	return 2 * (c.RetryWindow + c.MaxTimeout + c.FinishTimeout + c.KafkaTxnTimeout + c.MarkerAge +
		c.InstanceLease + c.RecoveryInterval + HangingScanEvery)
}

// retentionFloorText spells the floor's sum out, for the refusal.
func (c Config) retentionFloorText() string {
	return fmt.Sprintf("2 × (COORDINATOR_RETRY_WINDOW=%s + COORDINATOR_MAX_TIMEOUT=%s + COORDINATOR_FINISH_TIMEOUT=%s + KAFKA_TRANSACTION_TIMEOUT=%s + COORDINATOR_MARKER_AGE=%s + COORDINATOR_INSTANCE_LEASE=%s + COORDINATOR_RECOVERY_INTERVAL=%s + the hanging scan's period %s)",
		c.RetryWindow, c.MaxTimeout, c.FinishTimeout, c.KafkaTxnTimeout, c.MarkerAge, c.InstanceLease, c.RecoveryInterval, HangingScanEvery)
}

func splitList(s, sep string) []string {
	var out []string
	for _, p := range strings.Split(s, sep) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func sanitizeInstance(host string) string {
	b := []byte(host)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '-' || ch == '_') {
			b[i] = '-'
		}
	}
	if len(b) == 0 {
		return "coordinator"
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}
