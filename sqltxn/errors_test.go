package sqltxn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func pgErr(code string) *pgconn.PgError {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "server said " + code}
}

func dialError() error {
	return &net.OpError{
		Op:   "dial",
		Net:  "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5432},
		Err:  os.NewSyscallError("connect", syscall.ECONNREFUSED),
	}
}

func TestClassifyPgError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		code        string
		class       txntype.Class
		unavailable bool
	}{
		{"unique violation", "23505", txntype.ClassAbortable, false},
		{"foreign key violation", "23503", txntype.ClassAbortable, false},
		{"syntax error", "42601", txntype.ClassAbortable, false},
		{"undefined table", "42P01", txntype.ClassAbortable, false},
		{"division by zero", "22012", txntype.ClassAbortable, false},
		{"serialization failure", "40001", txntype.ClassRetriable, false},
		{"deadlock detected", "40P01", txntype.ClassRetriable, false},
		{"connection failure", "08006", txntype.ClassRetriable, true},
		{"connection exception", "08000", txntype.ClassRetriable, true},
		{"admin shutdown", "57P01", txntype.ClassRetriable, true},
		{"wrong number of arguments", "08P01", txntype.ClassAbortable, false},
		{"statement cancelled", "57014", txntype.ClassAbortable, false},
		{"too many connections", "53300", txntype.ClassRetriable, true},
		{"invalid password", "28P01", txntype.ClassInvalidConfig, false},
		{"invalid authorization", "28000", txntype.ClassInvalidConfig, false},
		{"insufficient privilege", "42501", txntype.ClassInvalidConfig, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pe := pgErr(tt.code)
			for _, err := range []error{pe, fmt.Errorf("statement 0: %w", pe)} {
				f := classify("orders", err)
				require.NotNil(t, f)
				assert.Equal(t, tt.class, f.Class, "classify(%v)", err)
				assert.Equal(t, tt.unavailable, f.Unavailable, "classify(%v).Unavailable", err)
				assert.Equal(t, tt.code, f.SQLState)
				assert.Equal(t, "sql:orders", f.Participant)
				assert.Same(t, err, f.Err)
				assert.ErrorIs(t, f, pe)
			}
		})
	}
}

func TestClassifyUniqueViolationDetail(t *testing.T) {
	t.Parallel()
	f := classify("default", fmt.Errorf("statement 1: %w", pgErr("23505")))
	d := f.Detail()
	assert.Equal(t, "sql:default", d.Participant)
	assert.Equal(t, txntype.ClassAbortable, d.Class)
	assert.Equal(t, "23505", d.SQLState)
	assert.Contains(t, d.Message, "23505")
}

func TestClassifyConnectionErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
	}{
		{"connect error", &pgconn.ConnectError{Config: &pgconn.Config{}}},
		{"dial error", dialError()},
		{"dial error wrapped", fmt.Errorf("acquire connection: %w", dialError())},
		{"connection refused", fmt.Errorf("acquire connection: %w", syscall.ECONNREFUSED)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := classify("default", tt.err)
			require.NotNil(t, f)
			assert.Equal(t, txntype.ClassRetriable, f.Class)
			assert.True(t, f.Unavailable)
			assert.Empty(t, f.SQLState)
			assert.Equal(t, "sql:default", f.Participant)
		})
	}
}

func TestClassifyOtherErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
	}{
		{"unknown database", fmt.Errorf("%w %q", ErrUnknownDatabase, "x")},
		{"no statements", errEmpty},
		{"canceled", context.Canceled},
		{"heuristic", fmt.Errorf("%w: by someone else", txntype.ErrHeuristic)},
		{"other", errors.New("other")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := classify("b", tt.err)
			require.NotNil(t, f)
			assert.Equal(t, txntype.ClassAbortable, f.Class)
			assert.False(t, f.Unavailable)
			assert.Empty(t, f.SQLState)
			assert.Equal(t, "sql:b", f.Participant)
			assert.ErrorIs(t, f, tt.err)
		})
	}
}

// classify has an explicit case for an expired budget (abortable, not a lost connection);
// context.DeadlineExceeded implements net.Error, so the connection-error case must not catch
// it first.
func TestClassifyDeadlineExceeded(t *testing.T) {
	t.Parallel()
	for _, err := range []error{context.DeadlineExceeded, fmt.Errorf("statement 0: %w", context.DeadlineExceeded)} {
		f := classify("default", err)
		require.NotNil(t, f)
		assert.Equal(t, txntype.ClassAbortable, f.Class, "classify(%v)", err)
		assert.False(t, f.Unavailable, "classify(%v).Unavailable", err)
	}
}

func TestSQLState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{pgErr(sqlstateUndefinedObject), "42704"},
		{fmt.Errorf("commit prepared: %w", pgErr(sqlstateDuplicateObject)), "42710"},
		{errors.New("x"), ""},
		{nil, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.err), func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, sqlstate(tt.err))
		})
	}
}

func TestQuoteGID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		gid, want string
	}{
		{"kpgtx:abc", "'kpgtx:abc'"},
		{"", "''"},
		{"it's", "'it''s'"},
		{"''", "''''''"},
		{"a'b'c", "'a''b''c'"},
		{`back\slash`, `'back\slash'`},
	}
	for _, tt := range tests {
		t.Run(tt.gid, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, quoteGID(tt.gid))
		})
	}
}
