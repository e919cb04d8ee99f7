package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func TestRequiredRole(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, target string
		role           Role
		open           bool
	}{
		{"GET", "/healthz", "", true},
		{"HEAD", "/healthz", "", true},
		{"GET", "/readyz", "", true},
		{"GET", "/openapi.yaml", "", true},
		{"POST", "/healthz", RoleAdmin, false},
		{"GET", "/healthz/", RoleRead, false},
		{"GET", "/health%7a", RoleRead, false},
		{"GET", "/metrics", RoleRead, false},
		{"GET", "/v1/transactions", RoleRead, false},
		{"GET", "/v1/transactions/x", RoleRead, false},
		{"GET", "/v1/admin/in-doubt", RoleRead, false},
		{"POST", "/v1/transactions", RoleSubmit, false},
		{"POST", "/v1/transactions/", RoleAdmin, false},
		{"POST", "/v1/%74ransactions", RoleAdmin, false}, // escaped: never the lenient rule
		{"POST", "/v1/transactions/x/retry", RoleAdmin, false},
		{"POST", "/v1/transactions/x/abort", RoleAdmin, false},
		{"POST", "/v1/transactions/x/resolve", RoleAdmin, false},
		{"POST", "/v1/recovery/run", RoleAdmin, false},
		{"DELETE", "/v1/transactions/x", RoleAdmin, false},
		{"PUT", "/v1/transactions", RoleAdmin, false},
		{"OPTIONS", "/v1/transactions", RoleAdmin, false},
		{"GET", "/v1/status", RoleRead, false},
		{"GET", "/ui", "", true}, // the console's static files (console.go)
		{"GET", "/ui/", "", true},
		{"HEAD", "/ui/app.js", "", true},
		{"GET", "/uix", RoleRead, false},
		{"GET", "/ui%2Fapp.js", RoleRead, false},
		{"POST", "/ui/", RoleAdmin, false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.target, nil)
		role, open := requiredRole(r)
		assert.Equal(t, tt.role, role, "%s %s", tt.method, tt.target)
		assert.Equal(t, tt.open, open, "%s %s", tt.method, tt.target)
	}
}

func TestParseTokens(t *testing.T) {
	t.Parallel()
	toks, err := ParseTokens("ci:submit:0123456789abcdef0123;\n ops:admin:zzzzzzzzzzzzzzzzzzzz dash:read,submit:rrrrrrrrrrrrrrrr:with:colons")
	require.NoError(t, err)
	require.Len(t, toks, 3)
	assert.Equal(t, "ci:submit", toks[0].String())
	assert.Equal(t, "ops:admin", toks[1].String())
	assert.Equal(t, "dash:read,submit", toks[2].String())
	assert.Equal(t, "rrrrrrrrrrrrrrrr:with:colons", toks[2].Secret.Reveal())
	assert.True(t, toks[1].Has(RoleRead) && toks[1].Has(RoleSubmit) && toks[1].Has(RoleAdmin), "admin implies every role")
	assert.True(t, toks[0].Has(RoleSubmit))
	assert.False(t, toks[0].Has(RoleRead))
	assert.False(t, toks[2].Has(RoleAdmin))

	const secret = "s3cr3t-s3cr3t-s3cr3t"
	bad := map[string]string{
		"no roles":       "ci:" + secret,
		"unknown role":   "ci:write:" + secret,
		"short token":    "ci:submit:short",
		"bad name":       "c i:submit:" + secret,
		"duplicate name": "a:read:" + secret + ";a:read:" + secret + "x",
		"same token":     "a:read:" + secret + ";b:submit:" + secret,
		"bad characters": "a:read:" + secret + "\"",
	}
	for name, in := range bad {
		_, err := ParseTokens(in)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "COORDINATOR_TOKENS", name)
		assert.NotContains(t, err.Error(), "s3cr3t", "%s: the error shows the token", name)
	}

	// A token in the name's or the role's place is not printed back either.
	misplaced := map[string]string{
		"token as the role": "ci:" + secret + ":" + secret + "x",
		"swapped":           secret + ":ci:submit",
		"no colons":         secret,
		"short, in order":   "ci:submit:" + secret[:8],
	}
	for name, in := range misplaced {
		_, err := ParseTokens(in)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "entry 1", name)
		assert.NotContains(t, err.Error(), secret[:8], "%s: the error prints part of the entry", name)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	t.Parallel()
	const secret = "p4ssw0rd-p4ssw0rd"
	tok := Token{Name: "ci", Roles: []Role{RoleSubmit}, Secret: Secret(secret)}
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	logger.Info("x", "token", tok, "tokens", []Token{tok}, "secret", tok.Secret)
	js, err := json.Marshal(tok)
	require.NoError(t, err)
	for _, out := range []string{
		fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s %q %x", tok, tok, tok, tok.Secret, tok.Secret, tok.Secret),
		fmt.Sprintf("%+v %#v", []Token{tok}, struct{ T Token }{tok}), string(js), logs.String(),
	} {
		assert.NotContains(t, out, secret)
		assert.NotContains(t, out, fmt.Sprintf("%x", secret))
	}
}

func TestWho(t *testing.T) {
	t.Parallel()
	toks, err := ParseTokens("ops:admin:0123456789abcdef0123")
	require.NoError(t, err)
	var seen string
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = who(r) })

	open := &Server{cfg: Config{Logger: slog.Default()}}
	open.authenticate()(next).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/recovery/run", nil))
	assert.Equal(t, "anonymous", seen, "without tokens")

	s := &Server{cfg: Config{Logger: slog.Default(), Tokens: toks}}
	r := httptest.NewRequest("POST", "/v1/recovery/run", nil)
	r.Header.Set("Authorization", "bearer 0123456789abcdef0123") // the scheme is case-insensitive
	w := httptest.NewRecorder()
	s.authenticate()(next).ServeHTTP(w, r)
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "ops", seen)
}

func TestKeyringLookup(t *testing.T) {
	t.Parallel()
	toks, err := ParseTokens("a:read:aaaaaaaaaaaaaaaaaaaa;b:submit:bbbbbbbbbbbbbbbbbbbb")
	require.NoError(t, err)
	k := newKeyring(toks)
	for presented, want := range map[string]string{
		"aaaaaaaaaaaaaaaaaaaa": "a", "bbbbbbbbbbbbbbbbbbbb": "b", "": "", "aaaaaaaaaaaaaaaaaaa": "",
		"aaaaaaaaaaaaaaaaaaaaa": "", strings.Repeat("b", 1000): "",
	} {
		tok, ok := k.lookup(presented)
		assert.Equal(t, want != "", ok, "%q", presented)
		assert.Equal(t, want, tok.Name)
	}
}

// TestOpenAPIRoles: every operation of openapi.yaml is either open (security: []) and open for
// the middleware, or declares x-required-role equal to the middleware's rule and documents 401
// and 403.
func TestOpenAPIRoles(t *testing.T) {
	t.Parallel()
	var spec struct {
		Security []map[string][]string `yaml:"security"`
		Paths    map[string]map[string]struct {
			Security  *[]map[string][]string `yaml:"security"`
			Role      string                 `yaml:"x-required-role"`
			Responses map[string]yaml.Node   `yaml:"responses"`
		} `yaml:"paths"`
		Components struct {
			SecuritySchemes map[string]struct {
				Type   string `yaml:"type"`
				Scheme string `yaml:"scheme"`
			} `yaml:"securitySchemes"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(OpenAPI, &spec))
	require.Equal(t, []map[string][]string{{"bearerAuth": {}}}, spec.Security, "every operation needs the bearer token unless it says otherwise")
	assert.Equal(t, "bearer", spec.Components.SecuritySchemes["bearerAuth"].Scheme)
	for path, item := range spec.Paths {
		for method, op := range item {
			if !slices.Contains([]string{"get", "post", "put", "patch", "delete", "head", "options"}, method) {
				continue
			}
			where := strings.ToUpper(method) + " " + path
			r := httptest.NewRequest(strings.ToUpper(method), strings.ReplaceAll(path, "{id}", "x"), nil)
			role, open := requiredRole(r)
			if op.Security != nil && len(*op.Security) == 0 {
				assert.True(t, open, "%s is open in the spec but not for the middleware", where)
				continue
			}
			assert.False(t, open, "%s is open for the middleware but not in the spec", where)
			assert.Equal(t, string(role), op.Role, "%s: x-required-role", where)
			for _, status := range []string{"401", "403"} {
				_, ok := op.Responses[status]
				assert.True(t, ok, "%s documents %s", where, status)
			}
		}
	}
}
