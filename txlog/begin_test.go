package txlog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// Begin answers a fresh row without reading it back (beginSQL returns only its stamps): what
// it answers must be the row as Get reads it, field by field, whether the Begin ran alone or
// merged with others in one group commit, and for a row without SQL gids.
func TestBeginAnswersTheStoredRow(t *testing.T) {
	t.Parallel()
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprintf("group commit %v", group), func(t *testing.T) {
			t.Parallel()
			l, pool := newLogWith(t, txlog.Options{GroupCommit: group})
			ctx := context.Background()
			epoch, err := txlog.BumpEpoch(ctx, pool, "a")
			require.NoError(t, err)

			rows := make([]*txntype.Transaction, 12)
			for i := range rows {
				rows[i] = row(fmt.Sprintf("b%d", i), epoch)
				rows[i].OnePhase = i%2 == 0
				rows[i].Digest = []byte{byte(i), 7}
			}
			rows[0].SQLGIDs = nil
			rows[1].SQLGIDs = append(rows[1].SQLGIDs, txntype.SQLGID{Database: "second", GID: "p_b1@second"})

			answers := make([]*txntype.Transaction, len(rows))
			var wg sync.WaitGroup
			for i, r := range rows { // concurrently: under group commit they merge
				wg.Go(func() {
					got, created, err := l.Begin(ctx, r)
					assert.NoError(t, err)
					assert.True(t, created)
					answers[i] = got
				})
			}
			wg.Wait()
			for i, r := range rows {
				require.NotNil(t, answers[i], r.ID)
				stored, err := l.Get(ctx, r.ID)
				require.NoError(t, err)
				assert.Equal(t, stored, answers[i], r.ID)
			}
		})
	}
}
