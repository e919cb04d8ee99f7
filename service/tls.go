package service

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// APITLS is how the API serves TLS (COORDINATOR_TLS_*). Without a certificate the API speaks
// plain HTTP, which validateSecurity allows only on a loopback address or with
// COORDINATOR_ALLOW_PLAINTEXT=true.
type APITLS struct {
	CertFile string // COORDINATOR_TLS_CERT_FILE: PEM certificate chain, server's first
	KeyFile  string // COORDINATOR_TLS_KEY_FILE: its PEM private key
	// ClientCAFile (COORDINATOR_TLS_CLIENT_CA_FILE): PEM CAs; when set, every client must show a
	// certificate they signed (mutual TLS).
	ClientCAFile string
}

// Enabled reports whether the API serves TLS.
func (t APITLS) Enabled() bool { return t.CertFile != "" }

// certCheckInterval is how often, at most, the certificate files are read again to see
// whether they changed (checked on a handshake, so an idle server reads nothing).
const certCheckInterval = 2 * time.Second

// ServerTLS returns the API's TLS configuration, or nil without COORDINATOR_TLS_CERT_FILE. The
// files are read now: a missing or bad file is refused, naming the setting. The certificate
// is then reloaded without a restart when the files change (certReloader).
func (c Config) ServerTLS(logger *slog.Logger) (*tls.Config, error) {
	t := c.APITLS
	if !t.Enabled() {
		return nil, nil
	}
	r := &certReloader{certFile: t.CertFile, keyFile: t.KeyFile, logger: logger, now: time.Now, every: certCheckInterval}
	if err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("COORDINATOR_TLS_CLIENT_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("COORDINATOR_TLS_CLIENT_CA_FILE=%s: no PEM certificate in it", t.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// certReloader serves the certificate of two files and loads them again when their content
// changes. A change is looked for at most every `every`, on a handshake. A pair that does not
// load (a half-written rotation, a key that does not match) is logged and the previous
// certificate stays in use; the next check tries again.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger
	now               func() time.Time
	every             time.Duration

	mu              sync.Mutex
	cert            *tls.Certificate
	certPEM, keyPEM []byte // of cert
	badPEM          []byte // the files' content that last failed to load (logged once)
	checked         time.Time
}

// load reads and parses the pair at startup.
func (r *certReloader) load() error {
	certPEM, keyPEM, cert, err := r.read()
	if err != nil {
		return fmt.Errorf("COORDINATOR_TLS_CERT_FILE=%s, COORDINATOR_TLS_KEY_FILE=%s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.certPEM, r.keyPEM, r.checked = cert, certPEM, keyPEM, r.now()
	return nil
}

func (r *certReloader) read() (certPEM, keyPEM []byte, cert *tls.Certificate, err error) {
	if certPEM, err = os.ReadFile(r.certFile); err != nil {
		return nil, nil, nil, err
	}
	if keyPEM, err = os.ReadFile(r.keyFile); err != nil {
		return nil, nil, nil, err
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, nil, err
	}
	return certPEM, keyPEM, &c, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= r.every {
		r.checked = now
		r.reload()
	}
	return r.cert, nil
}

// reload loads the files again if they changed. Called with mu held.
func (r *certReloader) reload() {
	certPEM, err1 := os.ReadFile(r.certFile)
	keyPEM, err2 := os.ReadFile(r.keyFile)
	if err1 == nil && err2 == nil && bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) {
		return
	}
	err := errors.Join(err1, err2)
	var cert tls.Certificate
	if err == nil {
		cert, err = tls.X509KeyPair(certPEM, keyPEM)
	}
	if err != nil {
		// Logged once per content: a broken pair stays broken until it is rewritten.
		if bad := append(append([]byte{}, certPEM...), keyPEM...); !bytes.Equal(bad, r.badPEM) || r.badPEM == nil {
			r.logger.Warn("API TLS certificate files changed but do not load; still serving the previous certificate",
				"cert_file", r.certFile, "key_file", r.keyFile, "error", err.Error())
			r.badPEM = bad
		}
		return
	}
	r.cert, r.certPEM, r.keyPEM, r.badPEM = &cert, certPEM, keyPEM, nil
	attrs := []any{"cert_file", r.certFile}
	if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
		attrs = append(attrs, "serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter.Format(time.RFC3339))
	}
	r.logger.Info("API TLS certificate reloaded", attrs...)
}
