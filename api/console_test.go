package api_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/api"
)

const (
	adminSecret = "admin-0123456789abcdef"
	readSecret  = "read-0123456789abcdef0"
)

// consoleServer is an API server without services, with or without tokens: enough for the
// console's files and for the middleware, which answer before any handler needs a service.
func consoleServer(t *testing.T, withTokens bool) *httptest.Server {
	t.Helper()
	cfg := api.Config{Logger: slog.New(slog.DiscardHandler)}
	if withTokens {
		toks, err := api.ParseTokens("ops:admin:" + adminSecret + ";viewer:read:" + readSecret)
		require.NoError(t, err)
		cfg.Tokens = toks
	}
	srv := httptest.NewServer(api.NewServer(cfg, api.Deps{}).Handler())
	t.Cleanup(srv.Close)
	return srv
}

func fetch(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// TestConsoleFiles: the console is served from the binary, open (its pages hold no data) also
// when the API needs tokens, with a strict Content-Security-Policy and no framing.
func TestConsoleFiles(t *testing.T) {
	t.Parallel()
	srv := consoleServer(t, true)
	tests := []struct {
		path        string
		status      int
		contentType string
		contains    string
	}{
		{"/ui/", http.StatusOK, "text/html", `<script type="module" src="app.js"></script>`},
		{"/ui/app.js", http.StatusOK, "text/javascript", "GET /v1/status"},
		{"/ui/txn.js", http.StatusOK, "text/javascript", "confirmAction"},
		{"/ui/list.js", http.StatusOK, "text/javascript", "waiting for its caller's commit or rollback until"},
		{"/ui/style.css", http.StatusOK, "text/css", "dialog"},
		{"/ui", http.StatusMovedPermanently, "", ""},
		{"/ui/nope.js", http.StatusNotFound, "", ""},
		{"/ui/../v1/status", http.StatusNotFound, "", ""}, // the open prefix never reaches the API
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(http.MethodGet, srv.URL+tt.path, nil)
			require.NoError(t, err)
			resp, body := fetch(t, req)
			require.Equal(t, tt.status, resp.StatusCode, body)
			assert.Contains(t, resp.Header.Get("Content-Type"), tt.contentType)
			assert.Contains(t, body, tt.contains)
			csp := resp.Header.Get("Content-Security-Policy")
			for _, directive := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "form-action 'none'"} {
				assert.Contains(t, csp, directive)
			}
			assert.NotContains(t, csp, "unsafe-inline")
			assert.NotContains(t, csp, "unsafe-eval")
			assert.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
			assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
			assert.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))
			assert.Empty(t, resp.Header.Values("Set-Cookie"), "no cookies")
			if tt.status == http.StatusMovedPermanently {
				assert.Equal(t, "/ui/", resp.Header.Get("Location"))
			}
		})
	}

	// The data is not open: the console's calls need the token.
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/status", nil)
	require.NoError(t, err)
	resp, _ := fetch(t, req)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// TestConsoleSourcesFitTheCSP: the policy forbids inline code and styles, and the pages put
// the server's text into the page as text only.
func TestConsoleSourcesFitTheCSP(t *testing.T) {
	t.Parallel()
	files := api.ConsoleFiles()
	inline := regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]|\son[a-z]+=|\sstyle=|javascript:`)
	n := 0
	err := fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := fs.ReadFile(files, path)
		require.NoError(t, err)
		src := string(b)
		switch {
		case strings.HasSuffix(path, ".html"):
			assert.False(t, inline.MatchString(src), "%s: inline script, handler or style: %q", path, inline.FindString(src))
		case strings.HasSuffix(path, ".js"):
			for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage", "document.cookie"} {
				assert.NotContains(t, src, sink, "%s", path)
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 4, "the console's files are embedded")
}

// TestCrossOriginRefused: a state-changing request that a browser marks as cross-origin is
// refused before authentication, whatever token it carries; requests from the console's own
// origin and from non-browser clients (no Sec-Fetch-Site, no Origin) pass; reads always pass.
func TestCrossOriginRefused(t *testing.T) {
	t.Parallel()
	for _, withTokens := range []bool{false, true} {
		srv := consoleServer(t, withTokens)
		host := strings.TrimPrefix(srv.URL, "http://")
		tests := []struct {
			name    string
			method  string
			path    string
			headers map[string]string
			refused bool
		}{
			{"no browser headers (curl, the CLI)", http.MethodPost, "/v1/transactions", nil, false},
			{"same origin", http.MethodPost, "/v1/transactions", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": srv.URL}, false},
			{"typed by the user", http.MethodPost, "/v1/transactions", map[string]string{"Sec-Fetch-Site": "none"}, false},
			{"Origin of this host, no Sec-Fetch-Site", http.MethodPost, "/v1/transactions", map[string]string{"Origin": "http://" + host}, false},
			{"cross-site", http.MethodPost, "/v1/transactions", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, true},
			{"same-site, other origin", http.MethodPost, "/v1/transactions/x/abort", map[string]string{"Sec-Fetch-Site": "same-site"}, true},
			{"other Origin, no Sec-Fetch-Site", http.MethodPost, "/v1/transactions/x/resolve", map[string]string{"Origin": "http://evil.example"}, true},
			{"null Origin", http.MethodPost, "/v1/recovery/run", map[string]string{"Origin": "null"}, true},
			{"cross-site DELETE", http.MethodDelete, "/v1/transactions/x", map[string]string{"Sec-Fetch-Site": "cross-site"}, true},
			{"cross-site read", http.MethodGet, "/healthz", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				req, err := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader("x"))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "text/plain") // what a cross-site form can send
				if withTokens {
					req.Header.Set("Authorization", "Bearer "+adminSecret)
				}
				for k, v := range tt.headers {
					req.Header.Set(k, v)
				}
				resp, body := fetch(t, req)
				if !tt.refused {
					assert.NotEqual(t, http.StatusForbidden, resp.StatusCode, body)
					return
				}
				require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
				var e struct {
					Error struct{ Class, Message string }
				}
				require.NoError(t, json.Unmarshal([]byte(body), &e), body)
				assert.Equal(t, "cross_origin", e.Error.Class)
				assert.Contains(t, e.Error.Message, "cross-origin")
			})
		}
	}
}
