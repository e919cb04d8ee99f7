package txlog_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// The results and records a write stored are not sent again by a later write while the
// transaction still has the same ones, and are when it has others (an abort clears its
// results), against PostgreSQL. A result changed in place after the prepared write shows
// which: the row keeps what was sent.
func TestDetailWrittenOnce(t *testing.T) {
	t.Parallel()
	l, pool := newLog(t)
	ctx := context.Background()
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	ids := txntype.KafkaIDs{TransactionalID: "tx-d", ProducerID: 9, ProducerEpoch: 1}
	results := func(n int64) []txntype.SQLResult {
		return []txntype.SQLResult{{Database: "default", RowsAffected: n}, {Database: "default", RowsAffected: n + 1}}
	}
	records := []txntype.RecordOffset{{Topic: "t", Partition: 0, Offset: 5}, {Topic: "t", Partition: 1, Offset: 7}}

	tests := []struct {
		name string
		// after the prepared write (nil: no prepared write, results logged by the final one)
		change      func(tr *txntype.Transaction)
		final       txntype.State
		wantResults []txntype.SQLResult
		wantRecords []txntype.RecordOffset
	}{
		{name: "unchanged: not sent again", final: txntype.StateCommitted,
			change:      func(tr *txntype.Transaction) { tr.SQL[0].RowsAffected = 99 }, // in place: the same slice
			wantResults: results(1), wantRecords: records},
		{name: "results cleared: written", final: txntype.StateAborted,
			change:      func(tr *txntype.Transaction) { tr.SQL = nil },
			wantResults: []txntype.SQLResult{}, wantRecords: records},
		{name: "results replaced: written", final: txntype.StateCommitted,
			change:      func(tr *txntype.Transaction) { tr.SQL = results(40) },
			wantResults: results(40), wantRecords: records},
		{name: "no write before: written", final: txntype.StateCommitted,
			wantResults: results(1), wantRecords: records},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, created, err := l.Begin(ctx, row(fmt.Sprintf("detail-%d", i), epoch))
			require.NoError(t, err)
			require.True(t, created)
			tr.SQL = results(1)
			tr.Kafka = &txntype.KafkaState{KafkaIDs: ids, PreparedState: ids.PreparedState(), Records: records}
			require.False(t, tr.DetailLogged(), "nothing logged yet")
			if tc.change != nil {
				require.NoError(t, l.Prepared(ctx, tr))
				require.True(t, tr.DetailLogged())
				tc.change(tr)
			}
			require.NoError(t, l.Transition(ctx, tr, tc.final))
			assert.True(t, tr.DetailLogged(), "the final write leaves the row holding what tr has, or what was sent")
			got, err := l.Get(ctx, tr.ID)
			require.NoError(t, err)
			assert.Equal(t, tc.final, got.State)
			assert.Equal(t, tc.wantResults, orEmpty(got.SQL))
			require.NotNil(t, got.Kafka)
			assert.Equal(t, tc.wantRecords, got.Kafka.Records)
		})
	}
}

func orEmpty[E any](s []E) []E {
	if s == nil {
		return []E{}
	}
	return s
}

// A batch's results and record offsets, large enough to be compressed, are stored with lz4 where
// the server offers it (migration 12), with pglz where it does not, and read back whole.
func TestDetailCompression(t *testing.T) {
	t.Parallel()
	l, pool := newLog(t)
	ctx := context.Background()
	var lz4 bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_settings
WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals))`).Scan(&lz4))
	want := "pglz"
	if lz4 {
		want = "lz4"
	}
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	tr, created, err := l.Begin(ctx, row("detail-lz4", epoch))
	require.NoError(t, err)
	require.True(t, created)
	ids := txntype.KafkaIDs{TransactionalID: "tx-z", ProducerID: 9, ProducerEpoch: 1}
	var records []txntype.RecordOffset
	var results []txntype.SQLResult
	for i := range 400 {
		records = append(records, txntype.RecordOffset{Topic: "orders", Partition: int32(i % 6), Offset: int64(1000 + i)})
		results = append(results, txntype.SQLResult{Database: "default", RowsAffected: 1})
	}
	tr.SQL = results
	tr.Kafka = &txntype.KafkaState{KafkaIDs: ids, PreparedState: ids.PreparedState(), Records: records}
	require.NoError(t, l.Prepared(ctx, tr))

	var recs, res string
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_column_compression(kafka_records), pg_column_compression(sql_results)
FROM coordinator_transactions WHERE request_id = $1`, tr.ID).Scan(&recs, &res))
	assert.Equal(t, want, recs, "kafka_records")
	assert.Equal(t, want, res, "sql_results")
	got, err := l.Get(ctx, tr.ID)
	require.NoError(t, err)
	assert.Equal(t, results, got.SQL)
	require.NotNil(t, got.Kafka)
	assert.Equal(t, records, got.Kafka.Records)
}
