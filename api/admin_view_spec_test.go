package api

import (
	"testing"

	"github.com/kpgtx/coordinator/operator"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The in-doubt view's issues and sources are exactly the spec's enums: an issue the server
// sends must be one a client generated from the spec can read.
func TestInDoubtEnumsMatchSpec(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Enum  []string `yaml:"enum"`
					Items struct {
						Enum []string `yaml:"enum"`
					} `yaml:"items"`
				} `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(OpenAPI, &doc))
	entry, ok := doc.Components.Schemas["InDoubtEntry"]
	require.True(t, ok, "InDoubtEntry schema")
	assert.ElementsMatch(t, []string{operator.IssueInDoubt, operator.IssueHeuristic, operator.IssueOrphan, operator.IssueLeftover, operator.IssueKafkaOpen, operator.IssueHanging, operator.IssueWaiting},
		entry.Properties["issue"].Enum)
	assert.ElementsMatch(t, []string{operator.SourceLog, operator.SourcePostgres, operator.SourceKafka}, entry.Properties["sources"].Items.Enum)
}
