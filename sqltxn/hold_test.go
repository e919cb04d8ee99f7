package sqltxn

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A held Run (the request whose row is logged while its statements run) sends PREPARE (or the
// one-phase COMMIT) only once its hold allowed it: during the hold the work has run and nothing
// is prepared or committed; a hold that fails leaves nothing behind and is the answer; a failing
// statement never reaches the hold. The session is reused afterwards in every case.
func TestRunHold(t *testing.T) {
	t.Parallel()
	errLost := errors.New("the row was not logged")
	tests := []struct {
		name     string
		onePhase bool
		stmt     string
		holdErr  error
		wantHold bool
		wantErr  error
		kept     bool // the order row is committed or prepared
	}{
		{"prepare after hold", false, "INSERT INTO orders VALUES ('k') RETURNING id", nil, true, nil, true},
		{"commit after hold", true, "INSERT INTO orders VALUES ('k') RETURNING id", nil, true, nil, true},
		{"hold refuses prepare", false, "INSERT INTO orders VALUES ('k') RETURNING id", errLost, true, errLost, false},
		{"hold refuses commit", true, "INSERT INTO orders VALUES ('k') RETURNING id", errLost, true, errLost, false},
		{"statement fails first", false, "INSERT INTO orders VALUES (NULL)", nil, false, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, admin, schema := testDatabases(t, Options{})
			ctx := context.Background()
			before := backendPID(t, d)
			gid := schema + "_h@default"
			count := func(q string, args ...any) int {
				t.Helper()
				var n int
				require.NoError(t, admin.QueryRow(ctx, q, args...).Scan(&n))
				return n
			}
			prepared := func() int { return count("SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1", gid) }
			committed := func() int { return count("SELECT count(*) FROM " + schema + ".orders") }
			held := 0
			hold := func(context.Context) error {
				held++
				assert.Zero(t, prepared(), "nothing is prepared during the hold")
				assert.Zero(t, committed(), "nothing is committed during the hold")
				return tt.holdErr
			}
			res, err := d.Run(ctx, "default", stmts(tt.stmt), gid, tt.onePhase, nil, hold)
			switch {
			case tt.wantErr != nil:
				require.ErrorIs(t, err, tt.wantErr, "the hold's error is the answer")
			case !tt.wantHold:
				require.Error(t, err)
				assert.Equal(t, "23502", sqlstate(err))
			default:
				require.NoError(t, err)
				assert.Equal(t, "k", res[0].Rows[0]["id"])
			}
			assert.Equal(t, map[bool]int{true: 1, false: 0}[tt.wantHold], held)
			want := map[bool]int{true: 1, false: 0}[tt.kept]
			if tt.onePhase {
				assert.Equal(t, want, committed())
				assert.Equal(t, want, count("SELECT count(*) FROM "+schema+".coordinator_markers"))
			} else {
				assert.Equal(t, want, prepared())
				assert.Zero(t, committed())
			}
			// The session was rolled back and reset, not discarded: the next Run uses it.
			_, err = d.Run(ctx, "default", stmts("SELECT 1"), schema+"_next@default", true, nil, nil)
			require.NoError(t, err)
			assert.Equal(t, before, backendPID(t, d))
		})
	}
}
