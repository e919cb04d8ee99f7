package sqltxn

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
		var holder, holderName string
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) (err error) {
			holder, holderName, err = claimNamespace(ctx, tx, namespace, logID, logName)
			return err
		})
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
			err = fmt.Errorf("namespace registry: a prepared transaction holds its lock or its table: "+
				"end it (SELECT gid FROM pg_prepared_xacts; COMMIT or ROLLBACK PREPARED) and start again: %w", err)
		}
		if err != nil {
			return fmt.Errorf("database %q: %w", name, err)
		}
		if holder != logID {
			return fmt.Errorf("database %q: %w: namespace %q (COORDINATOR_GID_PREFIX) is held by the log %s (id %s), not this log %s (id %s): "+
				"give each log its own COORDINATOR_GID_PREFIX; if that log is gone for good, "+
				"DELETE FROM kpgtx.namespaces WHERE namespace = '%s' on this database",
				name, ErrNamespaceTaken, namespace, holderName, holder, logName, logID, namespace)
		}
		// The registry is the coordinator's too.
		if err := guardOwnTables(ctx, db.pool, name, "kpgtx", d.logger); err != nil {
			return err
		}
	}
	return nil
}

// claimNamespace returns the log holding namespace, claiming it for logID when no log does. A
// restart only reads its own claim; only a first claim takes the registry's lock.
func claimNamespace(ctx context.Context, tx pgx.Tx, namespace, logID, logName string) (holder, holderName string, err error) {
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+startupLockTimeout+"'"); err != nil {
		return "", "", err
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.to_regclass('kpgtx.namespaces') IS NOT NULL`).Scan(&exists); err != nil {
		return "", "", fmt.Errorf("namespace registry: %w", err)
	}
	if exists {
		err := tx.QueryRow(ctx, `SELECT log_id, log_name FROM kpgtx.namespaces WHERE namespace = $1`, namespace).Scan(&holder, &holderName)
		if err == nil {
			return holder, holderName, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", "", fmt.Errorf("namespace registry: %w", err)
		}
	}
	for _, q := range namespaceDDL {
		if _, err := tx.Exec(ctx, q); err != nil {
			return "", "", fmt.Errorf("namespace registry: %w", err)
		}
	}
	err = tx.QueryRow(ctx, `WITH ins AS (
    INSERT INTO kpgtx.namespaces (namespace, log_id, log_name) VALUES ($1, $2, $3)
    ON CONFLICT (namespace) DO NOTHING RETURNING log_id, log_name
)
SELECT log_id, log_name FROM ins
UNION ALL
SELECT log_id, log_name FROM kpgtx.namespaces WHERE namespace = $1 AND NOT EXISTS (SELECT 1 FROM ins)`,
		namespace, logID, logName).Scan(&holder, &holderName)
	if err != nil {
		return "", "", fmt.Errorf("namespace registry: %w", err)
	}
	return holder, holderName, nil
}
