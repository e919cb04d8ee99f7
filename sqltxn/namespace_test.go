package sqltxn

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/pgtest"
)

// A client's request may take the advisory locks that serialise the namespace registry and the
// table guards (pg_advisory_xact_lock is a client's to call), and a prepared transaction keeps
// them until recovery, which runs only after startup, ends it. A restart then only reads its
// claim and finds its tables guarded: it takes neither lock and starts. A first claim meanwhile
// fails after the lock timeout, naming the way out, instead of waiting for ever.
func TestClaimNamespaceWithItsLocksHeld(t *testing.T) {
	t.Parallel()
	dsn, admin := pgtest.Database(t) // the locks are per database: other tests' starts stay apart
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := Open(ctx, map[string]string{"default": dsn}, Options{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	require.NoError(t, d.ClaimNamespace(ctx, "ns1", "log-1", "one"))

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('kpgtx/namespaces'))`)
	require.NoError(t, err)
	for _, fn := range []string{"public." + refuseFunction, "kpgtx." + refuseFunction} {
		_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, guardLockKey(fn))
		require.NoError(t, err)
	}
	_, err = tx.Exec(ctx, "PREPARE TRANSACTION 'client-holds-the-registry'")
	require.NoError(t, err)

	require.NoError(t, d.ClaimNamespace(ctx, "ns1", "log-1", "one"), "a restart starts")
	require.ErrorIs(t, d.ClaimNamespace(ctx, "ns1", "log-2", "two"), ErrNamespaceTaken, "a second log is refused")
	err = d.ClaimNamespace(ctx, "ns2", "log-1", "one")
	require.Error(t, err, "a first claim cannot take the registry's lock")
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "the lock timeout ended the wait, not the test's deadline")
	assert.Contains(t, err.Error(), "pg_prepared_xacts")

	_, err = admin.Exec(ctx, "ROLLBACK PREPARED 'client-holds-the-registry'")
	require.NoError(t, err)
	require.NoError(t, d.ClaimNamespace(ctx, "ns2", "log-1", "one"))
}
