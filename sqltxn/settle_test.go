package sqltxn_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/pgtest"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txntype"
)

// openSchema opens the participant on a schema of its own on DATABASE_URL.
func openSchema(t *testing.T) (*sqltxn.Databases, string) {
	t.Helper()
	ctx := context.Background()
	_, dsn, _ := pgtest.Schema(t)
	d, err := sqltxn.Open(ctx, map[string]string{"default": dsn}, sqltxn.Options{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d, dsn
}

// SettleOnePhase decides from evidence: a committed marker is committed; a transaction still
// running is waited for; no marker is fenced, and the fence makes a late COMMIT fail.
func TestSettleOnePhase(t *testing.T) {
	t.Parallel()
	d, dsn := openSchema(t)
	ctx := context.Background()
	stmt := []txntype.Statement{{Database: "default", Statement: "SELECT 1"}}

	// Committed by the one-phase path: evidence of a commit.
	_, err := d.Run(ctx, "default", stmt, "p_a@default", true, nil)
	require.NoError(t, err)
	committed, err := d.SettleOnePhase(ctx, "default", "p_a@default")
	require.NoError(t, err)
	assert.True(t, committed)

	// No marker: fenced; the same gid cannot commit afterwards, and settling again agrees.
	committed, err = d.SettleOnePhase(ctx, "default", "p_b@default")
	require.NoError(t, err)
	assert.False(t, committed)
	_, err = d.Run(ctx, "default", stmt, "p_b@default", true, nil)
	require.Error(t, err, "a late COMMIT meets the fence")
	assert.NotErrorIs(t, err, txntype.ErrCommitUnknown, "the server said no: a definite abort")
	committed, err = d.SettleOnePhase(ctx, "default", "p_b@default")
	require.NoError(t, err)
	assert.False(t, committed)

	// A transaction holding the marker key and still running is waited for.
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO coordinator_markers (gid) VALUES ('p_c@default')")
	require.NoError(t, err)
	done := make(chan bool, 1)
	go func() {
		c, err := d.SettleOnePhase(ctx, "default", "p_c@default")
		assert.NoError(t, err)
		done <- c
	}()
	select {
	case <-done:
		require.FailNow(t, "settled while the transaction holding the key still ran")
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	assert.True(t, <-done, "it committed while the settle waited: committed")
}
