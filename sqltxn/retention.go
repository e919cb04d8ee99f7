package sqltxn

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Referenced returns those of gids that the database still references: a marker row (its
// outcome may still be read from it, I4, or the marker sweep has yet to delete it) or a
// prepared transaction (a leftover the orphan sweep finishes the way its log row says, I6).
// The log's retention keeps the rows of such gids: without its row, a marker would never be
// swept, and a prepared gid would be taken for an orphan and rolled back.
func (d *Databases) Referenced(ctx context.Context, database string, gids []string) ([]string, error) {
	db, err := d.db(database)
	if err != nil {
		return nil, err
	}
	if len(gids) == 0 {
		return nil, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT gid FROM `+db.markers+` WHERE gid = ANY($1)
UNION
SELECT gid FROM pg_prepared_xacts WHERE gid = ANY($1)`, gids)
	if err != nil {
		return nil, fmt.Errorf("database %q: gids still referenced: %w", database, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
