package api_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/kpgtx/coordinator/api"
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
