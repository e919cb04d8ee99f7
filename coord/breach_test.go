package coord_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// breachSQL is a participant whose client statement left the transaction (sqltxn's guard
// fired): the statements before it may be committed on that database.
type breachSQL struct{ fakeSQL }

func (s breachSQL) Run(context.Context, string, []txntype.Statement, string, bool, func()) ([]txntype.SQLResult, error) {
	return nil, &txntype.Failure{Participant: "sql:default", Class: txntype.ClassInternal,
		Err: fmt.Errorf("%w: statement 0 (command tag \"COMMIT\")", txntype.ErrConfinementBreach)}
}

type breachCounter struct{ n atomic.Int64 }

func (b *breachCounter) ObservePhase(coord.Phase, time.Duration)     {}
func (b *breachCounter) ObserveOutcome(txntype.State, txntype.Class) {}
func (b *breachCounter) ObserveConfinementBreach()                   { b.n.Add(1) }
func (b *breachCounter) ObserveKafkaBatch(int)                       {}
func (*breachCounter) ObserveSQLShared(int)                          {}

// A confinement breach is never reported as an abort: the request ends heuristic with the
// evidence (202), Kafka is aborted, and the alert is raised once.
func TestConfinementBreachIsHeuristic(t *testing.T) {
	t.Parallel()
	for _, tc := range shapes {
		if len(tc.req.SQL) == 0 {
			continue // no SQL participant, no client statement
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			obs := &breachCounter{}
			var k txntype.Kafka
			if len(tc.req.Kafka) > 0 {
				k = fakeKafka{w}
			}
			c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", Logger: slog.New(slog.DiscardHandler), Observer: obs,
				Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}}}, fakeLog{w}, k, breachSQL{fakeSQL{w}})
			req := tc.req
			req.ID = "x"
			txn, err := c.Execute(context.Background(), req)
			require.ErrorIs(t, err, txntype.ErrInDoubt, "not 409: what the statement did may be committed")
			require.NotNil(t, txn)
			assert.Equal(t, txntype.StateHeuristic, txn.State)
			require.NotNil(t, txn.Error)
			assert.Contains(t, txn.Error.Message, "COMMIT", "the evidence is kept")
			assert.EqualValues(t, 1, obs.n.Load())
			rows, _, _, kafka := w.snapshot()
			assert.Equal(t, txntype.StateHeuristic, rows["p_x"].State)
			for pid, st := range kafka {
				assert.NotEqual(t, "committed", st, "kafka transaction %d", pid)
			}
		})
	}
}
