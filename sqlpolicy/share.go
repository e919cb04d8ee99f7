package sqlpolicy

import (
	"sync"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Shareable reports whether a statement that Check accepts may run inside a PostgreSQL
// transaction shared with other requests (docs/batching.md section 12): a plain query or
// data-changing statement (SELECT without INTO, INSERT, UPDATE, DELETE, MERGE, VALUES, with
// or without WITH). Everything else (DDL, CALL, DO, cursors, LOCK, SET LOCAL, utility
// statements) runs in a transaction of its own request, where what it changes beyond its rows
// (locks held by a schema change, a cursor, a setting) reaches nobody else. A statement the
// parser rejects is not shareable.
func Shareable(stmt string) bool {
	if v, ok := shareCache.get(stmt); ok {
		return v
	}
	v := shareable(stmt)
	shareCache.put(stmt, v)
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
var shareCache = &shareAnswers{m: map[string]bool{}}

type shareAnswers struct {
	mu sync.Mutex
	m  map[string]bool
}

func (a *shareAnswers) get(k string) (bool, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.m[k]
	return v, ok
}

func (a *shareAnswers) put(k string, v bool) {
	if len(k) > cacheMaxLen {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.m) >= cacheMax {
		clear(a.m)
	}
	a.m[k] = v
}
