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

// Schema creates a fresh schema (dropped, with everything in it, when the test ends) and
// returns its name, a DSN whose search_path starts with it, and an administrative connection
// (closed at the end).
func Schema(t testing.TB) (schema, dsn string, admin *pgx.Conn) {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("DATABASE_URL is not set: CI must run scripts/test.sh, which starts PostgreSQL")
		}
		t.Skip("DATABASE_URL is not set: run `bash scripts/test.sh` (or `eval \"$(bash scripts/services.sh env)\"`) to test against PostgreSQL")
	}
	ctx := context.Background()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	schema = "s" + hex.EncodeToString(b)
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
