package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/kpgtx/coordinator/api"
	"github.com/kpgtx/coordinator/operator"
)

// TestHistorySeriesInSpec: every series GET /v1/history answers is in the spec, and the spec
// names no other (required, so a client may rely on each).
func TestHistorySeriesInSpec(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				History struct {
					Properties struct {
						Series struct {
							Required   []string       `yaml:"required"`
							Properties map[string]any `yaml:"properties"`
						} `yaml:"series"`
					} `yaml:"properties"`
				} `yaml:"History"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(api.OpenAPI, &doc))
	series := doc.Components.Schemas.History.Properties.Series
	assert.ElementsMatch(t, api.HistorySeries(), series.Required)
	names := make([]string, 0, len(series.Properties))
	for n := range series.Properties {
		names = append(names, n)
	}
	assert.ElementsMatch(t, api.HistorySeries(), names)
}

// TestHistoryAndHangingWithoutTheirSources: without a sampler the history is empty with every
// series present; without Kafka nothing hangs.
func TestHistoryAndHangingWithoutTheirSources(t *testing.T) {
	h := api.NewServer(api.Config{}, api.Deps{Operator: operator.New(operator.Config{})}).Handler()
	for _, c := range []struct {
		path string
		want map[string]any
	}{
		{"/v1/history", map[string]any{"times": []any{}, "interval_seconds": 0.0}},
		{"/v1/kafka/hanging", map[string]any{"kafka": false, "hanging": []any{}, "repaired": []any{}, "repaired_total": 0.0}},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", c.path, rec.Body)
		var body map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		for k, v := range c.want {
			assert.Equal(t, v, body[k], "%s: %s", c.path, k)
		}
		if c.path == "/v1/history" {
			series, _ := body["series"].(map[string]any)
			assert.Len(t, series, len(api.HistorySeries()))
		}
	}
}
