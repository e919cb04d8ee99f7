package client

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kpgtx/coordinator/internal/openapishape"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The client is written by hand from api/openapi.yaml; these tests keep the two together:
// every operation has a method and every enum its constants (the types' JSON names are
// checked with the server's by test.TestWireFormMatchesSpec).

type node = openapishape.Node

func loadSpec(t *testing.T) node { return openapishape.Load(t, "../api/openapi.yaml") }

var at = openapishape.At

// operations maps each operationId of the spec to the client's method(s).
var operations = map[string][]string{
	"createTransaction":            {"Submit", "Prepare"},
	"commitTransaction":            {"Commit"},
	"rollbackTransaction":          {"Rollback"},
	"listTransactions":             {"List", "ListInDoubt", "All", "AllInDoubt"},
	"getTransaction":               {"Get"},
	"retryTransaction":             {"Retry"},
	"abortTransaction":             {"Abort"},
	"resolveTransaction":           {"Resolve"},
	"runRecovery":                  {"RunRecovery"},
	"getStatus":                    {"Status"},
	"getHistory":                   {"History"},
	"listHangingKafkaTransactions": {"HangingKafkaTransactions"},
	"getOpenAPI":                   {"OpenAPI"},
	"healthz":                      {"Health"},
	"readyz":                       {"Ready"},
	"metrics":                      {"Metrics"},
}

func TestSpecOperations(t *testing.T) {
	t.Parallel()
	spec := loadSpec(t)
	seen := map[string]bool{}
	ct := reflect.TypeFor[*Client]()
	for path, item := range at(t, spec, "paths") {
		for method, op := range item.(node) {
			id, _ := op.(node)["operationId"].(string)
			require.NotEmpty(t, id, "%s %s has no operationId", method, path)
			seen[id] = true
			methods, ok := operations[id]
			if !assert.True(t, ok, "operation %s (%s %s) has no client method", id, strings.ToUpper(method), path) {
				continue
			}
			for _, m := range methods {
				_, ok := ct.MethodByName(m)
				assert.True(t, ok, "operation %s: (*Client).%s is missing", id, m)
			}
		}
	}
	for id := range operations {
		assert.True(t, seen[id], "the client maps %s, which the spec does not have", id)
	}
}

// TestSpecEnums checks the client's constants against the spec's enums.
func TestSpecEnums(t *testing.T) {
	t.Parallel()
	spec := loadSpec(t)
	var states []string
	for _, s := range openapishape.AsList(at(t, spec, "components", "schemas", "State")["enum"]) {
		states = append(states, s.(string))
	}
	ours := []State{StateActive, StateAborting, StatePrepared, StateCommitting, StateCommitted, StateAborted, StateHeuristic, StateHeuristicMixed}
	got := make([]string, len(ours))
	for i, s := range ours {
		got[i] = string(s)
	}
	assert.ElementsMatch(t, states, got)
	var listStates []string
	for _, p := range openapishape.AsList(at(t, spec, "paths", "/v1/transactions", "get")["parameters"]) {
		if p.(node)["name"] == "state" {
			for _, s := range openapishape.AsList(p.(node)["schema"].(node)["enum"]) {
				listStates = append(listStates, s.(string))
			}
		}
	}
	assert.True(t, slices.Contains(listStates, string(InDoubt)), "the list's states %v include %s", listStates, InDoubt)
	var decisions []string
	for _, d := range openapishape.AsList(at(t, spec, "components", "schemas", "TransactionRequest", "properties", "decision")["enum"]) {
		if d != nil {
			decisions = append(decisions, d.(string))
		}
	}
	assert.ElementsMatch(t, decisions, []string{DecisionCoordinator, DecisionExternal})
}
