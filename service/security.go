package service

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kpgtx/coordinator/api"
	"github.com/kpgtx/coordinator/txntype"
)

// KafkaTLS is how the Kafka clients use TLS (KAFKA_TLS*).
type KafkaTLS struct {
	Enabled            bool   // KAFKA_TLS
	CAFile             string // KAFKA_TLS_CA_FILE: PEM CA bundle; empty: the system roots
	CertFile           string // KAFKA_TLS_CERT_FILE: client certificate (PEM), with KeyFile
	KeyFile            string // KAFKA_TLS_KEY_FILE
	InsecureSkipVerify bool   // KAFKA_TLS_INSECURE_SKIP_VERIFY: do not verify the brokers' certificates
}

// KafkaSASL is how the Kafka clients authenticate (KAFKA_SASL_*).
type KafkaSASL struct {
	Mechanism string     // KAFKA_SASL_MECHANISM: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty: none
	User      string     // KAFKA_SASL_USER
	Password  api.Secret // KAFKA_SASL_PASSWORD
}

var saslMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// validateSecurity refuses security settings that cannot work or that would expose the API.
//
// The exposure rule: an address other machines can reach (not loopback) needs authentication
// and encryption. Without COORDINATOR_TOKENS it is refused unless COORDINATOR_ALLOW_INSECURE=true;
// without TLS (COORDINATOR_TLS_CERT_FILE) it is refused unless COORDINATOR_ALLOW_PLAINTEXT=true.
// Each allowance waives its own check only; on loopback neither is needed.
func (c Config) validateSecurity() []string {
	var errs []string
	if host, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Sprintf("COORDINATOR_LISTEN=%q: want host:port, like 127.0.0.1:8080", c.Listen))
	} else if !IsLoopback(host) {
		if len(c.Tokens) == 0 && !c.AllowInsecure {
			errs = append(errs, fmt.Sprintf("COORDINATOR_LISTEN=%s accepts connections from other machines, but no COORDINATOR_TOKENS are configured: "+
				"anyone who reaches it could run SQL and produce records. Configure tokens (name:role[,role]:token), "+
				"listen on 127.0.0.1, or set COORDINATOR_ALLOW_INSECURE=true to serve without authentication anyway", c.Listen))
		}
		if !c.APITLS.Enabled() && !c.AllowPlaintext {
			errs = append(errs, fmt.Sprintf("COORDINATOR_LISTEN=%s accepts connections from other machines over plain HTTP: "+
				"tokens and requests would cross the network readable by anyone on the path. Configure COORDINATOR_TLS_CERT_FILE and "+
				"COORDINATOR_TLS_KEY_FILE, listen on 127.0.0.1, or set COORDINATOR_ALLOW_PLAINTEXT=true "+
				"(say, behind a proxy that terminates TLS) to serve plain HTTP anyway", c.Listen))
		}
	}
	if c.PprofListen != "" {
		// The profiler shows memory and goroutines (statements, tokens in flight): never beyond
		// the machine.
		if host, _, err := net.SplitHostPort(c.PprofListen); err != nil || !IsLoopback(host) {
			errs = append(errs, fmt.Sprintf("COORDINATOR_PPROF_LISTEN=%q: want a loopback host:port, like 127.0.0.1:6060 (the profiler is never served to other machines)", c.PprofListen))
		}
	}
	if (c.APITLS.CertFile == "") != (c.APITLS.KeyFile == "") {
		errs = append(errs, "COORDINATOR_TLS_CERT_FILE and COORDINATOR_TLS_KEY_FILE go together (the API's certificate and its key)")
	}
	if c.APITLS.ClientCAFile != "" && !c.APITLS.Enabled() {
		errs = append(errs, "COORDINATOR_TLS_CLIENT_CA_FILE is set but COORDINATOR_TLS_CERT_FILE is not: client certificates need TLS")
	}
	if c.Statements != nil && len(c.Statements) == 0 {
		errs = append(errs, "COORDINATOR_STATEMENTS: no statements; name at least one, or leave it unset to accept SQL text")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Statements)) {
		if err := txntype.CheckAllowedStatement(name, c.Statements[name]); err != nil {
			errs = append(errs, "COORDINATOR_STATEMENTS: "+err.Error())
		}
	}
	for _, t := range c.Topics {
		if err := txntype.CheckAllowedTopic(t); err != nil {
			errs = append(errs, "COORDINATOR_TOPICS: "+err.Error())
		}
	}
	t := c.KafkaTLS
	if !t.Enabled {
		for _, s := range []struct {
			key string
			set bool
		}{
			{"KAFKA_TLS_CA_FILE", t.CAFile != ""},
			{"KAFKA_TLS_CERT_FILE", t.CertFile != ""},
			{"KAFKA_TLS_KEY_FILE", t.KeyFile != ""},
			{"KAFKA_TLS_INSECURE_SKIP_VERIFY", t.InsecureSkipVerify},
		} {
			if s.set {
				errs = append(errs, s.key+" is set but KAFKA_TLS is not true: set KAFKA_TLS=true to use TLS with Kafka")
			}
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, "KAFKA_TLS_CERT_FILE and KAFKA_TLS_KEY_FILE go together (a client certificate and its key)")
	}
	s := c.KafkaSASL
	switch {
	case s.Mechanism == "":
		if s.User != "" || s.Password != "" {
			errs = append(errs, "KAFKA_SASL_USER or KAFKA_SASL_PASSWORD is set but KAFKA_SASL_MECHANISM is not (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
		}
	case !slices.Contains(saslMechanisms, s.Mechanism):
		errs = append(errs, fmt.Sprintf("KAFKA_SASL_MECHANISM=%q: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism))
	case s.User == "" || s.Password == "":
		errs = append(errs, fmt.Sprintf("KAFKA_SASL_MECHANISM=%s needs KAFKA_SASL_USER and KAFKA_SASL_PASSWORD", s.Mechanism))
	}
	return errs
}

// IsLoopback reports whether a listen host only accepts connections from this machine. An
// empty host (":8080") or 0.0.0.0 accepts them from everywhere; a host name other than
// localhost may resolve to anything and counts as reachable.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// KafkaClientOpts returns the Kafka client options of KAFKA_TLS* and KAFKA_SASL_* (for
// kafkatxn.Config.ClientOpts). The TLS files are read here: a missing or bad file is refused
// at startup, naming the setting.
func (c Config) KafkaClientOpts(logger *slog.Logger) ([]kgo.Opt, error) {
	if logger == nil {
		logger = slog.Default()
	}
	var opts []kgo.Opt
	if t := c.KafkaTLS; t.Enabled {
		// kgo sets ServerName to the dialled broker's host when it is empty.
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // the operator's explicit choice
		if t.InsecureSkipVerify {
			logger.Warn("KAFKA_TLS_INSECURE_SKIP_VERIFY=true: the brokers' certificates are not verified; anyone on the path can impersonate them")
		}
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return nil, fmt.Errorf("KAFKA_TLS_CA_FILE: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("KAFKA_TLS_CA_FILE=%s: no PEM certificate in it", t.CAFile)
			}
			tc.RootCAs = pool
		}
		if t.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("KAFKA_TLS_CERT_FILE=%s, KAFKA_TLS_KEY_FILE=%s: %w", t.CertFile, t.KeyFile, err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if s := c.KafkaSASL; s.Mechanism != "" {
		var m sasl.Mechanism
		switch s.Mechanism {
		case "PLAIN":
			m = plain.Auth{User: s.User, Pass: s.Password.Reveal()}.AsMechanism()
			if !c.KafkaTLS.Enabled {
				logger.Warn("KAFKA_SASL_MECHANISM=PLAIN without KAFKA_TLS: the password crosses the network in clear text")
			}
		case "SCRAM-SHA-256":
			m = scram.Auth{User: s.User, Pass: s.Password.Reveal()}.AsSha256Mechanism()
		case "SCRAM-SHA-512":
			m = scram.Auth{User: s.User, Pass: s.Password.Reveal()}.AsSha512Mechanism()
		default:
			return nil, fmt.Errorf("KAFKA_SASL_MECHANISM=%q: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism)
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// kafkaSecurityNote says, for an error reaching Kafka, which TLS and SASL settings were in use
// (a refused login or handshake often shows only as a closed connection).
func (c Config) kafkaSecurityNote() string {
	var parts []string
	if c.KafkaTLS.Enabled {
		parts = append(parts, "KAFKA_TLS=true")
	}
	if c.KafkaSASL.Mechanism != "" {
		parts = append(parts, fmt.Sprintf("KAFKA_SASL_MECHANISM=%s as KAFKA_SASL_USER=%q", c.KafkaSASL.Mechanism, c.KafkaSASL.User))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ": check the certificates and credentials too)"
}

// RedactDSN hides the passwords of a PostgreSQL connection string: the URL's user password,
// password= and sslpassword= parameters (URL query or keyword form).
func RedactDSN(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		authority := rest[:end]
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			if user, _, hasPW := strings.Cut(authority[:at], ":"); hasPW {
				authority = user + ":" + redactedWord + authority[at:]
			}
		}
		dsn = dsn[:i+3] + authority + rest[end:]
	}
	dsn = queryPassword.ReplaceAllString(dsn, "${1}"+redactedWord)
	return keywordPassword.ReplaceAllString(dsn, "${1}${2}="+redactedWord)
}

// redactedWord replaces a password inside a DSN (URL-safe, unlike api.Redacted).
const redactedWord = "REDACTED"

var (
	queryPassword   = regexp.MustCompile(`(?i)([?&](?:ssl)?password=)[^&#]*`)
	keywordPassword = regexp.MustCompile(`(?i)(^|\s)((?:ssl)?password)\s*=\s*(?:'(?:[^'\\]|\\.)*'|\S*)`)
)

// LogValue is the configuration for slog, by file key, every setting of Settings in its
// order, with every secret hidden: DSN passwords, token secrets (names and roles are shown)
// and the SASL password.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(c.LogAttrs()...)
}

// LogAttrs are LogValue's attributes, for a log line that lists them at its top level.
func (c Config) LogAttrs() []slog.Attr {
	attrs := make([]slog.Attr, 0, len(Settings))
	for _, s := range Settings {
		if s.Field != "" {
			attrs = append(attrs, slog.Any(FileKey(s.Env), s.logValue(c)))
		}
	}
	return attrs
}

// String prints the configuration as LogValue does: no secret appears.
func (c Config) String() string {
	var b strings.Builder
	b.WriteString("service.Config{")
	for i, a := range c.LogValue().Group() {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%v", a.Key, a.Value.Any())
	}
	b.WriteString("}")
	return b.String()
}

// GoString is String, so %#v hides the secrets too.
func (c Config) GoString() string { return c.String() }
