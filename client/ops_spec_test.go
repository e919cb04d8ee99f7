package client

import (
	"reflect"
	"testing"
)

// TestSpecFieldsOps: the operators' types' JSON names are their schemas' properties.
func TestSpecFieldsOps(t *testing.T) {
	t.Parallel()
	spec := loadSpec(t)
	schema := func(name string) node { return at(t, spec, "components", "schemas", name) }
	for _, tc := range []struct {
		name   string
		typ    reflect.Type
		schema node
	}{
		{"History", reflect.TypeFor[History](), schema("History")},
		{"HangingList", reflect.TypeFor[HangingList](), schema("HangingList")},
	} {
		compare(t, spec, tc.name, tc.typ, tc.schema)
	}
}
