package sqlpolicy

import (
	"fmt"
	"strings"
	"sync"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Options select the stricter rules.
type Options struct {
	// Confined: client statements run as a configured role; DO and CALL are refused.
	Confined bool
}

// OwnTablePrefix starts the name of every table the coordinator owns.
const OwnTablePrefix = "coordinator_"

// cursorOptHold is PostgreSQL's CURSOR_OPT_HOLD (a cursor WITH HOLD outlives its transaction).
const cursorOptHold = 0x0020

// Check classifies one client statement and returns nil when it may run inside the
// coordinator's transaction, or a *Violation.
func Check(stmt string, o Options) error {
	key := cacheKey{stmt: stmt, confined: o.Confined}
	if v, ok := cache.get(key); ok {
		return v
	}
	err := check(stmt, o)
	cache.put(key, err)
	return err
}

func check(stmt string, o Options) error {
	if strings.IndexByte(stmt, 0) >= 0 {
		return &Violation{What: "a NUL character", Why: "PostgreSQL text cannot contain it"}
	}
	tree, err := pg.Parse(stmt)
	if err != nil {
		return &Violation{What: "text the PostgreSQL parser rejects",
			Why: fmt.Sprintf("what cannot be classified does not run (%v)", err)}
	}
	switch n := len(tree.GetStmts()); {
	case n == 0:
		return &Violation{What: "an empty statement", Why: "each entry holds exactly one statement"}
	case n > 1:
		return &Violation{What: fmt.Sprintf("%d statements in one entry", n), Why: "each entry holds exactly one statement"}
	}
	var v *Violation
	walk(tree.ProtoReflect(), func(m protoreflect.Message) bool {
		v = visit(m.Interface(), o)
		return v == nil
	})
	if v != nil {
		return v
	}
	return nil
}

// walk calls f for every message in the tree, depth first, until f returns false.
func walk(m protoreflect.Message, f func(protoreflect.Message) bool) bool {
	if !f(m) {
		return false
	}
	ok := true
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		switch {
		case fd.IsList():
			l := val.List()
			for i := 0; i < l.Len() && ok; i++ {
				ok = walk(l.Get(i).Message(), f)
			}
		case fd.IsMap():
			// The parse tree has no maps.
		default:
			ok = walk(val.Message(), f)
		}
		return ok
	})
	return ok
}

// visit applies the rules to one node of the tree.
func visit(node any, o Options) *Violation {
	switch n := node.(type) {
	case *pg.TransactionStmt:
		return &Violation{What: transactionWord(n.GetKind()), Why: whyTxn}
	case *pg.VariableSetStmt:
		return setRule(n)
	case *pg.DiscardStmt:
		return &Violation{What: "DISCARD", Why: whySession}
	case *pg.ListenStmt:
		return &Violation{What: "LISTEN", Why: whySession}
	case *pg.UnlistenStmt:
		return &Violation{What: "UNLISTEN", Why: whySession}
	case *pg.PrepareStmt:
		return &Violation{What: "PREPARE of a named statement", Why: whySession}
	case *pg.DeallocateStmt:
		return &Violation{What: "DEALLOCATE", Why: whySession}
	case *pg.AlterRoleSetStmt:
		return &Violation{What: "ALTER ROLE … SET", Why: "it would change the settings of the coordinator's future sessions"}
	case *pg.AlterDatabaseSetStmt:
		return &Violation{What: "ALTER DATABASE … SET", Why: "it would change the settings of the coordinator's future sessions"}
	case *pg.AlterSystemStmt:
		return &Violation{What: "ALTER SYSTEM", Why: "it would change the server's settings"}
	case *pg.LoadStmt:
		return &Violation{What: "LOAD", Why: whySession}
	case *pg.DeclareCursorStmt:
		if n.GetOptions()&cursorOptHold != 0 {
			return &Violation{What: "a cursor WITH HOLD", Why: whySession}
		}
	case *pg.RangeVar:
		if schema := strings.ToLower(n.GetSchemaname()); n.GetRelpersistence() == "t" ||
			schema == "pg_temp" || strings.HasPrefix(schema, "pg_temp_") {
			return &Violation{What: "a temporary relation", Why: whySession}
		}
		if strings.HasPrefix(strings.ToLower(n.GetRelname()), OwnTablePrefix) {
			return &Violation{What: fmt.Sprintf("table %q", n.GetRelname()), Why: whyOwn}
		}
	case *pg.FuncCall:
		return funcRule(n)
	case *pg.DoStmt:
		if o.Confined {
			return &Violation{What: "DO", Why: whyDynamic}
		}
	case *pg.CallStmt:
		if o.Confined {
			return &Violation{What: "CALL", Why: whyDynamic}
		}
	}
	return nil
}

func transactionWord(k pg.TransactionStmtKind) string {
	switch k {
	case pg.TransactionStmtKind_TRANS_STMT_BEGIN:
		return "BEGIN"
	case pg.TransactionStmtKind_TRANS_STMT_START:
		return "START TRANSACTION"
	case pg.TransactionStmtKind_TRANS_STMT_COMMIT:
		return "COMMIT"
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		return "ROLLBACK"
	case pg.TransactionStmtKind_TRANS_STMT_SAVEPOINT:
		return "SAVEPOINT"
	case pg.TransactionStmtKind_TRANS_STMT_RELEASE:
		return "RELEASE"
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
		return "ROLLBACK TO SAVEPOINT"
	case pg.TransactionStmtKind_TRANS_STMT_PREPARE:
		return "PREPARE TRANSACTION"
	case pg.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED:
		return "COMMIT PREPARED"
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED:
		return "ROLLBACK PREPARED"
	}
	return "transaction control"
}

// roleSettings change who the statements run as, or switch triggers and rules off.
var roleSettings = map[string]bool{"role": true, "session_authorization": true, "session_replication_role": true}

// ownSetting: the coordinator's own settings (kpgtx.xid marks a client's part of the
// transaction: the guards compare it, and the coordinator's tables refuse writes while it is
// set).
func ownSetting(name string) bool { return strings.HasPrefix(name, "kpgtx.") }

// setRule: SET LOCAL of an ordinary setting and SET TRANSACTION stay inside the transaction;
// every other form changes the pooled session or the role.
func setRule(n *pg.VariableSetStmt) *Violation {
	name := strings.ToLower(n.GetName())
	switch {
	case roleSettings[name]:
		return &Violation{What: "SET " + name, Why: whyRole}
	case ownSetting(name):
		return &Violation{What: "SET " + name, Why: whyMark}
	case n.GetKind() == pg.VariableSetKind_VAR_RESET || n.GetKind() == pg.VariableSetKind_VAR_RESET_ALL:
		return &Violation{What: "RESET", Why: whySession}
	case name == "transaction":
		// This transaction's own characteristics. An isolation level runs before the
		// coordinator's first query (SetsIsolation), where a read-only mode would stay for the
		// coordinator's marker row too; a read-only mode set on its own runs in place, and ends
		// with the client's statements.
		if isolation, readOnly := transactionModes(n); isolation && readOnly {
			return &Violation{What: "SET TRANSACTION with an isolation level (or DEFERRABLE) and READ ONLY",
				Why: "the coordinator writes its marker row in the transaction; set READ ONLY in a SET TRANSACTION of its own"}
		}
		return nil
	case name == "transaction snapshot":
		return nil // this transaction's own characteristics
	case !n.GetIsLocal():
		return &Violation{What: "SET without LOCAL", Why: whySession}
	}
	return nil
}

// sessionLockFuncs take advisory locks that outlive the transaction.
var sessionLockFuncs = map[string]bool{
	"pg_advisory_lock": true, "pg_advisory_lock_shared": true,
	"pg_try_advisory_lock": true, "pg_try_advisory_lock_shared": true,
}

// signalFuncs act on other backends, the coordinator's own sessions among them.
var signalFuncs = map[string]bool{"pg_terminate_backend": true, "pg_cancel_backend": true}

func funcRule(n *pg.FuncCall) *Violation {
	parts := n.GetFuncname()
	if len(parts) == 0 {
		return nil
	}
	name := strings.ToLower(parts[len(parts)-1].GetString_().GetSval())
	switch {
	case sessionLockFuncs[name]:
		return &Violation{What: name + "()", Why: whySession + " (use pg_advisory_xact_lock)"}
	case signalFuncs[name]:
		return &Violation{What: name + "()", Why: "client statements do not signal other sessions"}
	case name == "set_config":
		return setConfigRule(n.GetArgs())
	}
	return nil
}

// setConfigRule allows set_config only as SET LOCAL of an ordinary setting: a constant name
// and a constant true as is_local.
func setConfigRule(args []*pg.Node) *Violation {
	if len(args) != 3 {
		return &Violation{What: "set_config() with unusual arguments", Why: whySession}
	}
	setting, ok := constString(args[0])
	if !ok {
		return &Violation{What: "set_config() of a computed setting name", Why: whySession}
	}
	if roleSettings[strings.ToLower(setting)] {
		return &Violation{What: "set_config('" + setting + "')", Why: whyRole}
	}
	if ownSetting(strings.ToLower(setting)) {
		return &Violation{What: "set_config('" + setting + "')", Why: whyMark}
	}
	if local, ok := constBool(args[2]); !ok || !local {
		return &Violation{What: "set_config() without is_local = true", Why: whySession}
	}
	return nil
}

func constString(n *pg.Node) (string, bool) {
	c := n.GetAConst()
	if c == nil || c.GetSval() == nil {
		return "", false
	}
	return c.GetSval().GetSval(), true
}

func constBool(n *pg.Node) (bool, bool) {
	c := n.GetAConst()
	if c == nil || c.GetBoolval() == nil {
		return false, false
	}
	return c.GetBoolval().GetBoolval(), true
}

// cache keeps recent answers; statements repeat, parsing costs tens of microseconds.
var cache = newAnswers[cacheKey, error]()

type cacheKey struct {
	stmt     string
	confined bool
}

func (k cacheKey) size() int { return len(k.stmt) }

// cacheMax bounds the cache; statements longer than cacheMaxLen are not kept.
const (
	cacheMax    = 4096
	cacheMaxLen = 4096
)

// answers is a bounded cache of answers by statement (Check's and Shareable's).
type answers[K interface {
	comparable
	size() int
}, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

func newAnswers[K interface {
	comparable
	size() int
}, V any]() *answers[K, V] {
	return &answers[K, V]{m: map[K]V{}}
}

func (a *answers[K, V]) get(k K) (V, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.m[k]
	return v, ok
}

func (a *answers[K, V]) put(k K, v V) {
	if k.size() > cacheMaxLen {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.m) >= cacheMax {
		clear(a.m) // a simple bound: a full cache starts over
	}
	a.m[k] = v
}
