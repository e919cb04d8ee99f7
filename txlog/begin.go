package txlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// beginRow is what Begin inserts: one row of beginSQL.
type beginRow struct {
	gid, requestID, instance string
	digest                   []byte
	sqlGIDs                  string // JSON
	epoch                    int64
	onePhase                 bool
	// patient: the request waits for its batch meanwhile (coord.JoinedBegin); a writer may hold
	// it to share a flush (groupCommit.gather) until sealed is closed (nil: never).
	patient bool
	sealed  <-chan struct{}
}

// beginSQL inserts many rows in one statement, with no event: a new row's history starts at its
// created_at (derived_events, Events) ($1..$7: beginRow's fields, as arrays), each
// fenced on its own owner's epoch (the instance must still hold it). A row whose request id (or
// gid) exists is not inserted and not returned: Begin then tries resetSQL.
//
// ON CONFLICT DO NOTHING has no conflict target, so that every unique index is an arbiter: a
// Begin racing another one of the same request id (in another transaction of the log, still
// uncommitted) waits for it and then finds its row, whichever index it meets first. With only
// request_id as the arbiter, one that met the racing row's gid in the primary key first failed
// with a unique violation, and the whole group commit with it.
//
// The request ids must be distinct (one statement would insert the first and skip the second
// without an error, and its answer would not say which was which): mergeBegins sees to it.
const beginSQL = `
WITH x AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::text[], $6::bigint[], $7::boolean[])
        AS x(gid, request_id, digest, instance, sql_gids, epoch, one_phase)
    WHERE EXISTS (SELECT 1 FROM coordinator_instances i WHERE i.instance_id = x.instance AND i.epoch = x.epoch)
), ins AS (
    INSERT INTO coordinator_transactions (gid, request_id, request_digest, instance_id, state, sql_gids,
        owner_instance, owner_epoch, one_phase)
    SELECT gid, request_id, digest, instance, 'active', sql_gids::jsonb, instance, epoch, one_phase FROM x
    ORDER BY request_id -- every flush takes the keys in one order: two instances never deadlock on them
    ON CONFLICT DO NOTHING
    RETURNING ` + beginReturning + `
)
SELECT ` + beginReturning + ` FROM ins`

// beginReturning is what beginSQL returns of a row it inserted: the rest of the row is what
// Begin sent (freshRow). Returning and scanning every column, JSON included, was about 4 % of
// the coordinator's CPU per request (pprof, c=16), spent on values it already had.
const beginReturning = `request_id, created_at, updated_at`

// resetSQL runs a request again whose row ended aborted with a retriable error and has the same
// digest ($1 request id, $2 digest, $3 instance, $4 SQL gids, $5 epoch, $6 one-phase, fenced
// like beginSQL): the API told the caller that retrying is safe, and its participants
// were all rolled back. It is a compare-and-set on that state: of two racing resets, the second
// finds the row active and changes nothing. The new attempt has no prepared_at yet: the earlier
// attempt's, which its derived history showed (Events), is stored as an event of its own.
var resetSQL = `
WITH old AS (
    SELECT gid AS old_gid, prepared_at AS old_prepared FROM coordinator_transactions WHERE request_id = $1
), upd AS (
    UPDATE coordinator_transactions
    SET state = 'active', instance_id = $3, updated_at = now(), prepared_at = NULL,
        owner_instance = $3, owner_epoch = $5, one_phase = $6,
        error_participant = NULL, error_class = NULL, error_message = NULL,
        error_sqlstate = NULL, finished_at = NULL, sql_results = '[]', kafka_records = '[]',
        transactional_id = NULL, producer_id = NULL, producer_epoch = NULL,
        prepared_state = NULL, sql_gids = $4::jsonb, attempts = 0, kafka_offsets = NULL,
        next_attempt_at = now(), last_error = NULL
    FROM old
    WHERE gid = old_gid AND request_id = $1 AND state = 'aborted' AND error_class = 'retriable'
      AND request_digest = $2 AND ` + fenced(3, 5) + `
    RETURNING ` + columns + `, old_prepared, derived_events
), ev AS (
    INSERT INTO coordinator_events (gid, state, created_at)
    SELECT gid, 'prepared', old_prepared FROM upd WHERE derived_events AND old_prepared IS NOT NULL
    UNION ALL
    SELECT gid, 'active', now() FROM upd
)
SELECT ` + columns + ` FROM upd`

// requestIDColumn is the position of request_id in beginReturning.
const requestIDColumn = 0

// Begin inserts the transaction as active, owned by t.Owner at t.OwnerEpoch, only while that
// instance still holds that epoch (else txntype.ErrNotOwner). An existing row with the same
// request id is returned with created=false, except a row that ended aborted with a retriable
// error and the same digest, which is reset and run again (resetSQL). Under group commit, the
// Begins of one flush are one statement (mergeBegins).
func (l *Log) Begin(ctx context.Context, t *txntype.Transaction) (*txntype.Transaction, bool, error) {
	_, gidsJSON, _, err := marshal3(nil, t.SQLGIDs, nil)
	if err != nil {
		return nil, false, err
	}
	row := &beginRow{gid: t.GID, requestID: t.ID, instance: t.Instance, digest: t.Digest,
		sqlGIDs: string(gidsJSON), epoch: t.OwnerEpoch, onePhase: t.OnePhase}
	row.sealed, row.patient = coord.JoinedBegin(ctx)
	var stored *txntype.Transaction
	fresh := func(r pgx.Row) (err error) {
		stored, err = freshRow(r, t)
		return err
	}
	for attempt := 0; ; attempt++ {
		err = l.queryRowMerged(ctx, beginSQL, beginArgs(row), row, fresh)
		if errors.Is(err, pgx.ErrNoRows) {
			err = l.queryRow(ctx, resetSQL, []any{row.requestID, row.digest, row.instance,
				row.sqlGIDs, row.epoch, row.onePhase}, func(r pgx.Row) (err error) {
				stored, err = scan(r)
				return err
			})
		}
		if err == nil {
			return stored, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			// Unsent or refused, nothing of it was written (coord: 503, safe to retry);
			// otherwise the row may exist (coord: in doubt).
			return nil, false, fmt.Errorf("txlog: begin %s: %w", t.GID, asUnsent(asLogRefused(err)))
		}
		stored, err = l.Get(ctx, t.ID)
		// A row that the insert met and that is gone now was removed by the retention in
		// between (R1): the request is a new transaction, inserted once more.
		if !errors.Is(err, txntype.ErrNotFound) || attempt > 0 {
			break
		}
	}
	if errors.Is(err, txntype.ErrNotFound) {
		if _, gerr := l.getBy(ctx, "gid", t.GID); gerr == nil {
			// Only a log shared by coordinators of different gid prefixes can get here.
			return nil, false, fmt.Errorf("txlog: begin %s: the gid belongs to another request id", t.GID)
		}
		return nil, false, fmt.Errorf("txlog: begin %s: instance %q no longer holds epoch %d: %w",
			t.GID, t.Instance, t.OwnerEpoch, txntype.ErrNotOwner)
	}
	if err != nil {
		return nil, false, err
	}
	return stored, false, nil
}

// freshRow reads beginSQL's answer for t's row: the row as scan would read it back, built from
// what Begin inserted and the stamps the server gave it.
func freshRow(r pgx.Row, t *txntype.Transaction) (*txntype.Transaction, error) {
	var id string
	var created, updated time.Time
	if err := r.Scan(&id, &created, &updated); err != nil {
		return nil, err
	}
	if id != t.ID {
		return nil, fmt.Errorf("txlog: begin %s: the log answered for request id %q", t.GID, id)
	}
	gids := append([]txntype.SQLGID{}, t.SQLGIDs...)
	return &txntype.Transaction{
		ID: t.ID, GID: t.GID, Instance: t.Instance, State: txntype.StateActive,
		Owner: t.Instance, OwnerEpoch: t.OwnerEpoch, OnePhase: t.OnePhase,
		SQL: []txntype.SQLResult{}, SQLGIDs: gids, Digest: append([]byte(nil), t.Digest...),
		CreatedAt: created, UpdatedAt: updated,
	}, nil
}

// mergeBegins takes the Begins of a flush with distinct request ids out of it, when there are
// at least two, and returns them with their one statement; the rest of the batch (other writes,
// and a Begin repeating a request id, which must see the first one's row) stays statements of
// their own, sent after it in the same transaction. Merging changes nothing of a Begin's
// answer: each row is fenced and inserted or skipped exactly as alone.
func mergeBegins(batch []*write) (merged []*write, rest []*write, sql string, args []any) {
	seen := map[string]bool{}
	for _, w := range batch {
		if w.begin != nil && !seen[w.begin.requestID] {
			seen[w.begin.requestID] = true
			merged = append(merged, w)
			continue
		}
		rest = append(rest, w)
	}
	if len(merged) < 2 {
		return nil, batch, "", nil
	}
	rows := make([]*beginRow, len(merged))
	for i, w := range merged {
		rows[i] = w.begin
	}
	return merged, rest, beginSQL, beginArgs(rows...)
}

// beginArgs are beginSQL's arguments for the rows.
func beginArgs(rows ...*beginRow) []any {
	n := len(rows)
	gids, ids, instances, sqlGIDs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	digests, epochs, onePhase := make([][]byte, n), make([]int64, n), make([]bool, n)
	for i, b := range rows {
		gids[i], ids[i], instances[i], sqlGIDs[i] = b.gid, b.requestID, b.instance, b.sqlGIDs
		digests[i], epochs[i], onePhase[i] = b.digest, b.epoch, b.onePhase
	}
	return []any{gids, ids, digests, instances, sqlGIDs, epochs, onePhase}
}

// readMerged hands each row of mergedBeginSQL's answer to its Begin's scan; a Begin whose row
// is not in the answer (fenced, or an existing row kept) gets pgx.ErrNoRows, as alone.
func readMerged(rows pgx.Rows, merged []*write, errs []error) error {
	defer rows.Close()
	byID := make(map[string]int, len(merged))
	for i, w := range merged {
		byID[w.begin.requestID] = i
		errs[i] = pgx.ErrNoRows
	}
	for rows.Next() {
		i, ok := byID[string(rows.RawValues()[requestIDColumn])]
		if !ok {
			return fmt.Errorf("txlog: merged begin returned a request id it was not given")
		}
		errs[i] = merged[i].scan(rows)
	}
	return rows.Err()
}
