package coord_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var testLimits = txntype.Limits{MaxStatements: 3, MaxRecords: 2, MaxTimeout: 30 * time.Second}

func knownDB(name string) bool { return name == txntype.DefaultDatabase || name == "orders" }

func ptr[T any](v T) *T { return &v }

func stmt(s string, args ...any) txntype.Statement {
	return txntype.Statement{Statement: s, Args: args}
}

func rec(topic string) txntype.Record { return txntype.Record{Topic: topic, Value: txntype.Text("v")} }

// requireInvalid asserts that err is an *txntype.InvalidError for field that matches
// txntype.ErrInvalidRequest.
func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	require.Error(t, err)
	var ie *txntype.InvalidError
	require.True(t, errors.As(err, &ie), "want *txntype.InvalidError, got %T: %v", err, err)
	assert.Equal(t, field, ie.Field, "field of %v", err)
	assert.NotEmpty(t, ie.Reason)
	assert.ErrorIs(t, err, txntype.ErrInvalidRequest)
	assert.True(t, strings.HasPrefix(err.Error(), field+": "), "error %q starts with the field", err)
}

func TestValidateValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  txntype.Request
	}{
		{"sql only", txntype.Request{SQL: []txntype.Statement{stmt("INSERT INTO t VALUES ($1)", "x")}}},
		{"kafka only", txntype.Request{Kafka: []txntype.Record{rec("events")}}},
		{"both with id", txntype.Request{
			ID:    "order-42.v1:retry_2",
			SQL:   []txntype.Statement{stmt("UPDATE t SET n = n + 1")},
			Kafka: []txntype.Record{{Topic: "events"}},
		}},
		{"id of 128 characters", txntype.Request{ID: strings.Repeat("a", 128), Kafka: []txntype.Record{rec("e")}}},
		{"named database", txntype.Request{SQL: []txntype.Statement{{Database: "orders", Statement: "SELECT 1"}}}},
		{"scalar args", txntype.Request{SQL: []txntype.Statement{stmt("SELECT $1, $2, $3, $4, $5, $6",
			"s", 1.5, json.Number("7"), true, nil, int64(3))}}},
		{"keywords inside a statement", txntype.Request{SQL: []txntype.Statement{
			stmt("INSERT INTO log (msg) VALUES ('COMMIT')"),
			stmt("UPDATE t SET begin_at = now()"),
			stmt("SELECT 'ROLLBACK'"),
		}}},
		{"identifier starting with a keyword", txntype.Request{SQL: []txntype.Statement{stmt("SELECT committed_rows FROM t")}}},
		{"partition 0", txntype.Request{Kafka: []txntype.Record{{Topic: "e", Partition: ptr(int32(0))}}}},
		{"null key and value", txntype.Request{Kafka: []txntype.Record{{Topic: "e"}}}},
		{"at the limits", txntype.Request{
			SQL:     []txntype.Statement{stmt("SELECT 1"), stmt("SELECT 2"), stmt("SELECT 3")},
			Kafka:   []txntype.Record{rec("a"), rec("b")},
			Timeout: 30 * time.Second,
		}},
		{"zero timeout means the default", txntype.Request{Kafka: []txntype.Record{rec("e")}, Timeout: 0}},
		{"isolation level first on each database", txntype.Request{SQL: []txntype.Statement{
			stmt("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"), stmt("SELECT 1"),
			{Database: "orders", Statement: "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"},
		}}},
		{"read-only mode anywhere", txntype.Request{SQL: []txntype.Statement{stmt("SELECT 1"), stmt("SET TRANSACTION READ ONLY")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, tt.req.Validate(testLimits, knownDB))
		})
	}
}

func TestValidateNoLimits(t *testing.T) {
	t.Parallel()
	// Zero limits mean unlimited.
	r := txntype.Request{Kafka: make([]txntype.Record, 50), Timeout: time.Hour}
	for i := range r.Kafka {
		r.Kafka[i] = rec("e")
	}
	require.NoError(t, r.Validate(txntype.Limits{}, knownDB))
}

func TestValidateInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		req   txntype.Request
		field string
	}{
		{"id with a space", txntype.Request{ID: "a b", Kafka: []txntype.Record{rec("e")}}, "id"},
		{"id with a slash", txntype.Request{ID: "a/b", Kafka: []txntype.Record{rec("e")}}, "id"},
		{"id with a quote", txntype.Request{ID: "it's", Kafka: []txntype.Record{rec("e")}}, "id"},
		{"id too long", txntype.Request{ID: strings.Repeat("a", 129), Kafka: []txntype.Record{rec("e")}}, "id"},
		{"empty request", txntype.Request{}, "sql"},
		{"empty slices", txntype.Request{SQL: []txntype.Statement{}, Kafka: []txntype.Record{}}, "sql"},
		{"too many statements", txntype.Request{SQL: []txntype.Statement{
			stmt("SELECT 1"), stmt("SELECT 1"), stmt("SELECT 1"), stmt("SELECT 1"),
		}}, "sql"},
		{"too many records", txntype.Request{Kafka: []txntype.Record{rec("a"), rec("b"), rec("c")}}, "kafka"},
		{"negative timeout", txntype.Request{Kafka: []txntype.Record{rec("e")}, Timeout: -time.Millisecond}, "timeout_ms"},
		{"timeout above the maximum", txntype.Request{Kafka: []txntype.Record{rec("e")}, Timeout: 31 * time.Second}, "timeout_ms"},
		{"unknown database", txntype.Request{SQL: []txntype.Statement{{Database: "nope", Statement: "SELECT 1"}}}, "sql[0].database"},
		{"unknown database second", txntype.Request{SQL: []txntype.Statement{
			stmt("SELECT 1"), {Database: "Orders", Statement: "SELECT 1"},
		}}, "sql[1].database"},
		{"empty statement", txntype.Request{SQL: []txntype.Statement{stmt("")}}, "sql[0].statement"},
		{"blank statement", txntype.Request{SQL: []txntype.Statement{stmt(" \t\n ")}}, "sql[0].statement"},
		{"map arg", txntype.Request{SQL: []txntype.Statement{stmt("SELECT $1", map[string]any{"a": 1})}}, "sql[0].args[0]"},
		{"slice arg", txntype.Request{SQL: []txntype.Statement{stmt("SELECT $1, $2", "ok", []any{1})}}, "sql[0].args[1]"},
		{"empty topic", txntype.Request{Kafka: []txntype.Record{{Topic: ""}}}, "kafka[0].topic"},
		{"empty topic second", txntype.Request{Kafka: []txntype.Record{rec("a"), {Topic: ""}}}, "kafka[1].topic"},
		{"negative partition", txntype.Request{Kafka: []txntype.Record{{Topic: "e", Partition: ptr(int32(-1))}}}, "kafka[0].partition"},
		{"isolation level after a query", txntype.Request{SQL: []txntype.Statement{
			stmt("SELECT 1"), stmt("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
		}}, "sql[1].statement"},
		{"isolation level with read-only", txntype.Request{SQL: []txntype.Statement{
			stmt("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY"),
		}}, "sql[0].statement"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireInvalid(t, tt.req.Validate(testLimits, knownDB), tt.field)
		})
	}
}

func TestValidateTransactionControl(t *testing.T) {
	t.Parallel()
	tests := []string{
		"COMMIT",
		"commit",
		"COMMIT;",
		"commit work",
		"BEGIN",
		"begin isolation level serializable",
		"START TRANSACTION",
		"END",
		"ROLLBACK",
		"rollback to savepoint s",
		"ABORT",
		"  prepare transaction 'x'",
		"PREPARE TRANSACTION 'kpgtx:other'",
		"SAVEPOINT s",
		"RELEASE SAVEPOINT s",
		"\n\tCOMMIT",
	}
	for _, s := range tests {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			r := txntype.Request{SQL: []txntype.Statement{stmt("SELECT 1"), stmt(s)}}
			requireInvalid(t, r.Validate(testLimits, knownDB), "sql[1].statement")
		})
	}
}

// A comment before a transaction-control statement does not hide it from PostgreSQL: the
// statement still ends (or splits) the coordinator's transaction, so the SQL work before it
// would commit whatever Kafka decides.
func TestValidateTransactionControlAfterComment(t *testing.T) {
	t.Parallel()
	tests := []string{
		"/* x */ COMMIT",
		"/**/COMMIT",
		"-- note\nCOMMIT",
		"-- note\nROLLBACK",
	}
	for _, s := range tests {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			r := txntype.Request{SQL: []txntype.Statement{stmt("SELECT 1"), stmt(s)}}
			requireInvalid(t, r.Validate(testLimits, knownDB), "sql[1].statement")
		})
	}
}

func TestValidateDefaultsDatabase(t *testing.T) {
	t.Parallel()
	r := txntype.Request{SQL: []txntype.Statement{
		stmt("SELECT 1"),
		{Database: "orders", Statement: "SELECT 2"},
		stmt("SELECT 3"),
	}}
	require.NoError(t, r.Validate(testLimits, knownDB))
	assert.Equal(t, txntype.DefaultDatabase, r.SQL[0].Database)
	assert.Equal(t, "default", r.SQL[0].Database)
	assert.Equal(t, "orders", r.SQL[1].Database)
	assert.Equal(t, "default", r.SQL[2].Database)
	assert.Equal(t, []string{"default", "orders"}, r.Databases())
}

func TestValidateAsksKnownDBWithDefault(t *testing.T) {
	t.Parallel()
	var asked []string
	r := txntype.Request{SQL: []txntype.Statement{stmt("SELECT 1")}}
	err := r.Validate(testLimits, func(name string) bool {
		asked = append(asked, name)
		return false
	})
	requireInvalid(t, err, "sql[0].database")
	assert.Equal(t, []string{"default"}, asked)
}

func TestDatabases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sql  []txntype.Statement
		want []string
	}{
		{"none", nil, nil},
		{"one", []txntype.Statement{{Database: "a"}}, []string{"a"}},
		{"first-use order", []txntype.Statement{
			{Database: "b"}, {Database: "a"}, {Database: "b"}, {Database: "c"}, {Database: "a"},
		}, []string{"b", "a", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := txntype.Request{SQL: tt.sql}
			assert.Equal(t, tt.want, r.Databases())
		})
	}
}

func baseRequest() txntype.Request {
	return txntype.Request{
		ID: "r1",
		SQL: []txntype.Statement{
			{Database: "default", Statement: "INSERT INTO t VALUES ($1, $2)", Args: []any{"a", 1.0}},
			{Database: "orders", Statement: "UPDATE o SET n = n + 1"},
		},
		Kafka: []txntype.Record{
			{Topic: "events", Key: txntype.Text("k"), Value: txntype.Text("v"), Headers: txntype.TextHeaders("a", "1", "b", "2")},
			{Topic: "audit", Partition: ptr(int32(2))},
		},
		Timeout: 5 * time.Second,
	}
}

func TestDigestEqual(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(r *txntype.Request)
	}{
		{"same body", func(*txntype.Request) {}},
		{"other timeout", func(r *txntype.Request) { r.Timeout = 25 * time.Second }},
		{"no timeout", func(r *txntype.Request) { r.Timeout = 0 }},
		{"other id", func(r *txntype.Request) { r.ID = "r2" }},
		{"headers built again", func(r *txntype.Request) { r.Kafka[0].Headers = txntype.TextHeaders("a", "1", "b", "2") }},
	}
	want := baseRequest()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := baseRequest()
			tt.mutate(&r)
			d := r.Digest()
			assert.Len(t, d, 32)
			assert.True(t, bytes.Equal(want.Digest(), d))
		})
	}
}

func TestDigestDiffers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(r *txntype.Request)
	}{
		{"statement text", func(r *txntype.Request) { r.SQL[0].Statement = "INSERT INTO t VALUES ($2, $1)" }},
		{"arg value", func(r *txntype.Request) { r.SQL[0].Args[0] = "b" }},
		{"arg type", func(r *txntype.Request) { r.SQL[0].Args[1] = "1" }},
		{"extra arg", func(r *txntype.Request) { r.SQL[1].Args = []any{nil} }},
		{"database", func(r *txntype.Request) { r.SQL[1].Database = "default" }},
		{"statement order", func(r *txntype.Request) { r.SQL[0], r.SQL[1] = r.SQL[1], r.SQL[0] }},
		{"statement dropped", func(r *txntype.Request) { r.SQL = r.SQL[:1] }},
		{"topic", func(r *txntype.Request) { r.Kafka[0].Topic = "events2" }},
		{"key", func(r *txntype.Request) { r.Kafka[0].Key = txntype.Text("k2") }},
		{"null key", func(r *txntype.Request) { r.Kafka[0].Key = nil }},
		{"empty key", func(r *txntype.Request) { r.Kafka[0].Key = txntype.Text("") }},
		{"value", func(r *txntype.Request) { r.Kafka[0].Value = txntype.Text("w") }},
		{"binary value", func(r *txntype.Request) { r.Kafka[0].Value = txntype.Bytes([]byte{0, 'v'}) }},
		{"header value", func(r *txntype.Request) { r.Kafka[0].Headers = txntype.TextHeaders("a", "1", "b", "3") }},
		{"header order", func(r *txntype.Request) { r.Kafka[0].Headers = txntype.TextHeaders("b", "2", "a", "1") }},
		{"header repeated", func(r *txntype.Request) { r.Kafka[0].Headers = txntype.TextHeaders("a", "1", "a", "1", "b", "2") }},
		{"timestamp", func(r *txntype.Request) { r.Kafka[0].Timestamp = txntype.At(time.UnixMilli(1700000000000)) }},
		{"partition", func(r *txntype.Request) { r.Kafka[1].Partition = ptr(int32(3)) }},
		{"partition unset", func(r *txntype.Request) { r.Kafka[1].Partition = nil }},
		{"record dropped", func(r *txntype.Request) { r.Kafka = r.Kafka[:1] }},
	}
	base := baseRequest()
	want := base.Digest()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := baseRequest()
			tt.mutate(&r)
			assert.False(t, bytes.Equal(want, r.Digest()))
		})
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		want  txntype.State
		ok    bool
		final bool
	}{
		{"active", txntype.StateActive, true, false},
		{"prepared", txntype.StatePrepared, true, false},
		{"committing", txntype.StateCommitting, true, false},
		{"committed", txntype.StateCommitted, true, true},
		{"aborted", txntype.StateAborted, true, true},
		{"heuristic", txntype.StateHeuristic, true, true},
		{"heuristic_mixed", txntype.StateHeuristicMixed, true, true},
		{"", "", false, false},
		{"COMMITTED", "", false, false},
		{"commit", "", false, false},
		{" active", "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			st, ok := txntype.ParseState(tt.in)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, st)
			assert.Equal(t, tt.final, st.Final())
			if ok {
				assert.Equal(t, tt.in, string(st), "wire name round-trips")
			}
		})
	}
}

func TestStateFinalUnknown(t *testing.T) {
	t.Parallel()
	assert.False(t, txntype.State("bogus").Final())
}
