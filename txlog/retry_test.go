package txlog

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
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
