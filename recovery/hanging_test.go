package recovery

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/txlog"
)

// TestHangingDecision: the marker written to a hanging transaction follows the log's decision for
// every record it holds, and none is written while that decision is pending or not one.
func TestHangingDecision(t *testing.T) {
	t.Parallel()
	h := kafkatxn.Hanging{TransactionalID: "p-a-0", ProducerID: 7, Topic: "orders", Partition: 1, StartOffset: 100}
	txn := func(id string, st coord.State, first int64) txlog.PartitionTxn {
		return txlog.PartitionTxn{Transaction: &coord.Transaction{ID: id, State: st}, FirstOffset: first}
	}
	tests := []struct {
		name   string
		txns   []txlog.PartitionTxn
		commit bool
		status string
	}{
		{"committed", []txlog.PartitionTxn{txn("a", coord.StateCommitted, 100)}, true, ""},
		{"aborted", []txlog.PartitionTxn{txn("a", coord.StateAborted, 100)}, false, ""},
		{"never prepared", nil, false, ""},
		{"never prepared, then an aborted one", []txlog.PartitionTxn{txn("b", coord.StateAborted, 104)}, false, ""},
		{"never prepared, then a committed one", []txlog.PartitionTxn{txn("b", coord.StateCommitted, 104)}, false, kafkatxn.HangingCannotRepair},
		{"two committed", []txlog.PartitionTxn{txn("a", coord.StateCommitted, 100), txn("b", coord.StateCommitted, 104)}, true, ""},
		{"committed and aborted", []txlog.PartitionTxn{txn("a", coord.StateCommitted, 100), txn("b", coord.StateAborted, 104)}, false, kafkatxn.HangingCannotRepair},
		{"prepared: recovery decides first", []txlog.PartitionTxn{txn("a", coord.StatePrepared, 100)}, false, kafkatxn.HangingWaiting},
		{"committing", []txlog.PartitionTxn{txn("a", coord.StateCommitting, 100)}, false, kafkatxn.HangingWaiting},
		{"heuristic", []txlog.PartitionTxn{txn("a", coord.StateHeuristic, 100)}, false, kafkatxn.HangingCannotRepair},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			commit, status, note := hangingDecision(h, tt.txns)
			assert.Equal(t, tt.status, status, note)
			if tt.status == "" {
				assert.Equal(t, tt.commit, commit)
				assert.Empty(t, note)
			} else {
				assert.Contains(t, note, "orders/1 from offset 100")
			}
		})
	}
}
