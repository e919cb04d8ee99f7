// Package pgtest gives a test a schema of its own on the real PostgreSQL of DATABASE_URL, and
// a DSN whose connections find it first on their search_path. In CI a missing DATABASE_URL
// fails the test; elsewhere the test is skipped with the command that provides it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// base is DATABASE_URL, or the test fails (CI) or is skipped (elsewhere) without it.
func base(t testing.TB) string {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("DATABASE_URL is not set: CI must run scripts/test.sh, which starts PostgreSQL")
		}
		t.Skip("DATABASE_URL is not set: run `bash scripts/test.sh` (or `eval \"$(bash scripts/services.sh env)\"`) to test against PostgreSQL")
	}
	return base
}

func randomName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Database creates a fresh database on DATABASE_URL's server, for a test whose locks must not
// reach other tests: advisory locks and the kpgtx schema are per database. It returns the
// database's DSN and an administrative connection to it; at the end its prepared transactions
// are rolled back and the database dropped.
func Database(t testing.TB) (dsn string, admin *pgx.Conn) {
	t.Helper()
	base := base(t)
	ctx := context.Background()
	name := randomName("d")
	server, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	_, err = server.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	dsn = u.String()
	admin, err = pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		rows, _ := admin.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
		gids, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, g := range gids {
			_, _ = admin.Exec(ctx, "ROLLBACK PREPARED '"+g+"'")
		}
		_ = admin.Close(ctx)
		_, _ = server.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
		_ = server.Close(ctx)
	})
	return dsn, admin
}

// Schema creates a fresh schema (dropped, with everything in it, when the test ends) and
// returns its name, a DSN whose search_path starts with it, and an administrative connection
// (closed at the end).
func Schema(t testing.TB) (schema, dsn string, admin *pgx.Conn) {
	t.Helper()
	base := base(t)
	ctx := context.Background()
	schema = randomName("s")
	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close(context.Background())
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return schema, u.String(), admin
}
