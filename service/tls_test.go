package service

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// selfSigned returns a PEM certificate for 127.0.0.1 with the serial, and its PEM key.
func selfSigned(t *testing.T, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "coordinator"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// syncBuffer is a log destination the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func serialOf(t *testing.T, c *tls.Certificate) int64 {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	require.NoError(t, err)
	return leaf.SerialNumber.Int64()
}

// TestCertReloader: the certificate follows its files, looked at no more often than the check
// interval; a pair that does not load leaves the previous certificate in use, logged once.
func TestCertReloader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(cert, key []byte) {
		require.NoError(t, os.WriteFile(certFile, cert, 0o600))
		require.NoError(t, os.WriteFile(keyFile, key, 0o600))
	}
	c1, k1 := selfSigned(t, 1)
	write(c1, k1)
	var logs syncBuffer
	now := time.Unix(1_000_000, 0)
	r := &certReloader{certFile: certFile, keyFile: keyFile, every: 2 * time.Second,
		logger: slog.New(slog.NewTextHandler(&logs, nil)), now: func() time.Time { return now }}
	require.NoError(t, r.load())
	serial := func() int64 {
		c, err := r.GetCertificate(nil)
		require.NoError(t, err)
		return serialOf(t, c)
	}
	assert.Equal(t, int64(1), serial())

	c2, k2 := selfSigned(t, 2)
	write(c2, k2)
	now = now.Add(time.Second)
	assert.Equal(t, int64(1), serial(), "not looked at before the interval")
	now = now.Add(time.Second)
	assert.Equal(t, int64(2), serial(), "reloaded")
	assert.Contains(t, logs.String(), "API TLS certificate reloaded")

	_, k3 := selfSigned(t, 3)
	for _, bad := range []struct {
		name      string
		cert, key []byte
	}{
		{"not PEM", []byte("garbage"), k2},
		{"a key of another certificate", c2, k3},
		{"half-written", c2[:len(c2)/2], k2},
	} {
		write(bad.cert, bad.key)
		now = now.Add(2 * time.Second)
		assert.Equal(t, int64(2), serial(), "%s: the previous certificate stays", bad.name)
		now = now.Add(2 * time.Second)
		assert.Equal(t, int64(2), serial(), "%s: the previous certificate stays", bad.name)
	}
	assert.Equal(t, 3, bytes.Count([]byte(logs.String()), []byte("do not load")), "each broken pair is logged once:\n%s", logs.String())

	require.NoError(t, os.Remove(keyFile))
	now = now.Add(2 * time.Second)
	assert.Equal(t, int64(2), serial(), "a missing file: the previous certificate stays")

	c4, k4 := selfSigned(t, 4)
	write(c4, k4)
	now = now.Add(2 * time.Second)
	assert.Equal(t, int64(4), serial(), "a good pair again is taken")
}

// TestServerTLSRefusals: bad files are refused at startup, naming the setting.
func TestServerTLSRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	c1, k1 := selfSigned(t, 1)
	_, k2 := selfSigned(t, 2)
	cert, key, otherKey := file("c.pem", c1), file("k.pem", k1), file("k2.pem", k2)
	garbage := file("garbage.pem", []byte("not a certificate"))
	cases := []struct {
		name string
		tls  APITLS
		want string
	}{
		{"missing certificate", APITLS{CertFile: filepath.Join(dir, "none.pem"), KeyFile: key}, "COORDINATOR_TLS_CERT_FILE="},
		{"missing key", APITLS{CertFile: cert, KeyFile: filepath.Join(dir, "none.key")}, "COORDINATOR_TLS_KEY_FILE="},
		{"not a certificate", APITLS{CertFile: garbage, KeyFile: key}, "COORDINATOR_TLS_CERT_FILE="},
		{"the key of another certificate", APITLS{CertFile: cert, KeyFile: otherKey}, "private key does not match"},
		{"client CA missing", APITLS{CertFile: cert, KeyFile: key, ClientCAFile: filepath.Join(dir, "none.pem")}, "COORDINATOR_TLS_CLIENT_CA_FILE"},
		{"client CA not PEM", APITLS{CertFile: cert, KeyFile: key, ClientCAFile: garbage}, "COORDINATOR_TLS_CLIENT_CA_FILE=" + garbage + ": no PEM certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			c.APITLS = tc.tls
			_, err := c.ServerTLS(slog.New(slog.DiscardHandler))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	c := Defaults()
	c.APITLS = APITLS{CertFile: cert, KeyFile: key, ClientCAFile: cert}
	cfg, err := c.ServerTLS(slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	assert.Equal(t, tls.RequireAndVerifyClientCert, cfg.ClientAuth)

	// Validate: the pair goes together; a client CA needs a certificate.
	for _, bad := range []APITLS{{CertFile: cert}, {KeyFile: key}, {ClientCAFile: cert}} {
		c := Defaults()
		c.DatabaseURL = "postgres://localhost/app"
		c.APITLS = bad
		assert.ErrorContains(t, c.Validate(), "COORDINATOR_TLS_", "%+v", bad)
	}
}
