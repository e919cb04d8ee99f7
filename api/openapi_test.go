package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/kpgtx/coordinator/api"
)

// spec is the part of the OpenAPI document the tests read.
type spec struct {
	OpenAPI string                                `yaml:"openapi"`
	Paths   map[string]map[string]operationObject `yaml:"paths"`
}

type operationObject struct {
	OperationID string               `yaml:"operationId"`
	Responses   map[string]yaml.Node `yaml:"responses"`
}

func loadSpec(t *testing.T) spec {
	t.Helper()
	var s spec
	require.NoError(t, yaml.Unmarshal(api.OpenAPI, &s))
	require.NotEmpty(t, s.Paths)
	return s
}

// httpMethods are the keys of an OpenAPI path item that are operations.
var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func specRoutes(t *testing.T, s spec) []string {
	t.Helper()
	var routes []string
	for path, item := range s.Paths {
		for key := range item {
			if slices.Contains(httpMethods, key) {
				routes = append(routes, strings.ToUpper(key)+" "+path)
			}
		}
	}
	sort.Strings(routes)
	return routes
}

// consoleRoutes are the web console's static pages (console.go): not API operations, so not in
// the spec, which mentions them in its description.
var consoleRoutes = []string{"GET /ui", "GET /ui/*"}

func routerRoutes(t *testing.T) []string {
	t.Helper()
	h := api.NewServer(api.Config{}, api.Deps{}).Handler()
	r, ok := h.(chi.Routes)
	require.True(t, ok, "Handler returns %T, not a chi router", h)
	var routes []string
	var console []string
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if slices.Contains(consoleRoutes, method+" "+route) {
			console = append(console, method+" "+route)
			return nil
		}
		routes = append(routes, method+" "+route)
		return nil
	})
	require.NoError(t, err)
	sort.Strings(console)
	require.Equal(t, consoleRoutes, console, "the console's routes")
	sort.Strings(routes)
	return routes
}

func TestOpenAPIVersion(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "3.1.0", loadSpec(t).OpenAPI)
}

func TestOpenAPIMatchesRouter(t *testing.T) {
	t.Parallel()
	want := specRoutes(t, loadSpec(t))
	got := routerRoutes(t)
	require.NotEmpty(t, got)
	assert.Equal(t, want, got, "routes in openapi.yaml vs the chi router")
}

func TestOpenAPIOperationIDsUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for path, item := range loadSpec(t).Paths {
		for method, op := range item {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			where := strings.ToUpper(method) + " " + path
			require.NotEmpty(t, op.OperationID, where)
			prev, dup := seen[op.OperationID]
			assert.False(t, dup, "operationId %q used by %s and %s", op.OperationID, prev, where)
			seen[op.OperationID] = where
		}
	}
}

func TestOpenAPIResponses(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	tests := []struct {
		method, path string
		statuses     []string
	}{
		{"post", "/v1/transactions", []string{"200", "202", "400", "409", "413", "422", "503"}},
		{"get", "/v1/transactions", []string{"200", "400"}},
		{"get", "/v1/transactions/{id}", []string{"200", "404"}},
		{"get", "/openapi.yaml", []string{"200"}},
		{"get", "/healthz", []string{"200"}},
		{"get", "/v1/status", []string{"200", "503"}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			item, ok := s.Paths[tt.path]
			require.True(t, ok, "path %s in the spec", tt.path)
			op, ok := item[tt.method]
			require.True(t, ok, "%s %s in the spec", tt.method, tt.path)
			for _, status := range tt.statuses {
				resp, ok := op.Responses[status]
				if assert.True(t, ok, "%s %s documents %s", tt.method, tt.path, status) {
					var r struct {
						Description string `yaml:"description"`
					}
					require.NoError(t, resp.Decode(&r))
					assert.NotEmpty(t, r.Description, "%s %s %s has a description", tt.method, tt.path, status)
				}
			}
		})
	}
}

// rawSpec is the whole document as generic YAML.
func rawSpec(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(api.OpenAPI, &m))
	return m
}

// at follows keys through nested maps.
func at(t *testing.T, v any, keys ...string) any {
	t.Helper()
	for _, k := range keys {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%q: not a mapping", k)
		v, ok = m[k]
		require.True(t, ok, "no key %q", k)
	}
	return v
}

// walkYAML calls f on every mapping of the document, with its path.
func walkYAML(v any, path string, f func(path string, m map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		f(path, x)
		for k, c := range x {
			walkYAML(c, path+"/"+k, f)
		}
	case []any:
		for i, c := range x {
			walkYAML(c, fmt.Sprintf("%s[%d]", path, i), f)
		}
	}
}

// TestOpenAPIResponsesHaveNoOneOf: response bodies are open objects (a Transaction carries an
// error object too), so alternatives among them are anyOf: with oneOf, a body matching two
// branches would be declared invalid.
func TestOpenAPIResponsesHaveNoOneOf(t *testing.T) {
	t.Parallel()
	walkYAML(rawSpec(t)["paths"], "paths", func(path string, m map[string]any) {
		if strings.Contains(path, "/responses/") {
			assert.NotContains(t, m, "oneOf", "%s: use anyOf for overlapping response alternatives", path)
		}
	})
}

// TestOpenAPIAgreesWithServer: the forms the server checks are the ones the document gives.
func TestOpenAPIAgreesWithServer(t *testing.T) {
	t.Parallel()
	s := rawSpec(t)
	params := at(t, s, "paths", "/v1/transactions", "get", "parameters").([]any)
	found := false
	for _, p := range params {
		if pm, ok := p.(map[string]any); ok && pm["name"] == "older_than" {
			found = true
			assert.Equal(t, api.OlderThanPattern, at(t, pm, "schema", "pattern"), "older_than: the server's pattern")
		}
	}
	assert.True(t, found, "older_than is documented")

	req := at(t, s, "components", "schemas", "TransactionRequest")
	assert.EqualValues(t, api.MinTimeoutMS, at(t, req, "properties", "timeout_ms", "minimum"))
	assert.Equal(t, at(t, req, "properties", "id", "pattern"), at(t, s, "components", "parameters", "ID", "schema", "pattern"),
		"a path id has the form of a request id")
	// "At least one of sql, kafka and kafka_offsets" is in the schema: anyOf of the three, the
	// arrays non-empty (an offsets object has non-empty offsets of its own).
	var required []string
	for _, b := range at(t, req, "anyOf").([]any) {
		field := at(t, b, "required").([]any)[0].(string)
		required = append(required, field)
		if field != "kafka_offsets" {
			assert.EqualValues(t, 1, at(t, b, "properties", field, "minItems"), field)
		}
	}
	assert.ElementsMatch(t, []string{"sql", "kafka", "kafka_offsets"}, required)
	assert.EqualValues(t, 1, at(t, s, "components", "schemas", "OffsetCommit", "properties", "offsets", "minItems"))
}

// TestOpenAPIDocumentsRefusals: every operation but the open ones documents 429 (the in-flight
// and body-memory bounds), every one with a body 415, every one with an {id} 400.
func TestOpenAPIDocumentsRefusals(t *testing.T) {
	t.Parallel()
	exempt := map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}
	for path, item := range rawSpec(t)["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			responses := at(t, op, "responses").(map[string]any)
			where := strings.ToUpper(method) + " " + path
			if !exempt[path] {
				assert.Contains(t, responses, "429", where)
			}
			if _, body := op.(map[string]any)["requestBody"]; body {
				assert.Contains(t, responses, "415", where)
			}
			if strings.Contains(path, "{id}") {
				assert.Contains(t, responses, "400", where)
			}
		}
	}
}
