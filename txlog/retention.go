package txlog

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/kpgtx/coordinator/txntype"
)

// Retention (package retention): final rows older than the retention are removed with their
// events. The log offers the two steps, and a sample of its size:
//
//   - Expired lists the candidates, a page at a time, by the (state, created_at, gid) index: rows
//     committed or aborted whose last change is older than the age, and that no shared
//     transaction's registration names. Never a row in doubt, heuristic (an operator's), or one
//     a registration still needs (S2: its members decide a shared transaction). Any instance's
//     rows: what keeps a row is read from the log and the participants, never from one
//     instance's memory, so every instance may remove any row;
//   - the caller then drops those its participants still reference (a marker, a prepared gid,
//     a transaction of its producer still open on a partition its records went to: R2,
//     package retention);
//   - Remove deletes what is left in one statement that checks the row's conditions again under
//     the row's lock (a row reset meanwhile, a retry of an aborted request, or one a
//     registration named meanwhile, stays) and that records, for every partition the removed
//     rows' records went to, the highest offset removed (R3, coordinator_pruned): the
//     hanging-transaction repair tells a row never logged from one removed by it (H2).

// Expired is a final row the retention may remove, with what its participants may still
// reference.
type Expired struct {
	GID             string
	State           txntype.State
	CreatedAt       time.Time
	SQLGIDs         []txntype.SQLGID
	TransactionalID string // "" without Kafka
	ProducerID      int64
	// Spans are the partitions its records went to, with the highest offset on each (R2).
	Spans []RecordSpan
}

// RecordSpan is a partition a row's records went to and the highest offset among them.
type RecordSpan struct {
	Topic     string
	Partition int32
	MaxOffset int64
}

// spansOf reads the partitions and highest offsets of a kafka_records value.
func spansOf(recs []byte) ([]RecordSpan, error) {
	if len(recs) <= 2 { // '[]'
		return nil, nil
	}
	var offsets []txntype.RecordOffset
	if err := json.Unmarshal(recs, &offsets); err != nil {
		return nil, fmt.Errorf("kafka_records: %w", err)
	}
	var spans []RecordSpan
next:
	for _, o := range offsets {
		for i := range spans {
			if spans[i].Topic == o.Topic && spans[i].Partition == o.Partition {
				spans[i].MaxOffset = max(spans[i].MaxOffset, o.Offset)
				continue next
			}
		}
		spans = append(spans, RecordSpan{Topic: o.Topic, Partition: o.Partition, MaxOffset: o.Offset})
	}
	return spans, nil
}

// RetentionCursor continues Expired after the last row of a page (zero: from the oldest).
type RetentionCursor struct {
	State     txntype.State
	CreatedAt time.Time
	GID       string
}

// retentionStates are the states the retention may remove, in the order it walks them.
var retentionStates = []txntype.State{txntype.StateAborted, txntype.StateCommitted}

// expiredSQL is one page of candidates of one state ($1), oldest first after the cursor
// ($2, $3), created and last changed more than $4 microseconds ago, at most $5, with the
// records it produced. The order and the range are
// the (state, created_at, gid) index's, so a page reads only its rows however large the log.
const expiredSQL = `
SELECT gid, created_at, sql_gids, transactional_id, producer_id, kafka_records
FROM coordinator_transactions t
WHERE state = $1 AND (created_at, gid) > ($2, $3)
  AND created_at < now() - $4::bigint * interval '1 microsecond'
  AND updated_at < now() - $4::bigint * interval '1 microsecond'
  AND NOT EXISTS (SELECT 1 FROM coordinator_shared_gids s WHERE t.gid = ANY(s.members))
ORDER BY created_at, gid
LIMIT $5`

// Expired returns up to limit candidates after the cursor and the cursor of the next page
// (done: none is left, of any state).
func (l *Log) Expired(ctx context.Context, age time.Duration, after RetentionCursor, limit int) (page []Expired, next RetentionCursor, done bool, err error) {
	if age <= 0 {
		return nil, after, true, fmt.Errorf("txlog: expired rows: age %s: must be positive", age)
	}
	i := 0
	if after.State != "" {
		for i < len(retentionStates) && retentionStates[i] != after.State {
			i++
		}
	}
	for ; i < len(retentionStates); i++ {
		state := retentionStates[i]
		if after.State != state {
			after = RetentionCursor{State: state, CreatedAt: time.Unix(0, 0)}
		}
		rows, err := l.pool.Query(ctx, expiredSQL, string(state), after.CreatedAt, after.GID, age.Microseconds(), limit)
		if err != nil {
			return nil, after, false, fmt.Errorf("txlog: expired rows: %w", err)
		}
		page, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Expired, error) {
			e := Expired{State: state}
			var gids, recs []byte
			var tid *string
			var pid *int64
			if err := r.Scan(&e.GID, &e.CreatedAt, &gids, &tid, &pid, &recs); err != nil {
				return e, err
			}
			var err error
			if e.Spans, err = spansOf(recs); err != nil {
				return e, err
			}
			if tid != nil {
				e.TransactionalID = *tid
			}
			if pid != nil {
				e.ProducerID = *pid
			}
			return e, json.Unmarshal(gids, &e.SQLGIDs)
		})
		if err != nil {
			return nil, after, false, fmt.Errorf("txlog: expired rows: %w", err)
		}
		if len(page) > 0 {
			last := page[len(page)-1]
			return page, RetentionCursor{State: state, CreatedAt: last.CreatedAt, GID: last.GID}, false, nil
		}
	}
	return nil, after, true, nil
}

// removeSQL deletes the rows of $1 that are still final, last changed more than $2
// microseconds ago and named by no registration, with their events, and records the highest
// offset of their records per transactional id and partition (R3), in one statement: no row is
// gone without its mark.
const removeSQL = `
WITH del AS (
    DELETE FROM coordinator_transactions t
    WHERE gid = ANY($1) AND state IN ('committed', 'aborted')
      AND updated_at < now() - $2::bigint * interval '1 microsecond'
      AND NOT EXISTS (SELECT 1 FROM coordinator_shared_gids s WHERE t.gid = ANY(s.members))
    RETURNING gid, transactional_id, kafka_records
), ev AS (
    DELETE FROM coordinator_events e USING del WHERE e.gid = del.gid RETURNING e.id
), marks AS (
    INSERT INTO coordinator_pruned AS p (transactional_id, topic, partition, max_offset)
    SELECT del.transactional_id, r->>'topic', (r->>'partition')::int, max((r->>'offset')::bigint)
    FROM del, jsonb_array_elements(del.kafka_records) r
    WHERE del.transactional_id IS NOT NULL AND r ? 'offset'
    GROUP BY 1, 2, 3
    ON CONFLICT (transactional_id, topic, partition) DO UPDATE
        SET max_offset = greatest(p.max_offset, EXCLUDED.max_offset), pruned_at = now()
    RETURNING 1
)
SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ev), (SELECT count(*) FROM marks)`

// Remove deletes the rows of gids that are still final and older than age (their last
// change), with their events. It returns how many rows and events it removed.
func (l *Log) Remove(ctx context.Context, gids []string, age time.Duration) (rows, events int64, err error) {
	if age <= 0 {
		return 0, 0, fmt.Errorf("txlog: remove rows: age %s: must be positive", age)
	}
	if len(gids) == 0 {
		return 0, 0, nil
	}
	var marks int64
	if err := l.pool.QueryRow(ctx, removeSQL, gids, age.Microseconds()).Scan(&rows, &events, &marks); err != nil {
		return 0, 0, fmt.Errorf("txlog: remove rows: %w", err)
	}
	return rows, events, nil
}

// Size is a sample of the log's size.
type Size struct {
	// Rows and Events are PostgreSQL's estimates (pg_class.reltuples, kept by autovacuum and
	// ANALYZE): exact counts would read the whole table.
	Rows, Events int64
	// Bytes is the space of both tables with their indexes and TOAST (pg_total_relation_size).
	Bytes int64
	// OldestFinal is the creation time of the oldest committed or aborted row (zero: none), read
	// from the (state, created_at, gid) index.
	OldestFinal time.Time
	// Now is the database's clock when the sample was taken.
	Now time.Time
}

// Size samples the log's size. It reads catalogue entries and two index ends: cheap at any size.
func (l *Log) Size(ctx context.Context) (Size, error) {
	var s Size
	var oldest *time.Time
	err := l.pool.QueryRow(ctx, `SELECT
    greatest((SELECT reltuples FROM pg_class WHERE oid = 'coordinator_transactions'::regclass), 0)::bigint,
    greatest((SELECT reltuples FROM pg_class WHERE oid = 'coordinator_events'::regclass), 0)::bigint,
    pg_total_relation_size('coordinator_transactions') + pg_total_relation_size('coordinator_events'),
    least((SELECT min(created_at) FROM coordinator_transactions WHERE state = 'committed'),
          (SELECT min(created_at) FROM coordinator_transactions WHERE state = 'aborted')),
    now()`).Scan(&s.Rows, &s.Events, &s.Bytes, &oldest, &s.Now)
	if err != nil {
		return Size{}, fmt.Errorf("txlog: size: %w", err)
	}
	if oldest != nil {
		s.OldestFinal = *oldest
	}
	return s, nil
}
