// Package openapishape compares Go types with the schemas of api/openapi.yaml, for tests: the
// server's wire form (txntype) and the Go client's own copy are both checked against it.
package openapishape

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// Node is one object of the spec.
type Node = map[string]any

func Load(t testing.TB, path string) Node {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var spec Node
	require.NoError(t, yaml.Unmarshal(raw, &spec))
	return spec
}

// At follows a path of keys through the spec.
func At(t testing.TB, n any, path ...string) Node {
	t.Helper()
	for _, p := range path {
		m, ok := n.(Node)
		require.True(t, ok, "%v: not an object at %q", path, p)
		n = m[p]
	}
	m, ok := n.(Node)
	require.True(t, ok, "%v: not an object", path)
	return m
}

// Compare checks that typ's JSON fields are schema's properties, and recurses into objects;
// excused (nil: none) names a Go field the schema may lack.
func Compare(t testing.TB, spec Node, where string, typ reflect.Type, schema Node, excused func(reflect.Type, string) bool) {
	t.Helper()
	props := Properties(t, spec, schema)
	fields := JSONFields(typ)
	for _, name := range SortedKeys(fields) {
		if _, ok := props[name]; !ok {
			if excused == nil || !excused(typ, name) {
				t.Errorf("%s: field %q is not in the schema (properties %v)", where, name, SortedKeys(props))
			}
		}
	}
	for _, name := range SortedKeys(props) {
		f, ok := fields[name]
		if !ok {
			t.Errorf("%s: property %q has no field in %s", where, name, typ)
			continue
		}
		sub := Resolve(t, spec, props[name].(Node))
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if custom(ft) {
			continue // its own JSON: compared through the type that declares its form
		}
		switch {
		case ft.Kind() == reflect.Slice && isStruct(ft.Elem()):
			sub = Branch(t, spec, sub, "array")
			items, ok := sub["items"].(Node)
			require.True(t, ok, "%s.%s: an array in Go, not in the schema", where, name)
			Compare(t, spec, where+"."+name, ft.Elem(), Resolve(t, spec, items), excused)
		case ft.Kind() == reflect.Map && isStruct(ft.Elem()):
			ap, ok := sub["additionalProperties"].(Node)
			require.True(t, ok, "%s.%s: a map in Go, not in the schema", where, name)
			Compare(t, spec, where+"."+name, ft.Elem(), Resolve(t, spec, ap), excused)
		case isStruct(ft):
			Compare(t, spec, where+"."+name, ft, Branch(t, spec, sub, "object"), excused)
		}
	}
}

// custom reports a type that reads its own JSON (json.Unmarshaler) without declaring its form
// in tagged fields (a timestamp, a header list of two forms): its form is declared by another
// type, compared on its own.
func custom(t reflect.Type) bool {
	if !reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return false
	}
	if t.Kind() != reflect.Struct {
		return true
	}
	for f := range t.Fields() {
		if f.Tag.Get("json") != "" {
			return false
		}
	}
	return true
}

func isStruct(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Time]()
}

// Resolve follows $ref.
func Resolve(t testing.TB, spec Node, n Node) Node {
	t.Helper()
	for {
		ref, ok := n["$ref"].(string)
		if !ok {
			return n
		}
		path := strings.Split(strings.TrimPrefix(ref, "#/"), "/")
		n = At(t, spec, path...)
	}
}

// Branch is the alternative of a oneOf schema (a record's key: a string, null or an object)
// whose type is kind; a schema without oneOf is itself.
func Branch(t testing.TB, spec Node, n Node, kind string) Node {
	t.Helper()
	alts := AsList(n["oneOf"])
	if len(alts) == 0 {
		return n
	}
	for _, a := range alts {
		if b := Resolve(t, spec, a.(Node)); b["type"] == kind {
			return b
		}
	}
	t.Fatalf("no %s among the alternatives %v", kind, alts)
	return nil
}

// Properties merges a schema's properties with those of its allOf parts.
func Properties(t testing.TB, spec Node, n Node) Node {
	t.Helper()
	n = Resolve(t, spec, n)
	out := Node{}
	for _, part := range AsList(n["allOf"]) {
		for k, v := range Properties(t, spec, part.(Node)) {
			out[k] = v
		}
	}
	if p, ok := n["properties"].(Node); ok {
		for k, v := range p {
			out[k] = v
		}
	}
	return out
}

// AsList is v as a list (nil when it is not one).
func AsList(v any) []any {
	l, _ := v.([]any)
	return l
}

// JSONFields are a struct's fields by JSON name, embedded structs flattened.
func JSONFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && tag == "" {
			for k, v := range JSONFields(f.Type) {
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

// SortedKeys are m's keys in order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Validate checks a JSON document against the schema at pointer (a JSON pointer into the spec,
// "/paths/~1v1~1transactions/get/responses/200/content/application~1json/schema") by JSON
// Schema 2020-12, the dialect of OpenAPI 3.1: for one answer, what schemathesis checks of
// every answer it provokes. Formats are annotations, as the dialect has them.
func Validate(t testing.TB, spec Node, pointer string, body []byte) {
	t.Helper()
	raw, err := json.Marshal(spec)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	const url = "https://spec.invalid/openapi.json"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	require.NoError(t, c.AddResource(url, doc))
	sch, err := c.Compile(url + "#" + pointer)
	require.NoError(t, err, "schema %s", pointer)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	require.NoError(t, err, "%s", body)
	require.NoError(t, sch.Validate(v), "%s\nagainst %s", body, pointer)
}
