package sqlpolicy

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// SetsIsolation reports whether a statement that Check accepts sets the isolation level or the
// deferrable mode (SET TRANSACTION, or SET LOCAL of transaction_isolation or
// transaction_deferrable). PostgreSQL takes those only before the
// transaction's first query, so the participant runs such a statement, when it leads its
// request's statements on a database, right after BEGIN and before its own first query
// (sqltxn.Databases.Run). A read-only mode can be set later, and is not one of these.
func SetsIsolation(stmt string) bool {
	if v, ok := isolationCache.get(shareKey(stmt)); ok {
		return v
	}
	v := false
	if tree, err := pg.Parse(stmt); err == nil && len(tree.GetStmts()) == 1 {
		v, _ = transactionModes(tree.GetStmts()[0].GetStmt().GetVariableSetStmt())
	}
	isolationCache.put(shareKey(stmt), v)
	return v
}

var isolationCache = newAnswers[shareKey, bool]()

// transactionModes reads a SET TRANSACTION, or a SET LOCAL of transaction_isolation or
// transaction_deferrable (nil or another SET: neither): whether it sets the isolation level or
// the deferrable mode, and whether it makes the transaction read-only.
func transactionModes(n *pg.VariableSetStmt) (isolation, readOnly bool) {
	switch strings.ToLower(n.GetName()) {
	case "transaction":
	case "transaction_isolation", "transaction_deferrable": // SET LOCAL of the same settings
		return n.GetKind() == pg.VariableSetKind_VAR_SET_VALUE, false
	default:
		return false, false
	}
	for _, a := range n.GetArgs() {
		d := a.GetDefElem()
		switch d.GetDefname() {
		case "transaction_isolation", "transaction_deferrable":
			isolation = true
		case "transaction_read_only":
			readOnly = d.GetArg().GetAConst().GetIval().GetIval() != 0
		}
	}
	return isolation, readOnly
}
