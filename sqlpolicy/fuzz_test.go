package sqlpolicy

import (
	"strings"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// forbiddenNodes are parse-tree node names that an accepted statement never contains. The
// fuzz target reads them from the parser's JSON output, a path independent of the protobuf
// walk that Check uses.
var forbiddenNodes = []string{
	`"TransactionStmt"`, `"DiscardStmt"`, `"ListenStmt"`, `"UnlistenStmt"`, `"PrepareStmt"`,
	`"DeallocateStmt"`, `"LoadStmt"`, `"AlterRoleSetStmt"`, `"AlterDatabaseSetStmt"`,
	`"AlterSystemStmt"`, `"relpersistence":"t"`, `"VAR_RESET`,
}

// FuzzCheck runs in the normal test run over its seed corpus (every refused and allowed form
// of policy_test.go); `go test -fuzz FuzzCheck ./sqlpolicy` explores further.
func FuzzCheck(f *testing.F) {
	for _, tc := range refused {
		f.Add(tc.stmt)
	}
	for _, s := range []string{"INSERT INTO t VALUES ($1)", "SET LOCAL a.b = 1", "SELECT 'COMMIT'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stmt string) {
		err := check(stmt, Options{})
		if err != nil {
			// Comments and white space around a refused statement never make it acceptable.
			for _, wrapped := range []string{"/**/ " + stmt, stmt + "\n-- x", " \f\t" + stmt + " \n"} {
				if check(wrapped, Options{}) == nil {
					t.Fatalf("%q is refused (%v) but %q is accepted", stmt, err, wrapped)
				}
			}
			return
		}
		if strings.IndexByte(stmt, 0) >= 0 {
			t.Fatalf("accepted a statement with NUL: %q", stmt)
		}
		js, perr := pg.ParseToJSON(stmt)
		if perr != nil {
			t.Fatalf("accepted %q, which does not parse: %v", stmt, perr)
		}
		if n := strings.Count(js, `"stmt":`); n != 1 {
			t.Fatalf("accepted %q with %d statements: %s", stmt, n, js)
		}
		for _, node := range forbiddenNodes {
			if strings.Contains(js, node) {
				t.Fatalf("accepted %q whose tree holds %s: %s", stmt, node, js)
			}
		}
		if strings.Contains(js, `"VariableSetStmt"`) && !strings.Contains(js, `"is_local":true`) &&
			!strings.Contains(js, `"name":"TRANSACTION"`) {
			t.Fatalf("accepted a session-level SET: %q: %s", stmt, js)
		}
	})
}
