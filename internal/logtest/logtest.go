// Package logtest gives a test the coordinator's log and a default participant database over a
// fresh schema of the test PostgreSQL (internal/pgtest): the log migrated, every prepared
// transaction of the schema rolled back at the test's end. txlog's and sqltxn's own tests do
// not use it (they are what it is made of).
package logtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/internal/pgtest"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
)

// Env is a test's log and its default database, both in Schema.
type Env struct {
	Schema string
	DSN    string
	Admin  *pgx.Conn // outside any coordinator: the test's own view
	Pool   *pgxpool.Pool
	Log    *txlog.Log
	SQL    *sqltxn.Databases // "default" on DSN
}

// New opens the log and the default database over a fresh schema.
func New(t testing.TB, sqlOpts sqltxn.Options) *Env {
	t.Helper()
	ctx := context.Background()
	schema, dsn, admin := pgtest.Schema(t)
	t.Cleanup(func() {
		rows, _ := admin.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, $1)", schema)
		gids, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, g := range gids {
			_, _ = admin.Exec(ctx, "ROLLBACK PREPARED '"+g+"'")
		}
	})
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	log := txlog.New(pool, txlog.Options{})
	t.Cleanup(log.Close)
	require.NoError(t, txlog.Migrate(ctx, log, "up"))
	sql, err := sqltxn.Open(ctx, map[string]string{"default": dsn}, sqlOpts)
	require.NoError(t, err)
	t.Cleanup(sql.Close)
	return &Env{Schema: schema, DSN: dsn, Admin: admin, Pool: pool, Log: log, SQL: sql}
}
