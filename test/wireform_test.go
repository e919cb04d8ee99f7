package test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/client"
	"github.com/kpgtx/coordinator/internal/openapishape"
	"github.com/kpgtx/coordinator/txntype"
)

// TestWireFormMatchesSpec: the wire form is declared once on each side (txntype for the
// server, the Go client's own copy, which keeps it free of server dependencies) and both are
// checked here against api/openapi.yaml, recursively: a JSON name the schema lacks, or a
// property the type lacks, fails.
func TestWireFormMatchesSpec(t *testing.T) {
	t.Parallel()
	spec := openapishape.Load(t, "../api/openapi.yaml")
	schema := func(name string) openapishape.Node {
		return openapishape.At(t, spec, "components", "schemas", name)
	}
	list := openapishape.At(t, spec, "paths", "/v1/transactions", "get", "responses", "200", "content", "application/json", "schema")
	pages := openapishape.AsList(list["anyOf"])
	require.Len(t, pages, 2)
	// Transaction's events: one Go type carries both schemas Transaction (lists, the in-doubt
	// view's log row: never sent, stays empty) and TransactionWithEvents (Get and the operator
	// actions).
	excused := func(typ reflect.Type, name string) bool {
		return name == "events" && (typ == reflect.TypeFor[client.Transaction]() || typ == reflect.TypeFor[client.InDoubtLog]())
	}
	cases := []struct {
		name   string
		typ    reflect.Type
		schema openapishape.Node
	}{
		// The server's vocabulary: what the API decodes strictly (api/strict.go walks these
		// types) and what it answers.
		{"server TransactionRequest", reflect.TypeFor[txntype.RequestBody](), schema("TransactionRequest")},
		{"server Transaction", reflect.TypeFor[txntype.Transaction](), schema("Transaction")},
		{"server header entry", reflect.TypeFor[txntype.HeaderEntry](), headerEntry(t, spec)},
		{"server Event", reflect.TypeFor[txntype.Event](), schema("Event")},
		// The client's copy.
		{"client TransactionRequest", reflect.TypeFor[client.TransactionRequest](), schema("TransactionRequest")},
		{"client TransactionWithEvents", reflect.TypeFor[client.Transaction](), schema("TransactionWithEvents")},
		{"client AdminRequest", reflect.TypeFor[client.AdminRequest](), schema("AdminRequest")},
		{"client ResolveRequest", reflect.TypeFor[client.ResolveRequest](), schema("ResolveRequest")},
		{"client CommitRequest", reflect.TypeFor[client.CommitRequest](), schema("CommitRequest")},
		{"client InDoubtEntry", reflect.TypeFor[client.InDoubtEntry](), schema("InDoubtEntry")},
		{"client Readiness", reflect.TypeFor[client.Readiness](), schema("Readiness")},
		{"client list page", reflect.TypeFor[client.Page](), pages[0].(openapishape.Node)},
		{"client in-doubt page", reflect.TypeFor[client.InDoubtPage](), pages[1].(openapishape.Node)},
		{"client recovery pass", reflect.TypeFor[client.RecoveryResult](),
			openapishape.At(t, spec, "paths", "/v1/recovery/run", "post", "responses", "200", "content", "application/json", "schema")},
		{"client History", reflect.TypeFor[client.History](), schema("History")},
		{"client HangingList", reflect.TypeFor[client.HangingList](), schema("HangingList")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			openapishape.Compare(t, spec, tc.name, tc.typ, tc.schema, excused)
		})
	}
}

// headerEntry is the schema of one entry of a record's headers in their list form.
func headerEntry(t *testing.T, spec openapishape.Node) openapishape.Node {
	t.Helper()
	record := openapishape.Properties(t, spec, openapishape.At(t, spec, "components", "schemas", "TransactionRequest"))["kafka"].(openapishape.Node)
	items := openapishape.Resolve(t, spec, openapishape.Resolve(t, spec, record)["items"].(openapishape.Node))
	headers := openapishape.Resolve(t, spec, openapishape.Properties(t, spec, items)["headers"].(openapishape.Node))
	list := openapishape.Branch(t, spec, headers, "array")
	return openapishape.Resolve(t, spec, list["items"].(openapishape.Node))
}
