package txlog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kpgtx/coordinator/coord"
)

// Due returns the instance's transactions that are not final and whose next attempt is due, by
// database time (never the local clock), oldest deadline first.
func (l *Log) Due(ctx context.Context, instance string, limit int) ([]*coord.Transaction, error) {
	rows, err := l.pool.Query(ctx, `SELECT `+columns+` FROM coordinator_transactions
WHERE instance_id = $1 AND state IN ('active', 'prepared', 'committing') AND next_attempt_at <= now()
ORDER BY next_attempt_at LIMIT $2`, instance, limit)
	if err != nil {
		return nil, fmt.Errorf("txlog: due: %w", err)
	}
	defer rows.Close()
	var out []*coord.Transaction
	for rows.Next() {
		t, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("txlog: due: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// RecordAttempt notes a failed resolution attempt: the count, the error, and the next attempt
// after backoff, in database time.
func (l *Log) RecordAttempt(ctx context.Context, gid, lastError string, backoff time.Duration) error {
	_, err := l.pool.Exec(ctx, `UPDATE coordinator_transactions
SET attempts = attempts + 1, last_error = $2, next_attempt_at = now() + $3::interval
WHERE gid = $1`, gid, lastError, backoff.String())
	if err != nil {
		return fmt.Errorf("txlog: record attempt of %s: %w", gid, err)
	}
	return nil
}

// Attempts returns the attempt count and last error of a transaction.
func (l *Log) Attempts(ctx context.Context, gid string) (int, string, error) {
	var n int
	var last *string
	err := l.pool.QueryRow(ctx, `SELECT attempts, last_error FROM coordinator_transactions WHERE gid = $1`, gid).Scan(&n, &last)
	if err != nil {
		return 0, "", fmt.Errorf("txlog: attempts of %s: %w", gid, err)
	}
	if last == nil {
		return n, "", nil
	}
	return n, *last, nil
}

// States returns the state of each gid that has a row; gids without a row are absent.
func (l *Log) States(ctx context.Context, gids []string) (map[string]coord.State, error) {
	rows, err := l.pool.Query(ctx, `SELECT gid, state FROM coordinator_transactions WHERE gid = ANY($1)`, gids)
	if err != nil {
		return nil, fmt.Errorf("txlog: states: %w", err)
	}
	out := map[string]coord.State{}
	for rows.Next() {
		var gid string
		var st coord.State
		if err := rows.Scan(&gid, &st); err != nil {
			return nil, err
		}
		out[gid] = st
	}
	return out, rows.Err()
}

// TransactionalIDInDoubt reports whether any non-final transaction still names the id.
func (l *Log) TransactionalIDInDoubt(ctx context.Context, id string) (bool, error) {
	var n int
	err := l.pool.QueryRow(ctx, `SELECT count(*) FROM coordinator_transactions
WHERE transactional_id = $1 AND state IN ('prepared', 'committing')`, id).Scan(&n)
	return n > 0, err
}

// Instance is a coordinator instance registered on this log.
type Instance struct {
	ID          string
	TxnIDPrefix string
	PoolSize    int
	// Silent is how long since its last heartbeat, by database time.
	Silent time.Duration
}

// RegisterInstance records (or refreshes) this instance and its transactional-id pool.
func (l *Log) RegisterInstance(ctx context.Context, id, txnIDPrefix string, poolSize int) error {
	_, err := l.pool.Exec(ctx, `INSERT INTO coordinator_instances (instance_id, txn_id_prefix, pool_size)
VALUES ($1, $2, $3)
ON CONFLICT (instance_id) DO UPDATE SET txn_id_prefix = EXCLUDED.txn_id_prefix,
    pool_size = GREATEST(coordinator_instances.pool_size, EXCLUDED.pool_size),
    started_at = now(), heartbeat_at = now()`, id, txnIDPrefix, poolSize)
	if err != nil {
		return fmt.Errorf("txlog: register instance %s: %w", id, err)
	}
	return nil
}

// Heartbeat refreshes the instance's heartbeat.
func (l *Log) Heartbeat(ctx context.Context, id string) error {
	_, err := l.pool.Exec(ctx, `UPDATE coordinator_instances SET heartbeat_at = now() WHERE instance_id = $1`, id)
	if err != nil {
		return fmt.Errorf("txlog: heartbeat %s: %w", id, err)
	}
	return nil
}

// Instances lists the registered instances other than self.
func (l *Log) Instances(ctx context.Context, self string) ([]Instance, error) {
	rows, err := l.pool.Query(ctx, `SELECT instance_id, txn_id_prefix, pool_size,
    extract(epoch FROM now() - heartbeat_at)::float8
FROM coordinator_instances WHERE instance_id <> $1`, self)
	if err != nil {
		return nil, fmt.Errorf("txlog: instances: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Instance, error) {
		var in Instance
		var secs float64
		err := r.Scan(&in.ID, &in.TxnIDPrefix, &in.PoolSize, &secs)
		in.Silent = time.Duration(secs * float64(time.Second))
		return in, err
	})
}

// Now is the database's clock, which every deadline uses.
func (l *Log) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := l.pool.QueryRow(ctx, `SELECT now()`).Scan(&now)
	return now, err
}
