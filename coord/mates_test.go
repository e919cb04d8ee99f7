package coord_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kpgtx/coordinator/coord"
)

func TestMates(t *testing.T) {
	t.Parallel()
	ids := func(tid string, pid int64, epoch int16) *coord.KafkaState {
		return &coord.KafkaState{KafkaIDs: coord.KafkaIDs{TransactionalID: tid, ProducerID: pid, ProducerEpoch: epoch}}
	}
	row := func(gid string, st coord.State, k *coord.KafkaState) *coord.Transaction {
		return &coord.Transaction{GID: gid, State: st, Kafka: k}
	}
	gids := func(groups [][]*coord.Transaction) [][]string {
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
		rows []*coord.Transaction
		want [][]string
	}{
		{"none", nil, nil},
		{"prepared with one set of ids, in order", []*coord.Transaction{
			row("a", coord.StatePrepared, ids("t-1", 7, 3)),
			row("b", coord.StateActive, nil),
			row("c", coord.StatePrepared, ids("t-1", 7, 3)),
		}, [][]string{{"a", "c"}, {"b"}}},
		{"another epoch is another transaction", []*coord.Transaction{
			row("a", coord.StatePrepared, ids("t-1", 7, 3)),
			row("b", coord.StatePrepared, ids("t-1", 7, 4)),
			row("c", coord.StatePrepared, ids("t-2", 7, 3)),
		}, [][]string{{"a"}, {"b"}, {"c"}}},
		{"only prepared rows are grouped", []*coord.Transaction{
			row("a", coord.StateCommitting, ids("t-1", 7, 3)),
			row("b", coord.StateCommitting, ids("t-1", 7, 3)),
			row("c", coord.StatePrepared, ids("", 0, 0)),
			row("d", coord.StatePrepared, ids("", 0, 0)),
		}, [][]string{{"a"}, {"b"}, {"c"}, {"d"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, gids(coord.Mates(tt.rows)))
		})
	}
}
