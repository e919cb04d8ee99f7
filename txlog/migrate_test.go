package txlog_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
)

// Every migration applies and reverts cleanly, the ones that cannot run inside a transaction
// block (CREATE INDEX CONCURRENTLY, 000008) included, and applies again after its revert.
func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	l, pool := newLogWith(t, txlog.Options{})
	ctx := context.Background()
	index := func() bool {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_indexes
WHERE schemaname = current_schema() AND indexname = 'coordinator_transactions_created')`).Scan(&ok))
		return ok
	}
	v, dirty, err := l.SchemaVersion(ctx)
	require.NoError(t, err)
	assert.False(t, dirty)
	assert.GreaterOrEqual(t, v, int64(8))
	assert.True(t, index(), "the newest-first listing's index")

	require.NoError(t, txlog.Migrate(ctx, l, "down"))
	assert.False(t, index())
	require.NoError(t, txlog.Migrate(ctx, l, "up"))
	assert.True(t, index())
	v2, dirty, err := l.SchemaVersion(ctx)
	require.NoError(t, err)
	assert.False(t, dirty)
	assert.Equal(t, v, v2)
}
