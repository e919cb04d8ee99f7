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
