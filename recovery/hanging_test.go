package recovery

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// TestHangingDecision: the marker written to a hanging transaction follows the log's decision for
// every record it holds, and none is written while that decision is pending or not one.
func TestHangingDecision(t *testing.T) {
	t.Parallel()
	h := kafkatxn.Hanging{TransactionalID: "p-a-0", ProducerID: 7, Topic: "orders", Partition: 1, StartOffset: 100}
	txn := func(id string, st txntype.State, first int64) txlog.PartitionTxn {
		return txlog.PartitionTxn{Transaction: &txntype.Transaction{ID: id, State: st}, FirstOffset: first}
	}
	tests := []struct {
		name   string
		txns   []txlog.PartitionTxn
		commit bool
		status string
		// pruned: the retention's mark on the partition (R3); -1: none.
		pruned int64
	}{
		{"committed", []txlog.PartitionTxn{txn("a", txntype.StateCommitted, 100)}, true, "", -1},
		{"aborted", []txlog.PartitionTxn{txn("a", txntype.StateAborted, 100)}, false, "", -1},
		{"never prepared", nil, false, "", -1},
		{"never prepared, then an aborted one", []txlog.PartitionTxn{txn("b", txntype.StateAborted, 104)}, false, "", -1},
		{"never prepared, then a committed one", []txlog.PartitionTxn{txn("b", txntype.StateCommitted, 104)}, false, kafkatxn.HangingCannotRepair, -1},
		{"two committed", []txlog.PartitionTxn{txn("a", txntype.StateCommitted, 100), txn("b", txntype.StateCommitted, 104)}, true, "", -1},
		{"committed and aborted", []txlog.PartitionTxn{txn("a", txntype.StateCommitted, 100), txn("b", txntype.StateAborted, 104)}, false, kafkatxn.HangingCannotRepair, -1},
		{"prepared: recovery decides first", []txlog.PartitionTxn{txn("a", txntype.StatePrepared, 100)}, false, kafkatxn.HangingWaiting, -1},
		{"committing", []txlog.PartitionTxn{txn("a", txntype.StateCommitting, 100)}, false, kafkatxn.HangingWaiting, -1},
		{"heuristic", []txlog.PartitionTxn{txn("a", txntype.StateHeuristic, 100)}, false, kafkatxn.HangingCannotRepair, -1},
		// H2: records no row explains are "never logged prepared" only above the retention's mark.
		{"none logged, rows removed up to the start", nil, false, kafkatxn.HangingCannotRepair, 100},
		{"none logged, rows removed past the start", nil, false, kafkatxn.HangingCannotRepair, 250},
		{"none logged, rows removed below the start", nil, false, "", 99},
		{"removed up to the start, then a committed one", []txlog.PartitionTxn{txn("b", txntype.StateCommitted, 104)}, false, kafkatxn.HangingCannotRepair, 100},
		{"explained: the mark does not matter", []txlog.PartitionTxn{txn("a", txntype.StateCommitted, 100)}, true, "", 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := HangingEvidence{Txns: tt.txns, Pruned: tt.pruned >= 0, PrunedTo: tt.pruned}
			commit, status, note := hangingDecision(h, ev)
			assert.Equal(t, tt.status, status, note)
			if tt.status == "" {
				assert.Equal(t, tt.commit, commit)
				assert.Empty(t, note)
			} else {
				assert.Contains(t, note, "orders/1 from offset 100")
			}
			if tt.pruned >= 100 && len(tt.txns) == 0 {
				assert.Contains(t, note, fmt.Sprintf("up to offset %d", tt.pruned), "the note says what is known")
			}
		})
	}
}
