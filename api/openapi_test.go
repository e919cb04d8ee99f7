package api_test

import (
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

func routerRoutes(t *testing.T) []string {
	t.Helper()
	h := api.NewServer(api.Config{}, api.Deps{}).Handler()
	r, ok := h.(chi.Routes)
	require.True(t, ok, "Handler returns %T, not a chi router", h)
	var routes []string
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, method+" "+route)
		return nil
	})
	require.NoError(t, err)
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
