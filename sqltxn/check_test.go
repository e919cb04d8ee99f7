package sqltxn

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixedSetting answers current_setting('max_prepared_transactions') with n.
type fixedSetting int

func (n fixedSetting) QueryRow(context.Context, string, ...any) pgx.Row { return n }
func (n fixedSetting) Scan(dest ...any) error {
	*(dest[0].(*int)) = int(n)
	return nil
}

func TestCheckPrepared(t *testing.T) {
	t.Parallel()
	require.NoError(t, CheckPrepared(context.Background(), fixedSetting(100)))
	err := CheckPrepared(context.Background(), fixedSetting(0))
	require.ErrorIs(t, err, ErrNoPreparedTransactions)
	assert.Contains(t, err.Error(), "max_prepared_transactions = 100", "says what to set")
	assert.Contains(t, err.Error(), "restart PostgreSQL")
}
