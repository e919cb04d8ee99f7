package txlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/kpgtx/coordinator/txntype"
)

// Due returns the instance's transactions that are not final and whose next attempt is due, by
// database time (never the local clock), oldest deadline first. Active rows created less than
// activeGuard ago are left out (0: none is).
func (l *Log) Due(ctx context.Context, instance string, activeGuard time.Duration, limit int) ([]*txntype.Transaction, error) {
	rows, err := l.pool.Query(ctx, dueSQL, instance, limit, activeGuard.String())
	if err != nil {
		return nil, fmt.Errorf("txlog: due: %w", err)
	}
	defer rows.Close()
	var out []*txntype.Transaction
	for rows.Next() {
		t, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("txlog: due: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// dueSQL reads the due rows in deadline order. It reads every row in doubt of the instance
// (the in-doubt index) to order them: a page of 2,048 took about 100 ms with 10,000 in doubt.
var dueSQL = `SELECT ` + columns + ` FROM coordinator_transactions
WHERE instance_id = $1 AND state IN ('active', 'aborting', 'prepared', 'committing') AND next_attempt_at <= now()
  AND (state <> 'active' OR created_at <= now() - $3::interval)
ORDER BY next_attempt_at LIMIT $2`

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
func (l *Log) States(ctx context.Context, gids []string) (map[string]txntype.State, error) {
	rows, err := l.pool.Query(ctx, `SELECT gid, state FROM coordinator_transactions WHERE gid = ANY($1)`, gids)
	if err != nil {
		return nil, fmt.Errorf("txlog: states: %w", err)
	}
	out := map[string]txntype.State{}
	for rows.Next() {
		var gid string
		var st txntype.State
		if err := rows.Scan(&gid, &st); err != nil {
			return nil, err
		}
		out[gid] = st
	}
	return out, rows.Err()
}

// TransactionalIDInDoubt reports whether any non-final transaction still names the id (I1): a
// waiting row's Kafka transaction is open on it (X1), and an aborting row that names it was
// claimed from waiting and may still have to abort it by its ids (X3, X4).
func (l *Log) TransactionalIDInDoubt(ctx context.Context, id string) (bool, error) {
	var n int
	err := l.pool.QueryRow(ctx, `SELECT count(*) FROM coordinator_transactions
WHERE transactional_id = $1 AND state IN ('waiting', 'prepared', 'committing', 'aborting')`, id).Scan(&n)
	return n > 0, err
}

// Instance is a coordinator instance registered on this log.
type Instance struct {
	ID          string
	TxnIDPrefix string
	PoolSize    int
	// Silent is how long since its last heartbeat, by database time. Informational: a
	// heartbeat's age says nothing of liveness (a slow pass, a paused process), Locked does.
	Silent time.Duration
	// Locked: a session holds the instance's advisory lock now (I8): the instance is alive, or
	// another instance or an operator is acting for it this moment.
	Locked bool
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

// instanceLocked is whether the advisory lock of the instance i.instance_id (recovery's lockKey:
// the same key, computed the same way) is held: pg_locks shows a bigint key as its high and low
// 32 bits (classid, objid) with objsubid 1.
const instanceLocked = `EXISTS (SELECT 1 FROM pg_locks k,
    LATERAL (SELECT hashtextextended(current_schema() || '/kpgtx-instance/' || i.instance_id, 0) AS key) h
    WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
      AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND k.classid = ((h.key >> 32) & 4294967295)::oid AND k.objid = (h.key & 4294967295)::oid)`

// Instances lists the registered instances other than self, with whether each holds its lock.
func (l *Log) Instances(ctx context.Context, self string) ([]Instance, error) {
	rows, err := l.pool.Query(ctx, `SELECT instance_id, txn_id_prefix, pool_size,
    extract(epoch FROM now() - heartbeat_at)::float8, `+instanceLocked+`
FROM coordinator_instances i WHERE instance_id <> $1`, self)
	if err != nil {
		return nil, fmt.Errorf("txlog: instances: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Instance, error) {
		var in Instance
		var secs float64
		err := r.Scan(&in.ID, &in.TxnIDPrefix, &in.PoolSize, &secs, &in.Locked)
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

// Claim makes the row the resolver's (by) and moves it to state to, before the resolver touches
// any participant (claim before act). It is one compare-and-set on the state, owner and owner
// epoch the resolver read (t), and succeeds only while by still holds its epoch: of two
// resolvers, or a resolver and the live request, exactly one writes next. A claim from active
// to aborting fixes the outcome: the request's own prepared write then fails (its owner or
// epoch no longer match), so nothing can commit Kafka afterwards. ErrStateChanged when the row
// moved on.
func (l *Log) Claim(ctx context.Context, t *txntype.Transaction, by txntype.Fence, to txntype.State) error {
	var updated time.Time
	err := l.queryRow(ctx, `
WITH upd AS (
    UPDATE coordinator_transactions SET state = $2, owner_instance = $6, owner_epoch = $7,
        updated_at = now()
    WHERE gid = $1 AND state = $3 AND owner_instance = $4 AND owner_epoch = $5 AND `+fenced(6, 7)+`
    RETURNING gid, state, updated_at
), ev AS (
    INSERT INTO coordinator_events (gid, state, detail)
    SELECT gid, state, jsonb_build_object('claimed_by', $6::text, 'epoch', $7::bigint,
        'previous_owner', $4::text, 'previous_epoch', $5::bigint, 'previous_state', $3::text)
    FROM upd
)
SELECT updated_at FROM upd`,
		[]any{t.GID, string(to), string(t.State), t.Owner, t.OwnerEpoch, by.Instance, by.Epoch},
		func(row pgx.Row) error { return row.Scan(&updated) })
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("txlog: claim %s %s -> %s by %s@%d: %w", t.GID, t.State, to, by.Instance, by.Epoch, ErrStateChanged)
	}
	if err != nil {
		return fmt.Errorf("txlog: claim %s by %s@%d: %w", t.GID, by.Instance, by.Epoch, err)
	}
	t.State, t.Owner, t.OwnerEpoch, t.UpdatedAt = to, by.Instance, by.Epoch, updated
	return nil
}

// Querier runs one statement (a connection, a pool).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// BumpEpoch increments the instance's epoch and returns it. It is called by whoever has just
// taken the instance's advisory lock (the instance itself at start or after losing its lock
// session, a takeover, an operator acting for it), on the session holding that lock: every
// write fenced by an older epoch fails from then on. The instance row is created if missing.
func BumpEpoch(ctx context.Context, q Querier, instance string) (int64, error) {
	var epoch int64
	err := q.QueryRow(ctx, `INSERT INTO coordinator_instances (instance_id, txn_id_prefix, pool_size, epoch)
VALUES ($1, '', 0, 1)
ON CONFLICT (instance_id) DO UPDATE SET epoch = coordinator_instances.epoch + 1
RETURNING epoch`, instance).Scan(&epoch)
	if err != nil {
		return 0, fmt.Errorf("txlog: bump epoch of %s: %w", instance, err)
	}
	return epoch, nil
}

// ErrEpochMoved: the instance's epoch is no longer the one its taker set (the instance claimed
// its lock again after the taker's session was lost).
var ErrEpochMoved = errors.New("instance epoch moved on")

// HoldEpoch confirms, in a transaction tx of the session that took the instance's lock, that
// the instance's epoch is still the one that session set, and keeps the instance's row locked
// until tx ends: the instance cannot claim its lock again (BumpEpoch waits) while the holder
// acts for it. A lost session fails here, before anything is done in the instance's name.
func HoldEpoch(ctx context.Context, tx pgx.Tx, instance string, epoch int64) error {
	var now int64
	err := tx.QueryRow(ctx, `SELECT epoch FROM coordinator_instances WHERE instance_id = $1 FOR UPDATE`, instance).Scan(&now)
	if err != nil {
		return fmt.Errorf("txlog: hold epoch of %s: %w", instance, err)
	}
	if now != epoch {
		return fmt.Errorf("txlog: %s is at epoch %d, not %d: %w", instance, now, epoch, ErrEpochMoved)
	}
	return nil
}

// Epoch is the instance's current epoch (0 when it has no row).
func (l *Log) Epoch(ctx context.Context, instance string) (int64, error) {
	var epoch int64
	err := l.pool.QueryRow(ctx, `SELECT epoch FROM coordinator_instances WHERE instance_id = $1`, instance).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("txlog: epoch of %s: %w", instance, err)
	}
	return epoch, nil
}

// Identity is the log's id (created with its schema) and a name for messages: the database and
// schema it lives in.
func (l *Log) Identity(ctx context.Context) (id, name string, err error) {
	err = l.pool.QueryRow(ctx, `SELECT id, current_database() || '/' || current_schema() FROM coordinator_log LIMIT 1`).Scan(&id, &name)
	if err != nil {
		return "", "", fmt.Errorf("txlog: the log's identity: %w", err)
	}
	return id, name, nil
}
