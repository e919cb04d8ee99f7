package coord_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
)

var testLimits = coord.Limits{MaxStatements: 3, MaxRecords: 2, MaxTimeout: 30 * time.Second}

func knownDB(name string) bool { return name == coord.DefaultDatabase || name == "orders" }

func ptr[T any](v T) *T { return &v }

func stmt(s string, args ...any) coord.Statement { return coord.Statement{Statement: s, Args: args} }

func rec(topic string) coord.Record { return coord.Record{Topic: topic, Value: coord.Text("v")} }

// requireInvalid asserts that err is an *coord.InvalidError for field that matches
// coord.ErrInvalidRequest.
func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	require.Error(t, err)
	var ie *coord.InvalidError
	require.True(t, errors.As(err, &ie), "want *coord.InvalidError, got %T: %v", err, err)
	assert.Equal(t, field, ie.Field, "field of %v", err)
	assert.NotEmpty(t, ie.Reason)
	assert.ErrorIs(t, err, coord.ErrInvalidRequest)
	assert.True(t, strings.HasPrefix(err.Error(), field+": "), "error %q starts with the field", err)
}

func TestValidateValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  coord.Request
	}{
		{"sql only", coord.Request{SQL: []coord.Statement{stmt("INSERT INTO t VALUES ($1)", "x")}}},
		{"kafka only", coord.Request{Kafka: []coord.Record{rec("events")}}},
		{"both with id", coord.Request{
			ID:    "order-42.v1:retry_2",
			SQL:   []coord.Statement{stmt("UPDATE t SET n = n + 1")},
			Kafka: []coord.Record{{Topic: "events"}},
		}},
		{"id of 128 characters", coord.Request{ID: strings.Repeat("a", 128), Kafka: []coord.Record{rec("e")}}},
		{"named database", coord.Request{SQL: []coord.Statement{{Database: "orders", Statement: "SELECT 1"}}}},
		{"scalar args", coord.Request{SQL: []coord.Statement{stmt("SELECT $1, $2, $3, $4, $5, $6",
			"s", 1.5, json.Number("7"), true, nil, int64(3))}}},
		{"keywords inside a statement", coord.Request{SQL: []coord.Statement{
			stmt("INSERT INTO log (msg) VALUES ('COMMIT')"),
			stmt("UPDATE t SET begin_at = now()"),
			stmt("SELECT 'ROLLBACK'"),
		}}},
		{"identifier starting with a keyword", coord.Request{SQL: []coord.Statement{stmt("SELECT committed_rows FROM t")}}},
		{"partition 0", coord.Request{Kafka: []coord.Record{{Topic: "e", Partition: ptr(int32(0))}}}},
		{"null key and value", coord.Request{Kafka: []coord.Record{{Topic: "e"}}}},
		{"at the limits", coord.Request{
			SQL:     []coord.Statement{stmt("SELECT 1"), stmt("SELECT 2"), stmt("SELECT 3")},
			Kafka:   []coord.Record{rec("a"), rec("b")},
			Timeout: 30 * time.Second,
		}},
		{"zero timeout means the default", coord.Request{Kafka: []coord.Record{rec("e")}, Timeout: 0}},
		{"isolation level first on each database", coord.Request{SQL: []coord.Statement{
			stmt("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"), stmt("SELECT 1"),
			{Database: "orders", Statement: "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"},
		}}},
		{"read-only mode anywhere", coord.Request{SQL: []coord.Statement{stmt("SELECT 1"), stmt("SET TRANSACTION READ ONLY")}}},
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
	r := coord.Request{Kafka: make([]coord.Record, 50), Timeout: time.Hour}
	for i := range r.Kafka {
		r.Kafka[i] = rec("e")
	}
	require.NoError(t, r.Validate(coord.Limits{}, knownDB))
}

func TestValidateInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		req   coord.Request
		field string
	}{
		{"id with a space", coord.Request{ID: "a b", Kafka: []coord.Record{rec("e")}}, "id"},
		{"id with a slash", coord.Request{ID: "a/b", Kafka: []coord.Record{rec("e")}}, "id"},
		{"id with a quote", coord.Request{ID: "it's", Kafka: []coord.Record{rec("e")}}, "id"},
		{"id too long", coord.Request{ID: strings.Repeat("a", 129), Kafka: []coord.Record{rec("e")}}, "id"},
		{"empty request", coord.Request{}, "sql"},
		{"empty slices", coord.Request{SQL: []coord.Statement{}, Kafka: []coord.Record{}}, "sql"},
		{"too many statements", coord.Request{SQL: []coord.Statement{
			stmt("SELECT 1"), stmt("SELECT 1"), stmt("SELECT 1"), stmt("SELECT 1"),
		}}, "sql"},
		{"too many records", coord.Request{Kafka: []coord.Record{rec("a"), rec("b"), rec("c")}}, "kafka"},
		{"negative timeout", coord.Request{Kafka: []coord.Record{rec("e")}, Timeout: -time.Millisecond}, "timeout_ms"},
		{"timeout above the maximum", coord.Request{Kafka: []coord.Record{rec("e")}, Timeout: 31 * time.Second}, "timeout_ms"},
		{"unknown database", coord.Request{SQL: []coord.Statement{{Database: "nope", Statement: "SELECT 1"}}}, "sql[0].database"},
		{"unknown database second", coord.Request{SQL: []coord.Statement{
			stmt("SELECT 1"), {Database: "Orders", Statement: "SELECT 1"},
		}}, "sql[1].database"},
		{"empty statement", coord.Request{SQL: []coord.Statement{stmt("")}}, "sql[0].statement"},
		{"blank statement", coord.Request{SQL: []coord.Statement{stmt(" \t\n ")}}, "sql[0].statement"},
		{"map arg", coord.Request{SQL: []coord.Statement{stmt("SELECT $1", map[string]any{"a": 1})}}, "sql[0].args[0]"},
		{"slice arg", coord.Request{SQL: []coord.Statement{stmt("SELECT $1, $2", "ok", []any{1})}}, "sql[0].args[1]"},
		{"empty topic", coord.Request{Kafka: []coord.Record{{Topic: ""}}}, "kafka[0].topic"},
		{"empty topic second", coord.Request{Kafka: []coord.Record{rec("a"), {Topic: ""}}}, "kafka[1].topic"},
		{"negative partition", coord.Request{Kafka: []coord.Record{{Topic: "e", Partition: ptr(int32(-1))}}}, "kafka[0].partition"},
		{"isolation level after a query", coord.Request{SQL: []coord.Statement{
			stmt("SELECT 1"), stmt("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
		}}, "sql[1].statement"},
		{"isolation level with read-only", coord.Request{SQL: []coord.Statement{
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
			r := coord.Request{SQL: []coord.Statement{stmt("SELECT 1"), stmt(s)}}
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
			r := coord.Request{SQL: []coord.Statement{stmt("SELECT 1"), stmt(s)}}
			requireInvalid(t, r.Validate(testLimits, knownDB), "sql[1].statement")
		})
	}
}

func TestValidateDefaultsDatabase(t *testing.T) {
	t.Parallel()
	r := coord.Request{SQL: []coord.Statement{
		stmt("SELECT 1"),
		{Database: "orders", Statement: "SELECT 2"},
		stmt("SELECT 3"),
	}}
	require.NoError(t, r.Validate(testLimits, knownDB))
	assert.Equal(t, coord.DefaultDatabase, r.SQL[0].Database)
	assert.Equal(t, "default", r.SQL[0].Database)
	assert.Equal(t, "orders", r.SQL[1].Database)
	assert.Equal(t, "default", r.SQL[2].Database)
	assert.Equal(t, []string{"default", "orders"}, r.Databases())
}

func TestValidateAsksKnownDBWithDefault(t *testing.T) {
	t.Parallel()
	var asked []string
	r := coord.Request{SQL: []coord.Statement{stmt("SELECT 1")}}
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
		sql  []coord.Statement
		want []string
	}{
		{"none", nil, nil},
		{"one", []coord.Statement{{Database: "a"}}, []string{"a"}},
		{"first-use order", []coord.Statement{
			{Database: "b"}, {Database: "a"}, {Database: "b"}, {Database: "c"}, {Database: "a"},
		}, []string{"b", "a", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := coord.Request{SQL: tt.sql}
			assert.Equal(t, tt.want, r.Databases())
		})
	}
}

func baseRequest() coord.Request {
	return coord.Request{
		ID: "r1",
		SQL: []coord.Statement{
			{Database: "default", Statement: "INSERT INTO t VALUES ($1, $2)", Args: []any{"a", 1.0}},
			{Database: "orders", Statement: "UPDATE o SET n = n + 1"},
		},
		Kafka: []coord.Record{
			{Topic: "events", Key: coord.Text("k"), Value: coord.Text("v"), Headers: coord.TextHeaders("a", "1", "b", "2")},
			{Topic: "audit", Partition: ptr(int32(2))},
		},
		Timeout: 5 * time.Second,
	}
}

func TestDigestEqual(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(r *coord.Request)
	}{
		{"same body", func(*coord.Request) {}},
		{"other timeout", func(r *coord.Request) { r.Timeout = 25 * time.Second }},
		{"no timeout", func(r *coord.Request) { r.Timeout = 0 }},
		{"other id", func(r *coord.Request) { r.ID = "r2" }},
		{"headers built again", func(r *coord.Request) { r.Kafka[0].Headers = coord.TextHeaders("a", "1", "b", "2") }},
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
		mutate func(r *coord.Request)
	}{
		{"statement text", func(r *coord.Request) { r.SQL[0].Statement = "INSERT INTO t VALUES ($2, $1)" }},
		{"arg value", func(r *coord.Request) { r.SQL[0].Args[0] = "b" }},
		{"arg type", func(r *coord.Request) { r.SQL[0].Args[1] = "1" }},
		{"extra arg", func(r *coord.Request) { r.SQL[1].Args = []any{nil} }},
		{"database", func(r *coord.Request) { r.SQL[1].Database = "default" }},
		{"statement order", func(r *coord.Request) { r.SQL[0], r.SQL[1] = r.SQL[1], r.SQL[0] }},
		{"statement dropped", func(r *coord.Request) { r.SQL = r.SQL[:1] }},
		{"topic", func(r *coord.Request) { r.Kafka[0].Topic = "events2" }},
		{"key", func(r *coord.Request) { r.Kafka[0].Key = coord.Text("k2") }},
		{"null key", func(r *coord.Request) { r.Kafka[0].Key = nil }},
		{"empty key", func(r *coord.Request) { r.Kafka[0].Key = coord.Text("") }},
		{"value", func(r *coord.Request) { r.Kafka[0].Value = coord.Text("w") }},
		{"binary value", func(r *coord.Request) { r.Kafka[0].Value = coord.Bytes([]byte{0, 'v'}) }},
		{"header value", func(r *coord.Request) { r.Kafka[0].Headers = coord.TextHeaders("a", "1", "b", "3") }},
		{"header order", func(r *coord.Request) { r.Kafka[0].Headers = coord.TextHeaders("b", "2", "a", "1") }},
		{"header repeated", func(r *coord.Request) { r.Kafka[0].Headers = coord.TextHeaders("a", "1", "a", "1", "b", "2") }},
		{"timestamp", func(r *coord.Request) { r.Kafka[0].Timestamp = coord.At(time.UnixMilli(1700000000000)) }},
		{"partition", func(r *coord.Request) { r.Kafka[1].Partition = ptr(int32(3)) }},
		{"partition unset", func(r *coord.Request) { r.Kafka[1].Partition = nil }},
		{"record dropped", func(r *coord.Request) { r.Kafka = r.Kafka[:1] }},
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
		want  coord.State
		ok    bool
		final bool
	}{
		{"active", coord.StateActive, true, false},
		{"prepared", coord.StatePrepared, true, false},
		{"committing", coord.StateCommitting, true, false},
		{"committed", coord.StateCommitted, true, true},
		{"aborted", coord.StateAborted, true, true},
		{"heuristic", coord.StateHeuristic, true, true},
		{"heuristic_mixed", coord.StateHeuristicMixed, true, true},
		{"", "", false, false},
		{"COMMITTED", "", false, false},
		{"commit", "", false, false},
		{" active", "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			st, ok := coord.ParseState(tt.in)
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
	assert.False(t, coord.State("bogus").Final())
}
