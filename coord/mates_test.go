package coord_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

func TestMates(t *testing.T) {
	t.Parallel()
	ids := func(tid string, pid int64, epoch int16) *txntype.KafkaState {
		return &txntype.KafkaState{KafkaIDs: txntype.KafkaIDs{TransactionalID: tid, ProducerID: pid, ProducerEpoch: epoch}}
	}
	row := func(gid string, st txntype.State, k *txntype.KafkaState) *txntype.Transaction {
		return &txntype.Transaction{GID: gid, State: st, Kafka: k}
	}
	gids := func(groups [][]*txntype.Transaction) [][]string {
		var out [][]string
		for _, g := range groups {
			var names []string
			for _, t := range g {
				names = append(names, t.GID)
			}
			out = append(out, names)
		}
		return out
	}
	tests := []struct {
		name string
		rows []*txntype.Transaction
		want [][]string
	}{
		{"none", nil, nil},
		{"prepared with one set of ids, in order", []*txntype.Transaction{
			row("a", txntype.StatePrepared, ids("t-1", 7, 3)),
			row("b", txntype.StateActive, nil),
			row("c", txntype.StatePrepared, ids("t-1", 7, 3)),
		}, [][]string{{"a", "c"}, {"b"}}},
		{"another epoch is another transaction", []*txntype.Transaction{
			row("a", txntype.StatePrepared, ids("t-1", 7, 3)),
			row("b", txntype.StatePrepared, ids("t-1", 7, 4)),
			row("c", txntype.StatePrepared, ids("t-2", 7, 3)),
		}, [][]string{{"a"}, {"b"}, {"c"}}},
		{"only prepared rows are grouped", []*txntype.Transaction{
			row("a", txntype.StateCommitting, ids("t-1", 7, 3)),
			row("b", txntype.StateCommitting, ids("t-1", 7, 3)),
			row("c", txntype.StatePrepared, ids("", 0, 0)),
			row("d", txntype.StatePrepared, ids("", 0, 0)),
		}, [][]string{{"a"}, {"b"}, {"c"}, {"d"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, gids(coord.Mates(tt.rows)))
		})
	}
}
