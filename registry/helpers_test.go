package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/kpgtx/coordinator/internal/registrytest"
)

// target is a registry the tests run against.
type target struct {
	name string
	url  string
}

// targets are the registries to test against: the real one at SCHEMA_REGISTRY_URL when it is
// set (with CI=true an unreachable one fails the test), and always franz-go's in-process
// fake of the Confluent API (github.com/twmb/franz-go/pkg/sr/srfake), which checks the
// encodings and the caching without a server; it is no stand-in for the real registry.
func targets(t *testing.T) []target {
	t.Helper()
	fake := srfake.New()
	t.Cleanup(fake.Close)
	out := []target{{name: "srfake", url: fake.URL()}}
	u := os.Getenv("SCHEMA_REGISTRY_URL")
	if u == "" {
		t.Log("SCHEMA_REGISTRY_URL is not set: testing against franz-go's srfake only" +
			" (no real Schema Registry installs on these machines: see registry/doc.go)")
		return out
	}
	enc, err := New(Config{URL: u, Timeout: 3 * time.Second})
	require.NoError(t, err)
	if err := enc.Ping(context.Background()); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("SCHEMA_REGISTRY_URL=%s does not answer: %v", u, err)
		}
		t.Logf("SCHEMA_REGISTRY_URL=%s does not answer (%v): testing against srfake only", u, err)
		return out
	}
	return append(out, target{name: "real", url: u})
}

// admin registers schemas under subjects of this test only.
type admin struct {
	t   *testing.T
	cl  *sr.Client
	tag string
}

func newAdmin(t *testing.T, url string) *admin {
	t.Helper()
	cl, err := sr.NewClient(sr.URLs(url))
	require.NoError(t, err)
	tag := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return &admin{t: t, cl: cl, tag: fmt.Sprintf("%s-%d", tag, time.Now().UnixNano())}
}

// subject is a subject name unique to this test.
func (a *admin) subject(name string) string { return a.tag + "-" + name }

// register registers text, referencing refs, under the test's subject name and returns the
// schema id.
func (a *admin) register(name string, typ sr.SchemaType, text string, refs ...sr.SchemaReference) (string, int) {
	a.t.Helper()
	subject := a.subject(name)
	return subject, registrytest.Register(a.t, a.cl, subject, sr.Schema{Schema: text, Type: typ, References: refs}).ID
}

// counting puts a reverse proxy in front of url that counts the requests it forwards.
func counting(t *testing.T, target string) (string, *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	var n atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n // the proxy adds target's path
}

// requireJSONEq compares JSON values, not their spelling.
func requireJSONEq(t *testing.T, want, got string) {
	t.Helper()
	var w, g any
	require.NoError(t, json.Unmarshal([]byte(want), &w), "want %s", want)
	require.NoError(t, json.Unmarshal([]byte(got), &g), "got %s", got)
	require.Equal(t, w, g, "got %s", got)
}
