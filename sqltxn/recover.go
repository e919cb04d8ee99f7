package sqltxn

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Names lists the configured databases.
func (d *Databases) Names() []string {
	names := make([]string, 0, len(d.dbs))
	for n := range d.dbs {
		names = append(names, n)
	}
	return names
}

// PreparedGIDs lists the prepared transactions on the database's server whose gid starts with
// prefix and ends with "@<database>" (this coordinator's, on this database), with their age.
func (d *Databases) PreparedGIDs(ctx context.Context, database, prefix string) (map[string]time.Duration, error) {
	pool, err := d.Pool(database)
	if err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT gid, extract(epoch FROM now() - prepared)::float8 FROM pg_prepared_xacts
WHERE database = current_database() AND starts_with(gid, $1) AND gid LIKE $2`,
		prefix, "%@"+strings.ReplaceAll(database, "_", `\_`))
	if err != nil {
		return nil, fmt.Errorf("database %q: list prepared transactions: %w", database, err)
	}
	out := map[string]time.Duration{}
	for rows.Next() {
		var gid string
		var secs float64
		if err := rows.Scan(&gid, &secs); err != nil {
			return nil, err
		}
		out[gid] = time.Duration(secs * float64(time.Second))
	}
	return out, rows.Err()
}

// OldMarkers lists marker gids starting with prefix older than age (database time), at most
// limit. A fencing marker (SettleOnePhase) is listed only once no transaction on the database
// is older than it: one that is (a batch blocked on a lock since before the fence) could still
// insert its marker and commit if the fence went away. (Without pg_read_all_stats, other
// roles' transactions are invisible here.)
func (d *Databases) OldMarkers(ctx context.Context, database, prefix string, age time.Duration, limit int) ([]string, error) {
	pool, err := d.Pool(database)
	if err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT gid FROM `+d.markerTable(database)+`
WHERE created_at < now() - $1::interval AND starts_with(gid, $3)
  AND (NOT aborted OR created_at < (SELECT coalesce(min(xact_start), 'infinity') FROM pg_stat_activity
                                    WHERE datname = current_database() AND pid <> pg_backend_pid()))
ORDER BY created_at LIMIT $2`, age.String(), limit, prefix)
	if err != nil {
		return nil, fmt.Errorf("database %q: list markers: %w", database, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// PreparedXact is a prepared transaction of this coordinator found in pg_prepared_xacts.
type PreparedXact struct {
	Database   string
	GID        string
	PreparedAt time.Time // the server's prepare time: stable from one listing to the next
}

// PreparedXacts lists the prepared transactions on the database's server whose gid starts with
// prefix and ends with "@<database>" (this coordinator's, on this database), with the server's
// prepare time.
func (d *Databases) PreparedXacts(ctx context.Context, database, prefix string) ([]PreparedXact, error) {
	pool, err := d.Pool(database)
	if err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT gid, prepared FROM pg_prepared_xacts
WHERE database = current_database() AND starts_with(gid, $1) AND gid LIKE $2`,
		prefix, "%@"+strings.NewReplacer(`\`, `\\`, "_", `\_`, "%", `\%`).Replace(database))
	if err != nil {
		return nil, fmt.Errorf("list prepared transactions: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (PreparedXact, error) {
		p := PreparedXact{Database: database}
		err := r.Scan(&p.GID, &p.PreparedAt)
		return p, err
	})
}
