package txlog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/kpgtx/coordinator/txntype"
)

// Shared PostgreSQL transactions (coord/sharedsql.go, docs/batching.md section 12): the
// registrations the prepared write of a batch makes, and the tombstones of the orphan sweep.

// queueRegistrations queues the registration of shared transactions with their members in the
// prepared write's transaction; one already registered or tombstoned refuses the write (its
// statement fails, asRefused), which rolls it back.
func queueRegistrations(b *pgx.Batch, shared []txntype.SharedGID) error {
	for _, g := range shared {
		if len(g.Members) == 0 {
			return fmt.Errorf("txlog: shared transaction %s without members", g.GID)
		}
		b.Queue(`WITH reg AS (
    INSERT INTO coordinator_shared_gids (gid, members) VALUES ($1, $2) ON CONFLICT (gid) DO NOTHING RETURNING gid
)
SELECT `+refuseUnless("(SELECT count(*) FROM reg) = 1"), g.GID, g.Members)
	}
	return nil
}

// Shared is a shared transaction's registration: its members (none: a tombstone) and when it
// was written.
type Shared struct {
	Members   []string
	CreatedAt time.Time
}

// SharedGIDs returns the registration of each of gids that has one.
func (l *Log) SharedGIDs(ctx context.Context, gids []string) (map[string]Shared, error) {
	rows, err := l.pool.Query(ctx, `SELECT gid, members, created_at FROM coordinator_shared_gids WHERE gid = ANY($1)`, gids)
	if err != nil {
		return nil, fmt.Errorf("txlog: shared gids: %w", err)
	}
	out := map[string]Shared{}
	for rows.Next() {
		var g string
		var s Shared
		if err := rows.Scan(&g, &s.Members, &s.CreatedAt); err != nil {
			return nil, err
		}
		out[g] = s
	}
	return out, rows.Err()
}

// TombstoneShared makes sure gid has a registration before the sweep acts on it (S3): it writes
// a tombstone unless one exists, and returns the registration that holds now (Members empty:
// a tombstone, the sweep's or an earlier one).
func (l *Log) TombstoneShared(ctx context.Context, gid string) (Shared, error) {
	var s Shared
	err := l.pool.QueryRow(ctx, `WITH ins AS (
    INSERT INTO coordinator_shared_gids (gid) VALUES ($1) ON CONFLICT (gid) DO NOTHING RETURNING members, created_at
)
SELECT members, created_at FROM ins
UNION ALL
SELECT members, created_at FROM coordinator_shared_gids WHERE gid = $1 AND NOT EXISTS (SELECT 1 FROM ins)`, gid).Scan(&s.Members, &s.CreatedAt)
	if err != nil {
		return Shared{}, fmt.Errorf("txlog: tombstone %s: %w", gid, err)
	}
	return s, nil
}

// DeleteShared removes registrations and tombstones that no longer protect anything (gids, or
// any older than age):
//
//   - a registration once every member it names is committed or aborted (the caller deletes a
//     committed shared transaction's marker first, S4);
//   - a tombstone once no active row is older than it, without any timing assumption: a late
//     prepared write of its batch needs every member row still active, and each was created
//     before the shared transaction, so before the tombstone (the model's finding S-F5).
func (l *Log) DeleteShared(ctx context.Context, gids []string, age time.Duration) (int64, error) {
	tag, err := l.pool.Exec(ctx, `DELETE FROM coordinator_shared_gids s
WHERE (s.gid = ANY($1) OR s.created_at < now() - $2 * interval '1 second')
  AND CASE WHEN cardinality(s.members) = 0
      THEN NOT EXISTS (SELECT 1 FROM coordinator_transactions t
                       WHERE t.state = 'active' AND t.created_at <= s.created_at)
      ELSE NOT EXISTS (SELECT 1 FROM coordinator_transactions t
                       WHERE t.gid = ANY(s.members) AND t.state NOT IN ('committed', 'aborted'))
      END`, gids, age.Seconds())
	if err != nil {
		return 0, fmt.Errorf("txlog: delete shared gids: %w", err)
	}
	return tag.RowsAffected(), nil
}

// NamesSQLGID reports whether the row of the global gid names sqlGID as where its SQL work is:
// a row whose work went into a shared transaction names that one, not its own gid.
func (l *Log) NamesSQLGID(ctx context.Context, gid, sqlGID string) (bool, error) {
	var named bool
	err := l.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM coordinator_transactions
WHERE gid = $1 AND sql_gids @> jsonb_build_array(jsonb_build_object('gid', $2::text)))`, gid, sqlGID).Scan(&named)
	if err != nil {
		return false, fmt.Errorf("txlog: sql gids of %s: %w", gid, err)
	}
	return named, nil
}
