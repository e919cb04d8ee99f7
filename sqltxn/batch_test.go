package sqltxn

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CommitPreparedMany against PostgreSQL: every prepared gid of the list commits in one round
// trip; a gid that does not exist fails alone, and the ones after it still commit; the
// connection goes back to the pool usable.
func TestCommitPreparedMany(t *testing.T) {
	t.Parallel()
	d, admin, schema := testDatabases(t, Options{})
	ctx := context.Background()
	var gids []string
	for _, id := range []string{"a", "b", "c"} {
		gid := schema + "_" + id
		_, err := d.Run(ctx, "default", stmts("INSERT INTO orders (id) VALUES ('"+id+"')"), gid, false, nil)
		require.NoError(t, err)
		gids = append(gids, gid)
	}
	list := []string{gids[0], schema + "_missing", gids[1], gids[2]}
	errs := d.CommitPreparedMany(ctx, "default", list)
	require.Len(t, errs, len(list))
	assert.NoError(t, errs[0])
	assert.Error(t, errs[1], "a gid that does not exist fails")
	assert.NoError(t, errs[2], "a failure does not stop the gids after it")
	assert.NoError(t, errs[3])

	rows, err := admin.Query(ctx, "SELECT id FROM "+schema+".orders ORDER BY id")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c"}, ids)
	var left int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE $1", schema+"%").Scan(&left))
	assert.Zero(t, left)
	// The pool's one connection still works.
	require.NoError(t, d.CommitPrepared(ctx, "default", gids[0]), "committed already: the marker says so")
}
