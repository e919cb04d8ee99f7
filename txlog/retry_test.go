package txlog

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
)

// A log transaction the server rolled back as a whole for a deadlock or a serialization failure
// is sent again, up to flushAttempts times; any other answer is the writes' own, sent once.
func TestRetried(t *testing.T) {
	t.Parallel()
	pgErr := func(code string) error { return fmt.Errorf("txlog: begin: %w", &pgconn.PgError{Code: code}) }
	tests := []struct {
		name    string
		answers []error // one per send; the last repeats
		sends   int
		wantErr string
	}{
		{"done at once", []error{nil}, 1, ""},
		{"a deadlock, then done", []error{pgErr("40P01"), nil}, 2, ""},
		{"a serialization failure, then done", []error{pgErr("40001"), nil}, 2, ""},
		{"deadlocks every time", []error{pgErr("40P01")}, flushAttempts, "40P01"},
		{"a unique violation is the write's own", []error{pgErr("23505")}, 1, "23505"},
		{"a refused condition is the write's own", []error{errors.New("no rows")}, 1, "no rows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sends := 0
			err := retried(func() error {
				sends++
				return tt.answers[min(sends, len(tt.answers))-1]
			})
			assert.Equal(t, tt.sends, sends)
			if tt.wantErr == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tt.wantErr)
			}
		})
	}
}

// Only a server error that proves the write's transaction rolled back is a refusal
// (txntype.ErrLogRefused), which lets a request abort; everything else leaves the outcome unknown.
func TestAsLogRefused(t *testing.T) {
	t.Parallel()
	pgErr := func(severity, code string) error {
		return &pgconn.PgError{Severity: severity, SeverityUnlocalized: severity, Code: code, Message: "m"}
	}
	tests := []struct {
		name    string
		err     error
		refused bool
	}{
		{"a lock timeout", pgErr("ERROR", "55P03"), true},
		{"a unique violation", fmt.Errorf("txlog: x: %w", pgErr("ERROR", "23505")), true},
		{"deadlocks past the retries", pgErr("ERROR", "40P01"), true},
		{"a localized severity only", &pgconn.PgError{Severity: "ERROR", Code: "55P03"}, true},
		{"a localized severity that is not ERROR", &pgconn.PgError{Severity: "FEHLER", Code: "55P03"}, false},
		{"a cancel (statement_timeout, a cut-off context)", pgErr("ERROR", "57014"), false},
		{"an administrator's shutdown", pgErr("FATAL", "57P01"), false},
		{"a FATAL of any class", pgErr("FATAL", "53300"), false},
		{"a PANIC", pgErr("PANIC", "XX000"), false},
		{"an internal error", pgErr("ERROR", "XX000"), false},
		{"a system error", pgErr("ERROR", "58030"), false},
		{"a connection failure", pgErr("ERROR", "08006"), false},
		{"an error after COMMIT", errOutcomeUnknown{pgErr("ERROR", "55P03")}, false},
		{"a lost connection", errors.New("unexpected EOF"), false},
		{"a context cut off", context.DeadlineExceeded, false},
		{"no error", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := asLogRefused(tt.err)
			assert.Equal(t, tt.refused, errors.Is(got, txntype.ErrLogRefused), "%v", got)
			if tt.err != nil {
				assert.ErrorIs(t, got, tt.err, "the cause stays in the chain")
			}
		})
	}
}
