package txlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/kpgtx/coordinator/txntype"
)

// PartitionTxn is a logged transaction with records on one partition, and the offset of its first
// record there.
type PartitionTxn struct {
	*txntype.Transaction
	FirstOffset int64
}

// TransactionsOnPartition returns the logged transactions of one producer (transactional id and
// producer id) with a record on the partition at or after offset from, by their first offset
// there: the transactions whose records a transaction left open on that partition since from
// holds (a hanging transaction, kafkatxn/hanging.go). Only rows that were prepared count: a row
// aborted before prepared may name the ids and records it used, but it never committed them.
func (l *Log) TransactionsOnPartition(ctx context.Context, transactionalID string, producerID int64,
	topic string, partition int32, from int64) ([]PartitionTxn, error) {
	rows, err := l.pool.Query(ctx, `SELECT * FROM (
	SELECT `+columns+`, (SELECT min((r->>'offset')::bigint) FROM jsonb_array_elements(kafka_records) r
		WHERE r->>'topic' = $3 AND (r->>'partition')::int = $4) AS first_offset
	FROM coordinator_transactions
	WHERE transactional_id = $1 AND producer_id = $2 AND prepared_at IS NOT NULL
	  AND kafka_records @> jsonb_build_array(jsonb_build_object('topic', $3::text, 'partition', $4::int))
) t WHERE first_offset >= $5 ORDER BY first_offset`, transactionalID, producerID, topic, partition, from)
	if err != nil {
		return nil, fmt.Errorf("txlog: transactions on %s/%d: %w", topic, partition, err)
	}
	defer rows.Close()
	var out []PartitionTxn
	for rows.Next() {
		var pt PartitionTxn
		t, err := scan(extraRow{Row: rows, extra: []any{&pt.FirstOffset}})
		if err != nil {
			return nil, fmt.Errorf("txlog: transactions on %s/%d: %w", topic, partition, err)
		}
		pt.Transaction = t
		out = append(out, pt)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("txlog: transactions on %s/%d: %w", topic, partition, err)
	}
	return out, nil
}

// RecentTopics lists the Kafka topics recorded (RecordTopics) within the last period: the
// topics a hanging-transaction scan must look at after a restart of the coordinator. It reads
// coordinator_topics, one row per topic, so its cost does not grow with the log's rows.
func (l *Log) RecentTopics(ctx context.Context, period time.Duration) ([]string, error) {
	rows, err := l.pool.Query(ctx, `SELECT topic FROM coordinator_topics
WHERE seen_at > now() - $1 * interval '1 second' ORDER BY topic`, period.Seconds())
	if err != nil {
		return nil, fmt.Errorf("txlog: recent topics: %w", err)
	}
	topics, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("txlog: recent topics: %w", err)
	}
	return topics, nil
}

// RecordTopics stores topics as written to now (kafkatxn.Config.RecordTopics: before an
// instance first produces to a topic, and then hourly), durably before it returns.
func (l *Log) RecordTopics(ctx context.Context, topics []string) error {
	_, err := l.pool.Exec(ctx, `INSERT INTO coordinator_topics (topic, seen_at)
SELECT DISTINCT t, now() FROM unnest($1::text[]) t
ON CONFLICT (topic) DO UPDATE SET seen_at = EXCLUDED.seen_at`, topics)
	if err != nil {
		return fmt.Errorf("txlog: record topics %v: %w", topics, err)
	}
	return nil
}

// PrunedMark is the highest offset on the partition of a record of a row of the transactional
// id that the retention removed (R3); ok is false when it removed none. Records no row
// explains at or below it may be a removed row's (H2, recovery/hanging.go).
func (l *Log) PrunedMark(ctx context.Context, transactionalID, topic string, partition int32) (maxOffset int64, ok bool, err error) {
	err = l.pool.QueryRow(ctx, `SELECT max_offset FROM coordinator_pruned
WHERE transactional_id = $1 AND topic = $2 AND partition = $3`, transactionalID, topic, partition).Scan(&maxOffset)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("txlog: pruned mark of %s on %s/%d: %w", transactionalID, topic, partition, err)
	}
	return maxOffset, true, nil
}
