package coord_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// D1: a request that asks to be answered at its decision gets its 200 (state committing) while
// its phase 2 is still held; a read of its id on this instance waits for the final write and
// reads committed; a phase 2 that fails leaves the row to recovery, which commits it: the
// answer never turns into another outcome. A one-phase request is answered committed.
func TestDecidedAnswer(t *testing.T) {
	t.Parallel()
	oneDB := txntype.Request{ID: "x", SQL: []txntype.Statement{stmt("INSERT INTO t VALUES (1)")}}
	twoDBs := txntype.Request{ID: "x", SQL: []txntype.Statement{stmt("INSERT INTO t VALUES (1)"),
		{Database: "orders", Statement: "INSERT INTO t VALUES (1)"}}}
	for _, tc := range []struct {
		name      string
		req       txntype.Request
		failPh2   bool
		wantState txntype.State // the answer's
	}{
		{"sql and kafka", twoDBsAndKafka("x"), false, txntype.StateCommitting},
		{"sql and kafka, phase 2 fails", twoDBsAndKafka("x"), true, txntype.StateCommitting},
		{"two databases", twoDBs, false, txntype.StateCommitting},
		{"two databases, phase 2 fails", twoDBs, true, txntype.StateCommitting},
		{"one phase", oneDB, false, txntype.StateCommitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			release := make(chan struct{})
			w.at = func(_ int, op string) mode {
				if op != "sql.commit_prepared" {
					return pass
				}
				<-release // phase 2 waits until the answer was given
				if tc.failPh2 {
					return failBefore
				}
				return pass
			}
			var k txntype.Kafka
			if len(tc.req.Kafka) > 0 {
				k = fakeKafka{w}
			}
			log := fakeLog{w}
			c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", FinishTimeout: time.Second,
				Logger: slog.New(slog.DiscardHandler), Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}}},
				log, k, fakeSQL{w})
			req := tc.req
			// Its own statements: Validate fills in their default database, and the subtests
			// run in parallel.
			req.SQL = slices.Clone(tc.req.SQL)
			req.Answer = txntype.AnswerDecided
			ctx := context.Background()

			answer, err := c.Execute(ctx, req)
			require.NoError(t, err, "answered 200 while phase 2 is held")
			assert.Equal(t, tc.wantState, answer.State)
			if tc.wantState == txntype.StateCommitting {
				_, sqlState, _, kafka := w.snapshot()
				for _, g := range answer.SQLGIDs {
					assert.Equal(t, "prepared", sqlState[g.GID], "phase 2 has not run yet")
				}
				if k != nil {
					assert.Equal(t, "committed", kafka[w.nextPID], "Kafka committed: the decision")
				}
				assert.True(t, c.InFlight("p_x"), "in flight until its final write ended")
				got := make(chan *txntype.Transaction, 1)
				go func() {
					row, err := c.Get(ctx, "x")
					assert.NoError(t, err)
					got <- row
				}()
				select {
				case row := <-got:
					t.Fatalf("Get answered %s before phase 2 ended", row.State)
				case <-time.After(30 * time.Millisecond):
				}
				close(release)
				row := <-got
				if !tc.failPh2 {
					assert.Equal(t, txntype.StateCommitted, row.State, "this instance reads the final state")
				} else {
					assert.Contains(t, []txntype.State{txntype.StateCommitting, txntype.StatePrepared}, row.State,
						"a failed phase 2 leaves the row in doubt, never aborted")
				}
			} else {
				close(release)
			}
			require.NoError(t, c.WaitFinals(ctx))

			// Recovery, without faults: the row ends committed on every side.
			w.at = nil
			rules := coord.Rules{Log: log, SQL: fakeSQL{w}, Kafka: fakeKafka{w}}
			for range 3 {
				row, err := log.Get(ctx, "x")
				require.NoError(t, err)
				if row.State.Final() {
					break
				}
				_, _ = rules.Resolve(ctx, row, txntype.Fence{Instance: "r", Epoch: 1}, nil)
			}
			check(t, w, req, nil)
			rows, _, _, _ := w.snapshot()
			assert.Equal(t, txntype.StateCommitted, rows["p_x"].State)
		})
	}
}
