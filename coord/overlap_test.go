package coord_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
)

// gatedLog holds every Begin until phase 1's work reached the participants (sql.run and the
// Kafka flush, or just sql.run without records): a coordinator that ran them one after the
// other would never get there, and the Begin reports it.
type gatedLog struct {
	fakeLog
	reached chan struct{}
	serial  chan struct{} // closed when a Begin gave up waiting
}

func (l gatedLog) Begin(ctx context.Context, t *coord.Transaction) (*coord.Transaction, bool, error) {
	select {
	case <-l.reached:
	case <-time.After(2 * time.Second):
		close(l.serial)
	}
	return l.fakeLog.Begin(ctx, t)
}

// A request alone logs its row while its statements run and its records are produced (I5
// needs the row durable before a PREPARE, not before the work): phase 1 reaches every
// participant while Begin is in flight, and still no PREPARE (nor one-phase COMMIT) comes
// before the row (the fake records any in w.rowless).
func TestOverlapRunsWorkBesideBegin(t *testing.T) {
	t.Parallel()
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			want := []string{}
			if len(sh.req.SQL) > 0 {
				want = append(want, "sql.run")
			}
			if len(sh.req.Kafka) > 0 {
				want = append(want, "kafka.flush")
			}
			log := gatedLog{fakeLog: fakeLog{w}, reached: make(chan struct{}), serial: make(chan struct{})}
			seen := map[string]bool{}
			var mu sync.Mutex
			w.at = func(_ int, op string) mode {
				mu.Lock()
				defer mu.Unlock()
				if !seen[op] && slices.Contains(want, op) {
					seen[op] = true
					if len(seen) == len(want) {
						close(log.reached)
					}
				}
				return pass
			}
			var k coord.Kafka
			if len(sh.req.Kafka) > 0 {
				k = fakeKafka{w}
			}
			c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", Logger: slog.New(slog.DiscardHandler),
				Ownership: ownership{coord.Fence{Instance: "a", Epoch: 1}}, OverlapBegin: true}, log, k, fakeSQL{w})
			req := sh.req
			req.ID, req.SQL, req.Kafka = "x", slices.Clone(req.SQL), slices.Clone(req.Kafka)
			answer, err := c.Execute(context.Background(), req)
			require.NoError(t, err)
			if req.Answer == coord.AnswerDecided {
				assert.Equal(t, coord.StateCommitting, answer.State)
			} else {
				assert.Equal(t, coord.StateCommitted, answer.State)
			}
			require.NoError(t, c.WaitFinals(context.Background()))
			select {
			case <-log.serial:
				t.Fatalf("Begin waited in vain for phase 1 to reach %v; calls %v", want, w.ops)
			default:
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, r := range w.rowless {
				assert.False(t, strings.HasPrefix(r, "sql."), "I5: %s before the row; calls %v", r, w.ops)
			}
		})
	}
}

// A Begin that logs no fresh row while phase 1 ran leaves nothing prepared or committed: the
// held PREPARE (or COMMIT) is never sent, the open Kafka transaction is aborted and its id
// goes back to the pool, no gid is rolled back (they are the id's, and the row found may be
// another run's), and Begin's answer is the request's.
func TestOverlapBeginLost(t *testing.T) {
	t.Parallel()
	onePhase := func() coord.Request {
		return coord.Request{ID: "x", SQL: []coord.Statement{stmt("INSERT INTO t VALUES (1)")}}
	}
	for _, tc := range []struct {
		name  string
		req   coord.Request
		again bool // the id's row exists (committed): the same request sent again
		// begin is the fate of the Begin when the row does not exist: unsent (503, safe to
		// retry) or failAfter (the row logged, its answer lost: in doubt, never 503).
		begin mode
	}{
		{"log unavailable, two-phase", twoDBsAndKafka("x"), false, unsent},
		{"log unavailable, one-phase", onePhase(), false, unsent},
		{"begin answer lost, two-phase", twoDBsAndKafka("x"), false, failAfter},
		{"begin answer lost, one-phase", onePhase(), false, failAfter},
		{"row exists, two-phase", twoDBsAndKafka("x"), true, pass},
		{"row exists, one-phase", onePhase(), true, pass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			var k coord.Kafka
			if len(tc.req.Kafka) > 0 {
				k = fakeKafka{w}
			}
			c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", Logger: slog.New(slog.DiscardHandler),
				Ownership: ownership{coord.Fence{Instance: "a", Epoch: 1}}, OverlapBegin: true}, fakeLog{w}, k, fakeSQL{w})
			ctx := context.Background()
			var before map[string]string
			if tc.again {
				first, err := c.Execute(ctx, tc.req)
				require.NoError(t, err)
				require.Equal(t, coord.StateCommitted, first.State)
				require.NoError(t, c.WaitFinals(ctx))
				_, before, _, _ = w.snapshot()
				w.mu.Lock()
				w.releases = map[int64][]bool{}
				w.mu.Unlock()
			} else {
				w.at = func(_ int, op string) mode {
					if op == "log.begin" {
						return tc.begin
					}
					return pass
				}
			}
			w.mu.Lock()
			from := len(w.ops)
			w.mu.Unlock()

			answer, err := c.Execute(ctx, tc.req)
			require.NoError(t, c.WaitFinals(ctx))
			rows, sqlState, _, kafka := w.snapshot()
			w.mu.Lock()
			ops := slices.Clone(w.ops[from:])
			w.mu.Unlock()
			if tc.again {
				require.NoError(t, err, "the stored row answers")
				assert.Equal(t, coord.StateCommitted, answer.State)
				assert.Equal(t, before, sqlState, "the first run's gids untouched")
			} else if tc.begin == unsent {
				require.ErrorIs(t, err, coord.ErrUnavailable)
				assert.Empty(t, rows)
				assert.Empty(t, sqlState, "nothing prepared or committed")
			} else {
				// The row may exist (here it does): not "safe to retry", whose retry would
				// find the row and answer it, but in doubt until recovery resolves the row.
				require.ErrorIs(t, err, coord.ErrInDoubt)
				assert.NotErrorIs(t, err, coord.ErrUnavailable)
				var oe *coord.OutcomeError
				require.ErrorAs(t, err, &oe)
				require.NotNil(t, oe.Txn, "a 202 carries the transaction")
				assert.Equal(t, coord.StateActive, oe.Txn.State)
				require.Contains(t, rows, "p_x")
				assert.Equal(t, coord.StateActive, rows["p_x"].State, "left to recovery (presumed abort)")
				assert.Empty(t, sqlState, "nothing prepared or committed")
			}
			assert.Contains(t, ops, "sql.run", "the statements ran beside the Begin")
			for _, op := range ops {
				assert.NotContains(t, []string{"sql.rollback_prepared", "sql.commit_prepared", "sql.settle"}, op,
					"no gid of the id is touched; calls %v", ops)
			}
			if k != nil {
				pid := w.nextPID
				assert.Equal(t, "aborted", kafka[pid], "the open Kafka transaction is aborted")
				assertReleases(t, w, []bool{true}, "its id goes back to the pool")
			}
		})
	}
}

// lateLog logs every Begin only after the request's budget ended (its context is done), as a
// log write that took longer than the budget and still landed.
type lateLog struct{ fakeLog }

func (l lateLog) Begin(ctx context.Context, t *coord.Transaction) (*coord.Transaction, bool, error) {
	<-ctx.Done()
	time.Sleep(20 * time.Millisecond) // well after the held PREPARE saw the budget end
	return l.fakeLog.Begin(context.WithoutCancel(ctx), t)
}

// A request whose time budget ends while its PREPARE (or one-phase COMMIT) waits for its row
// (I14) has nothing prepared: it aborts as a request whose budget ended anywhere else in phase
// 1, class abortable, never internal (the coordinator's own fault).
func TestOverlapBudgetEndsWhileHeld(t *testing.T) {
	t.Parallel()
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			var k coord.Kafka
			if len(sh.req.Kafka) > 0 {
				k = fakeKafka{w}
			}
			c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", Logger: slog.New(slog.DiscardHandler),
				DefaultTimeout: 100 * time.Millisecond, FinishTimeout: time.Second,
				Ownership: ownership{coord.Fence{Instance: "a", Epoch: 1}}, OverlapBegin: true},
				lateLog{fakeLog{w}}, k, fakeSQL{w})
			req := cloneReq(sh.req)
			req.ID = "x"
			if len(req.SQL) == 0 {
				return // nothing is held without SQL
			}
			_, err := c.Execute(context.Background(), req)
			require.NoError(t, c.WaitFinals(context.Background()))
			require.ErrorIs(t, err, coord.ErrAborted)
			var oe *coord.OutcomeError
			require.ErrorAs(t, err, &oe)
			require.NotNil(t, oe.Txn)
			require.NotNil(t, oe.Txn.Error)
			assert.Equal(t, coord.ClassAbortable, oe.Txn.Error.Class, "%s", oe.Txn.Error.Message)
			rows, sqlState, _, _ := w.snapshot()
			require.Contains(t, rows, "p_x")
			assert.Equal(t, coord.StateAborted, rows["p_x"].State)
			assert.Equal(t, coord.ClassAbortable, rows["p_x"].Error.Class)
			for g, st := range sqlState {
				assert.NotEqual(t, "prepared", st, "%s prepared", g)
				assert.NotEqual(t, "committed", st, "%s committed", g)
			}
		})
	}
}
