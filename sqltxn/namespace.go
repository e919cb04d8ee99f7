package sqltxn

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Namespaces: every log claims its gid prefix in each participant database, in the table
// kpgtx.namespaces (one per database, whatever the search_path, as prepared transactions are
// per database). Orphan rollback and the marker sweep act only on gids of the log's own
// namespace, so two logs on one database never touch each other's transactions; a second log
// asking for a namespace that another log holds is refused at startup.

// namespaceDDL creates the registry; the advisory lock serialises concurrent first starts
// (CREATE … IF NOT EXISTS is not safe against itself).
var namespaceDDL = []string{
	`SELECT pg_advisory_xact_lock(hashtext('kpgtx/namespaces'))`,
	`CREATE SCHEMA IF NOT EXISTS kpgtx`,
	`CREATE TABLE IF NOT EXISTS kpgtx.namespaces (
    namespace  text        PRIMARY KEY,
    log_id     text        NOT NULL,
    log_name   text        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
)`,
}

// ClaimNamespace claims namespace for the log logID (named logName in messages) on every
// database, or refuses with ErrNamespaceTaken naming the log that holds it.
func (d *Databases) ClaimNamespace(ctx context.Context, namespace, logID, logName string) error {
	for name, db := range d.dbs {
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			for _, q := range namespaceDDL {
				if _, err := tx.Exec(ctx, q); err != nil {
					return fmt.Errorf("namespace registry: %w", err)
				}
			}
			var holder, holderName string
			err := tx.QueryRow(ctx, `WITH ins AS (
    INSERT INTO kpgtx.namespaces (namespace, log_id, log_name) VALUES ($1, $2, $3)
    ON CONFLICT (namespace) DO NOTHING RETURNING log_id, log_name
)
SELECT log_id, log_name FROM ins
UNION ALL
SELECT log_id, log_name FROM kpgtx.namespaces WHERE namespace = $1 AND NOT EXISTS (SELECT 1 FROM ins)`,
				namespace, logID, logName).Scan(&holder, &holderName)
			if err != nil {
				return fmt.Errorf("namespace registry: %w", err)
			}
			if holder != logID {
				return fmt.Errorf("%w: namespace %q (COORDINATOR_GID_PREFIX) is held by the log %s (id %s), not this log %s (id %s): "+
					"give each log its own COORDINATOR_GID_PREFIX; if that log is gone for good, "+
					"DELETE FROM kpgtx.namespaces WHERE namespace = '%s' on this database",
					ErrNamespaceTaken, namespace, holderName, holder, logName, logID, namespace)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("database %q: %w", name, err)
		}
		// The registry is the coordinator's too.
		if err := guardOwnTables(ctx, db.pool, name, "kpgtx", d.logger); err != nil {
			return err
		}
	}
	return nil
}
