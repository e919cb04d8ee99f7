package txlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/kpgtx/coordinator/txntype"
)

// A transaction its caller decides (X1-X4, docs/design.md): its row waits after phase 1, and
// one conditional write takes the decision, whoever sends it.

// Waiting (X1) stores what Prepared stores with state waiting and decide_by, in one write,
// before the caller is told prepared: the log's now() plus within, but never later than the
// row's created_at plus bound, which stays below Kafka's transaction timeout (Kafka aborts an
// open transaction there, and Kafka decides last). t.DecideBy is set from the row.
func (l *Log) Waiting(ctx context.Context, t *txntype.Transaction, within, bound time.Duration) error {
	return l.prepared(ctx, t, txntype.StateWaiting,
		`, decide_by = LEAST(now() + $12::bigint * interval '1 microsecond', created_at + $13::bigint * interval '1 microsecond')`,
		within.Microseconds(), bound.Microseconds())
}

// decideSQL is X2, X3 and X4 in one conditional write on a waiting row ($1 gid), by the log's
// clock: a commit ($2) whose prepared_state ($3) matches, before decide_by, moves it to prepared
// (committing without Kafka); anything else claims the abort (aborting) with the reason as its
// error: a rollback ($5, its reason), the deadline reached, a stale prepared_state. $4: only
// once decide_by is reached (the deadline's claim). The writer ($6 at $7) becomes the owner,
// and the write is fenced by its epoch; the event records the decision and who took it.
var decideSQL = `
WITH upd AS (
    UPDATE coordinator_transactions SET
        state = CASE WHEN ` + commitOK + `
            THEN CASE WHEN transactional_id IS NULL THEN 'committing' ELSE 'prepared' END
            ELSE 'aborting' END,
        error_participant = CASE WHEN ` + commitOK + ` THEN NULL ELSE 'coordinator' END,
        error_class = CASE WHEN ` + commitOK + ` THEN NULL ELSE 'abortable' END,
        error_message = CASE
            WHEN ` + commitOK + ` THEN NULL
            WHEN NOT $2 AND NOT $4 THEN $5
            WHEN decide_by <= now() THEN 'no decision before decide_by (' || to_char(decide_by AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '): presumed abort'
            ELSE 'the commit''s prepared_state ' || $3 || ' does not match the transaction''s ' ||
                COALESCE(prepared_state, '` + txntype.NoKafkaPreparedState + `') || ': aborted, as a completeTransaction with a stale state is'
            END,
        owner_instance = $6, owner_epoch = $7, updated_at = now(),
        -- The decider finishes it now; recovery steps in only if it did not (I5).
        next_attempt_at = now() + interval '5 seconds'
    WHERE gid = $1 AND state = 'waiting' AND (NOT $4 OR decide_by <= now()) AND ` + fenced(6, 7) + `
    RETURNING ` + columns + `
), ev AS (
    INSERT INTO coordinator_events (gid, state, detail)
    SELECT gid, state, jsonb_build_object('decided_by', $6::text, 'epoch', $7::bigint, 'message', error_message)
    FROM upd
)
SELECT ` + columns + ` FROM upd`

// commitOK is X2's condition, on the row as it was: a commit, before decide_by, with the
// prepared_state that was answered.
const commitOK = `($2 AND decide_by > now() AND COALESCE(prepared_state, '` + txntype.NoKafkaPreparedState + `') = $3)`

// DecideWaiting takes d on the waiting row gid (X2-X4) and returns the row as the write left it:
// prepared or committing (the commit was accepted), or aborting with the reason as its error.
// ErrStateChanged (ErrMovedOn) when the row was not waiting (or, for the deadline, its
// decide_by not reached), or d.By no longer holds its epoch: nothing was written.
func (l *Log) DecideWaiting(ctx context.Context, gid string, d txntype.Decision) (*txntype.Transaction, error) {
	var t *txntype.Transaction
	err := l.queryRow(ctx, decideSQL,
		[]any{gid, d.Commit, d.PreparedState, d.Deadline, d.Reason, d.By.Instance, d.By.Epoch},
		func(row pgx.Row) error {
			var err error
			t, err = scan(row)
			return err
		})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("txlog: decide %s: not waiting: %w", gid, ErrStateChanged)
	}
	if err != nil {
		return nil, fmt.Errorf("txlog: decide %s: %w", gid, asLogRefused(err))
	}
	return t, nil
}

// DueWaiting returns waiting rows whose decide_by is reached by the log's clock, of any
// instance, earliest first: the deadline's claims (X4) are anyone's to take.
func (l *Log) DueWaiting(ctx context.Context, limit int) ([]*txntype.Transaction, error) {
	rows, err := l.pool.Query(ctx, `SELECT `+columns+` FROM coordinator_transactions
WHERE state = 'waiting' AND decide_by <= now() ORDER BY decide_by LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("txlog: due waiting: %w", err)
	}
	ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*txntype.Transaction, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("txlog: due waiting: %w", err)
	}
	return ts, nil
}

// WaitingStats is what waits for its callers: how many rows, and the earliest decide_by.
type WaitingStats struct {
	Count  int
	Oldest *time.Time // the earliest decide_by; nil: none waits
}

// WaitingStats counts the waiting rows of instance ("": of every instance).
func (l *Log) WaitingStats(ctx context.Context, instance string) (WaitingStats, error) {
	var s WaitingStats
	err := l.pool.QueryRow(ctx, `SELECT count(*), min(decide_by) FROM coordinator_transactions
WHERE state = 'waiting' AND ($1 = '' OR instance_id = $1)`, instance).Scan(&s.Count, &s.Oldest)
	if err != nil {
		return s, fmt.Errorf("txlog: waiting rows: %w", err)
	}
	return s, nil
}
