package sqlpolicy

import pg "github.com/pganalyze/pg_query_go/v6"

// Shareable reports whether a statement that Check accepts may run inside a PostgreSQL
// transaction shared with other requests (docs/batching.md section 12): a plain query or
// data-changing statement (SELECT without INTO, INSERT, UPDATE, DELETE, MERGE, VALUES, with
// or without WITH). Everything else (DDL, CALL, DO, cursors, LOCK, SET LOCAL, utility
// statements) runs in a transaction of its own request, where what it changes beyond its rows
// (locks held by a schema change, a cursor, a setting) reaches nobody else. A statement the
// parser rejects is not shareable.
func Shareable(stmt string) bool {
	if v, ok := shareCache.get(shareKey(stmt)); ok {
		return v
	}
	v := shareable(stmt)
	shareCache.put(shareKey(stmt), v)
	return v
}

func shareable(stmt string) bool {
	tree, err := pg.Parse(stmt)
	if err != nil || len(tree.GetStmts()) != 1 {
		return false
	}
	n := tree.GetStmts()[0].GetStmt()
	switch {
	case n.GetSelectStmt() != nil:
		return n.GetSelectStmt().GetIntoClause() == nil
	case n.GetInsertStmt() != nil, n.GetUpdateStmt() != nil, n.GetDeleteStmt() != nil, n.GetMergeStmt() != nil:
		return true
	}
	return false
}

// shareCache keeps recent answers, bounded like cache.
var shareCache = newAnswers[shareKey, bool]()

type shareKey string

func (k shareKey) size() int { return len(k) }
