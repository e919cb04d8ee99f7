package txlog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// The listing with each combination of its filters (state, cursor, age): newest first, paged,
// each filter applied.
func TestListFilters(t *testing.T) {
	t.Parallel()
	l, pool := newLogWith(t, txlog.Options{})
	ctx := context.Background()
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	for i := range 6 {
		tr, _, err := l.Begin(ctx, row(fmt.Sprint("l", i), epoch))
		require.NoError(t, err)
		if i%2 == 0 {
			require.NoError(t, l.Transition(ctx, tr, txntype.StateAborted))
		}
	}
	// l0 and l1 changed an hour ago.
	_, err = pool.Exec(ctx, `UPDATE coordinator_transactions SET updated_at = now() - interval '1 hour',
    created_at = created_at - interval '1 hour' WHERE request_id IN ('l0', 'l1')`)
	require.NoError(t, err)
	ids := func(p txlog.Page) []string {
		var out []string
		for _, t := range p.Transactions {
			out = append(out, t.ID)
		}
		return out
	}
	for _, c := range []struct {
		name  string
		state txntype.State
		older time.Duration
		want  []string
	}{
		{name: "all", want: []string{"l5", "l4", "l3", "l2", "l1", "l0"}},
		{name: "a state", state: txntype.StateAborted, want: []string{"l4", "l2", "l0"}},
		{name: "older", older: 30 * time.Minute, want: []string{"l1", "l0"}},
		{name: "a state and older", state: txntype.StateActive, older: 30 * time.Minute, want: []string{"l1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			after := ""
			for range 10 {
				p, err := l.ListOlder(ctx, c.state, c.older, 2, after)
				require.NoError(t, err)
				got = append(got, ids(p)...)
				if p.Next == "" {
					break
				}
				after = p.Next
			}
			assert.Equal(t, c.want, got)
		})
	}
}
