package test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/client"
	"github.com/kpgtx/coordinator/service"
)

// The API over TLS (COORDINATOR_TLS_*), served by Service.Serve as `coordinator serve` does.

// testCA signs certificates for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kpgtx test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate for 127.0.0.1 with the serial, and its PEM key.
func (ca *testCA) issue(t *testing.T, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("coordinator %d", serial)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// replaceFile writes data to path by renaming a complete temporary file over it, as a
// certificate rotation should.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// serveTLS runs the service of e.cfg on a loopback port through Service.Serve and returns
// its base URL.
func serveTLS(t *testing.T, e *env) string {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	svc, err := service.Open(context.Background(), e.cfg, logger)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
		svc.Close()
	})
	return "https://" + ln.Addr().String()
}

// servedSerial is the serial of the certificate the server presents in a handshake.
func servedSerial(addr string, roots *x509.CertPool) (int64, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// TestTLS: the API over HTTPS end to end (client and CLI with a CA file), plain HTTP and
// unknown CAs refused, and a new certificate taken without a restart.
func TestTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	replaceFile(t, caFile, ca.pem)
	c1, k1 := ca.issue(t, 101, x509.ExtKeyUsageServerAuth)
	replaceFile(t, certFile, c1)
	replaceFile(t, keyFile, k1)

	e := newStore(t, envOpts{configure: func(c *service.Config) {
		c.APITLS = service.APITLS{CertFile: certFile, KeyFile: keyFile}
	}})
	base := serveTLS(t, e)
	addr := base[len("https://"):]
	ctx := context.Background()

	c, err := client.New(base, client.WithCAFile(caFile))
	require.NoError(t, err)
	txn, err := c.Submit(ctx, e.order("tls1"))
	require.NoError(t, err)
	assert.Equal(t, client.StateCommitted, txn.State)
	assert.Equal(t, 1, countRows(t, e.db, "tls1"))

	// The CLI with the CA file; without it the server's certificate is not trusted.
	code, stdout, stderr := txnCLI(t, nil, "show", "tls1", "-server", base, "-ca-file", caFile)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "committed")
	code, _, stderr = txnCLI(t, []string{"COORDINATOR_URL=" + base, "COORDINATOR_CA_FILE=" + caFile}, "list")
	assert.Equal(t, 0, code, stderr)
	code, _, stderr = txnCLI(t, nil, "list", "-server", base)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "certificate")

	// Plain HTTP on the TLS port gets no API answer.
	resp, err := http.Get("http://" + addr + "/v1/transactions/tls1")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	// Another CA's client does not trust it.
	other, err := client.New(base, client.WithCAFile(writeTemp(t, newTestCA(t).pem)))
	require.NoError(t, err)
	err = other.Health(ctx)
	var unknown x509.UnknownAuthorityError
	assert.True(t, errors.As(err, &unknown), "%v", err)

	// Rotation: new files, and the server presents the new certificate without a restart.
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	serial, err := servedSerial(addr, roots)
	require.NoError(t, err)
	require.Equal(t, int64(101), serial)
	c2, k2 := ca.issue(t, 202, x509.ExtKeyUsageServerAuth)
	replaceFile(t, keyFile, k2)
	replaceFile(t, certFile, c2)
	deadline := time.Now().Add(time.Minute)
	for serial != 202 {
		require.True(t, time.Now().Before(deadline), "the server still presents serial %d", serial)
		time.Sleep(100 * time.Millisecond)
		serial, err = servedSerial(addr, roots)
		require.NoError(t, err)
	}
	txn, err = c.Submit(ctx, e.order("tls2"))
	require.NoError(t, err, "requests go on over the new certificate")
	assert.Equal(t, client.StateCommitted, txn.State)
}

// TestTLSClientCertificates: with COORDINATOR_TLS_CLIENT_CA_FILE a client without a
// certificate of that CA is refused in the handshake.
func TestTLSClientCertificates(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	srvCert, srvKey := ca.issue(t, 1, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue(t, 2, x509.ExtKeyUsageClientAuth)
	caFile := writeTemp(t, ca.pem)
	e := newStore(t, envOpts{configure: func(c *service.Config) {
		c.APITLS = service.APITLS{CertFile: writeTemp(t, srvCert), KeyFile: writeTemp(t, srvKey), ClientCAFile: caFile}
	}})
	base := serveTLS(t, e)
	ctx := context.Background()

	anonymous, err := client.New(base, client.WithCAFile(caFile))
	require.NoError(t, err)
	assert.Error(t, anonymous.Health(ctx), "no client certificate")

	pair, err := tls.X509KeyPair(cliCert, cliKey)
	require.NoError(t, err)
	cfg, err := client.TLSConfigWithCA(caFile)
	require.NoError(t, err)
	cfg.Certificates = []tls.Certificate{pair}
	known, err := client.New(base, client.WithTLSConfig(cfg))
	require.NoError(t, err)
	require.NoError(t, known.Health(ctx))
	_, err = known.Submit(ctx, e.order("mtls"))
	require.NoError(t, err)
}

// TestTLSRefusedAtStartup: a certificate or key that does not load stops the binary before it
// touches anything, naming the setting.
func TestTLSRefusedAtStartup(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	cert, _ := ca.issue(t, 1, x509.ExtKeyUsageServerAuth)
	_, otherKey := ca.issue(t, 2, x509.ExtKeyUsageServerAuth)
	certFile := writeTemp(t, cert)
	const unreachable = "DATABASE_URL=postgres://coordinator:sekret@127.0.0.1:1/nowhere?connect_timeout=5"
	cases := []struct {
		name string
		env  []string
		want string
	}{
		{"not a certificate", []string{"COORDINATOR_TLS_CERT_FILE=" + writeTemp(t, []byte("junk")), "COORDINATOR_TLS_KEY_FILE=" + writeTemp(t, otherKey)}, "COORDINATOR_TLS_CERT_FILE="},
		{"another certificate's key", []string{"COORDINATOR_TLS_CERT_FILE=" + certFile, "COORDINATOR_TLS_KEY_FILE=" + writeTemp(t, otherKey)}, "private key does not match"},
		{"no key", []string{"COORDINATOR_TLS_CERT_FILE=" + certFile}, "COORDINATOR_TLS_CERT_FILE and COORDINATOR_TLS_KEY_FILE go together"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCoordinator(t, coordinatorEnv(append([]string{unreachable}, tc.env...)...), "serve")
			assert.Equal(t, 1, code, stderr)
			assert.Contains(t, stderr, tc.want)
			assert.Contains(t, stderr, "COORDINATOR_TLS_")
			assert.NotContains(t, stderr, "cannot reach PostgreSQL", "refused before connecting")
		})
	}
}

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "*.pem")
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return f.Name()
}
