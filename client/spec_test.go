package client

import (
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The client is written by hand from api/openapi.yaml; these tests keep the two together:
// every operation has a method, and every type's JSON names are its schema's properties.

type node = map[string]any

func loadSpec(t *testing.T) node {
	t.Helper()
	raw, err := os.ReadFile("../api/openapi.yaml")
	require.NoError(t, err)
	var spec node
	require.NoError(t, yaml.Unmarshal(raw, &spec))
	return spec
}

// at follows a path of keys through the spec.
func at(t *testing.T, n any, path ...string) node {
	t.Helper()
	for _, p := range path {
		m, ok := n.(node)
		require.True(t, ok, "%v: not an object at %q", path, p)
		n = m[p]
	}
	m, ok := n.(node)
	require.True(t, ok, "%v: not an object", path)
	return m
}

// operations maps each operationId of the spec to the client's method(s).
var operations = map[string][]string{
	"createTransaction":            {"Submit"},
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

// TestSpecFields checks each type's JSON names against its schema, recursively: a name the
// schema lacks, or a property the type lacks, fails.
func TestSpecFields(t *testing.T) {
	t.Parallel()
	spec := loadSpec(t)
	schema := func(name string) node { return at(t, spec, "components", "schemas", name) }
	list := at(t, spec, "paths", "/v1/transactions", "get", "responses", "200", "content", "application/json", "schema")
	pages := list["anyOf"].([]any)
	require.Len(t, pages, 2)
	cases := []struct {
		name   string
		typ    reflect.Type
		schema node
	}{
		{"TransactionRequest", reflect.TypeFor[TransactionRequest](), schema("TransactionRequest")},
		{"TransactionWithEvents", reflect.TypeFor[Transaction](), schema("TransactionWithEvents")},
		{"AdminRequest", reflect.TypeFor[AdminRequest](), schema("AdminRequest")},
		{"ResolveRequest", reflect.TypeFor[ResolveRequest](), schema("ResolveRequest")},
		{"InDoubtEntry", reflect.TypeFor[InDoubtEntry](), schema("InDoubtEntry")},
		{"Readiness", reflect.TypeFor[Readiness](), schema("Readiness")},
		{"Error", reflect.TypeFor[errorBody](), schema("Error")},
		{"list page", reflect.TypeFor[Page](), pages[0].(node)},
		{"in-doubt page", reflect.TypeFor[InDoubtPage](), pages[1].(node)},
		{"recovery pass", reflect.TypeFor[RecoveryResult](),
			at(t, spec, "paths", "/v1/recovery/run", "post", "responses", "200", "content", "application/json", "schema")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			compare(t, spec, tc.name, tc.typ, tc.schema)
		})
	}
}

// excused reports a Go field the schema may lack: Transaction's events, which one type
// carries for both schemas Transaction (lists, the in-doubt view's log row: never sent, stays
// empty) and TransactionWithEvents (Get and the operator actions).
func excused(typ reflect.Type, name string) bool {
	return name == "events" && (typ == reflect.TypeFor[Transaction]() || typ == reflect.TypeFor[InDoubtLog]())
}

// compare checks that typ's JSON fields are schema's properties, and recurses into objects.
func compare(t *testing.T, spec node, where string, typ reflect.Type, schema node) {
	t.Helper()
	props := properties(t, spec, schema)
	fields := jsonFields(typ)
	for _, name := range sortedKeys(fields) {
		if _, ok := props[name]; !ok {
			if !excused(typ, name) {
				t.Errorf("%s: field %q is not in the schema (properties %v)", where, name, sortedKeys(props))
			}
		}
	}
	for _, name := range sortedKeys(props) {
		f, ok := fields[name]
		if !ok {
			t.Errorf("%s: property %q has no field in %s", where, name, typ)
			continue
		}
		sub := resolve(t, spec, props[name].(node))
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Slice && isStruct(ft.Elem()):
			sub = branch(t, spec, sub, "array")
			items, ok := sub["items"].(node)
			require.True(t, ok, "%s.%s: an array in Go, not in the schema", where, name)
			compare(t, spec, where+"."+name, ft.Elem(), resolve(t, spec, items))
		case ft.Kind() == reflect.Map && isStruct(ft.Elem()):
			ap, ok := sub["additionalProperties"].(node)
			require.True(t, ok, "%s.%s: a map in Go, not in the schema", where, name)
			compare(t, spec, where+"."+name, ft.Elem(), resolve(t, spec, ap))
		case isStruct(ft):
			compare(t, spec, where+"."+name, ft, branch(t, spec, sub, "object"))
		}
	}
}

func isStruct(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Time]()
}

// resolve follows $ref.
func resolve(t *testing.T, spec node, n node) node {
	t.Helper()
	for {
		ref, ok := n["$ref"].(string)
		if !ok {
			return n
		}
		path := strings.Split(strings.TrimPrefix(ref, "#/"), "/")
		n = at(t, spec, path...)
	}
}

// branch is the alternative of a oneOf schema (a record's key: a string, null or an object)
// whose type is kind; a schema without oneOf is itself.
func branch(t *testing.T, spec node, n node, kind string) node {
	t.Helper()
	alts := asList(n["oneOf"])
	if len(alts) == 0 {
		return n
	}
	for _, a := range alts {
		if b := resolve(t, spec, a.(node)); b["type"] == kind {
			return b
		}
	}
	t.Fatalf("no %s among the alternatives %v", kind, alts)
	return nil
}

// properties merges a schema's properties with those of its allOf parts.
func properties(t *testing.T, spec node, n node) node {
	t.Helper()
	n = resolve(t, spec, n)
	out := node{}
	for _, part := range asList(n["allOf"]) {
		for k, v := range properties(t, spec, part.(node)) {
			out[k] = v
		}
	}
	if p, ok := n["properties"].(node); ok {
		for k, v := range p {
			out[k] = v
		}
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// jsonFields are a struct's fields by JSON name, embedded structs flattened.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && tag == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestSpecEnums checks the client's constants against the spec's enums.
func TestSpecEnums(t *testing.T) {
	t.Parallel()
	spec := loadSpec(t)
	var states []string
	for _, s := range asList(at(t, spec, "components", "schemas", "State")["enum"]) {
		states = append(states, s.(string))
	}
	ours := []State{StateActive, StateAborting, StatePrepared, StateCommitting, StateCommitted, StateAborted, StateHeuristic, StateHeuristicMixed}
	got := make([]string, len(ours))
	for i, s := range ours {
		got[i] = string(s)
	}
	assert.ElementsMatch(t, states, got)
	var listStates []string
	for _, p := range asList(at(t, spec, "paths", "/v1/transactions", "get")["parameters"]) {
		if p.(node)["name"] == "state" {
			for _, s := range asList(p.(node)["schema"].(node)["enum"]) {
				listStates = append(listStates, s.(string))
			}
		}
	}
	assert.True(t, slices.Contains(listStates, string(InDoubt)), "the list's states %v include %s", listStates, InDoubt)
}
