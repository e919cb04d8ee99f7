package coord_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// The protocol's rules against fake participants and a fake log (fake_test.go): every call of
// a request fails in turn (before or after its effect), or a resolver claims and resolves the
// row right before it; then recovery runs to the end. Whatever happened, both sides agree, the
// answer agrees with the outcome, and nothing is left prepared.

var shapes = []struct {
	name string
	req  txntype.Request
}{
	{"sql and kafka", txntype.Request{SQL: []txntype.Statement{stmt("INSERT INTO t VALUES (1)")}, Kafka: []txntype.Record{rec("t")}}},
	{"one phase", txntype.Request{SQL: []txntype.Statement{stmt("INSERT INTO t VALUES (1)")}}},
	{"two databases", txntype.Request{SQL: []txntype.Statement{stmt("INSERT INTO t VALUES (1)"), {Database: "orders", Statement: "INSERT INTO t VALUES (1)"}}}},
	{"kafka only", txntype.Request{Kafka: []txntype.Record{rec("t")}}},
	// D1: answered at the decision, phase 2 behind the answer.
	{"sql and kafka, decided", txntype.Request{SQL: []txntype.Statement{stmt("INSERT INTO t VALUES (1)")}, Kafka: []txntype.Record{rec("t")}, Answer: txntype.AnswerDecided}},
	{"two databases, decided", txntype.Request{SQL: []txntype.Statement{stmt("INSERT INTO t VALUES (1)"), {Database: "orders", Statement: "INSERT INTO t VALUES (1)"}}, Answer: txntype.AnswerDecided}},
}

// trial runs one request in a fresh world with at deciding each call's fate, then recovery
// (as instance r) until the row is final, and checks the outcome.
func trial(t *testing.T, req txntype.Request, at func(n int, op string) mode) (answer error, w *world) {
	t.Helper()
	return trialWith(t, req, -1, at)
}

// trialWith is trial with the resolver's pause point (raceInterleave).
func trialWith(t *testing.T, req txntype.Request, pauseAt int, at func(n int, op string) mode) (answer error, w *world) {
	t.Helper()
	return trialFull(t, req, pauseAt, false, at)
}

// trialFull is trialWith; page: the resolver takes a prepared row by the page (C1).
func trialFull(t *testing.T, req txntype.Request, pauseAt int, page bool, at func(n int, op string) mode) (answer error, w *world) {
	t.Helper()
	w = newWorld()
	w.pauseAt, w.page = pauseAt, page
	// Validate fills in defaults: each trial gets its own copy of the shared shapes.
	req.SQL, req.Kafka = slices.Clone(req.SQL), slices.Clone(req.Kafka)
	log, sql, kafka := fakeLog{w}, fakeSQL{w}, fakeKafka{w}
	var k txntype.Kafka
	if len(req.Kafka) > 0 {
		k = kafka
	}
	c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", DefaultTimeout: 30 * time.Millisecond,
		FinishTimeout: 100 * time.Millisecond, Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}},
		Logger: slog.New(slog.DiscardHandler)}, log, k, sql)
	rules := coord.Rules{Log: log, SQL: sql, Kafka: kafka}
	ctx := context.Background()
	resolveIn := func(ctx context.Context) error {
		row, err := log.Get(ctx, "x")
		if err != nil || row.State.Final() {
			return nil
		}
		by := txntype.Fence{Instance: "r", Epoch: 1}
		if w.page && row.State == txntype.StatePrepared {
			return rules.ResolvePage(ctx, []*txntype.Transaction{row}, by, 2)[0].Err // C1
		}
		_, err = rules.Resolve(ctx, row, by, nil)
		return err
	}
	resolve := func() error { return resolveIn(ctx) }
	w.resolve = func() { _ = resolveIn(context.WithValue(ctx, resolverKey{}, true)) }
	w.at = at
	req.ID = "x"
	_, answer = c.Execute(ctx, req)
	require.NoError(t, c.WaitFinals(context.Background()), "a committed answer's final write ends")
	w.finishResolver()

	// Recovery, with no more faults.
	w.at = nil
	for i := 0; i < 5; i++ {
		if err := resolve(); err == nil || errors.Is(err, txntype.ErrMovedOn) {
			continue
		}
	}
	check(t, w, req, answer)
	return answer, w
}

// check: the row is final and both sides follow it; the answer agrees; nothing is prepared
// (after the orphan sweep's rule: a leftover gid of a final row follows the row).
func check(t *testing.T, w *world, req txntype.Request, answer error) {
	t.Helper()
	rows, sqlState, _, kafka := w.snapshot()
	row := rows["p_x"]
	if row == nil {
		require.Error(t, answer, "no row, yet the answer was a commit")
		for g, st := range sqlState {
			assert.NotEqual(t, "committed", st, "no row, yet %s committed", g)
		}
		for pid, st := range kafka {
			assert.NotEqual(t, "committed", st, "no row, yet Kafka transaction %d committed", pid)
		}
		return
	}
	require.True(t, row.State.Final(), "recovery left the row %s; calls %v", row.State, w.ops)
	require.Contains(t, []txntype.State{txntype.StateCommitted, txntype.StateAborted}, row.State, "calls %v", w.ops)
	committed := row.State == txntype.StateCommitted
	for _, g := range row.SQLGIDs {
		st := sqlState[g.GID]
		if st == "prepared" { // the orphan sweep's rule for a final row
			if committed {
				require.NoError(t, fakeSQL{w}.CommitPrepared(context.Background(), g.Database, g.GID))
			} else {
				require.NoError(t, fakeSQL{w}.RollbackPrepared(context.Background(), g.Database, g.GID))
			}
			_, sqlState, _, _ = w.snapshot()
			st = sqlState[g.GID]
		}
		assert.Equal(t, committed, st == "committed", "%s: sql gid %s is %q; calls %v", row.State, g.GID, st, w.ops)
	}
	if len(req.Kafka) > 0 {
		kafkaCommitted := false
		for _, st := range kafka {
			kafkaCommitted = kafkaCommitted || st == "committed"
		}
		assert.Equal(t, committed, kafkaCommitted, "%s: kafka %v; calls %v", row.State, kafka, w.ops)
	}
	switch {
	case answer == nil:
		assert.True(t, committed, "answered committed, ended %s; calls %v", row.State, w.ops)
	case errors.Is(answer, txntype.ErrUnavailable):
		// "Safe to retry with the same id": the retry must run the request again, so the row
		// must be one the log's Begin runs again (aborted, retriable), never one that answers
		// the retry 409 (txlog.Begin re-runs only rows logged retriable).
		assert.False(t, committed, "answered %v, ended committed; calls %v", answer, w.ops)
		if assert.Equal(t, txntype.StateAborted, row.State, "answered %v; calls %v", answer, w.ops) &&
			assert.NotNil(t, row.Error, "calls %v", w.ops) {
			assert.Equal(t, txntype.ClassRetriable, row.Error.Class,
				"answered %v (safe to retry), yet the row a retry finds is %s %s: it answers 409; calls %v",
				answer, row.State, row.Error.Class, w.ops)
		}
	case errors.Is(answer, txntype.ErrAborted):
		assert.False(t, committed, "answered %v, ended committed; calls %v", answer, w.ops)
	default:
		assert.ErrorIs(t, answer, txntype.ErrInDoubt)
	}
}

// calls counts the calls of a run without faults.
func calls(t *testing.T, req txntype.Request) int {
	t.Helper()
	answer, w := trial(t, req, nil)
	require.NoError(t, answer)
	return w.calls
}

func TestRulesFailAtEveryCall(t *testing.T) {
	t.Parallel()
	for _, sh := range shapes {
		n := calls(t, sh.req)
		for k := range n {
			for _, m := range []mode{failBefore, failAfter, refused, unsent} {
				t.Run(fmt.Sprintf("%s/call %d/mode %d", sh.name, k, m), func(t *testing.T) {
					trialWith(t, sh.req, -1, func(i int, _ string) mode {
						if i == k {
							return m
						}
						return pass
					})
				})
			}
		}
	}
}

func TestRulesClaimRacesLiveWriter(t *testing.T) {
	t.Parallel()
	for _, page := range []bool{false, true} { // a prepared row resolved alone, or by the page (C1)
		for _, sh := range shapes {
			n := calls(t, sh.req)
			for k := range n {
				t.Run(fmt.Sprintf("page %t/%s/claim before call %d", page, sh.name, k), func(t *testing.T) {
					trialFull(t, sh.req, -1, page, func(i int, _ string) mode {
						if i == k {
							return raceResolve
						}
						return pass
					})
				})
			}
		}
	}
}

// A resolver starts before each call of the request and stops before each of its own calls;
// the request runs to its end meanwhile, then the resolver goes on. This is the interleaving
// where acting before claiming breaks atomicity (a rollback, then the live writer's prepared and
// commit, then the claim).
func TestRulesResolverInterleaved(t *testing.T) {
	t.Parallel()
	for _, page := range []bool{false, true} { // a prepared row resolved alone, or by the page (C1)
		for _, sh := range shapes {
			n := calls(t, sh.req)
			for k := range n {
				for j := range 6 {
					t.Run(fmt.Sprintf("page %t/%s/resolver from call %d paused at its call %d", page, sh.name, k, j), func(t *testing.T) {
						trialFull(t, sh.req, j, page, func(i int, _ string) mode {
							if i == k {
								return raceInterleave
							}
							return pass
						})
					})
				}
			}
		}
	}
}

// A claim with a lost answer, then the live writer: the writer's writes fail and the row ends
// by the rules, never twice.
func TestRulesClaimLostThenRace(t *testing.T) {
	t.Parallel()
	for _, page := range []bool{false, true} { // a prepared row resolved alone, or by the page (C1)
		for _, sh := range shapes {
			n := calls(t, sh.req)
			for k := range n {
				t.Run(fmt.Sprintf("page %t/%s/claim before call %d, its first write lost", page, sh.name, k), func(t *testing.T) {
					var mu sync.Mutex // the SQL and Kafka sides call concurrently
					raced := false
					trialFull(t, sh.req, -1, page, func(i int, op string) mode {
						mu.Lock()
						defer mu.Unlock()
						switch {
						case i == k:
							raced = true
							return raceResolve
						case raced && op == "log.claim":
							raced = false
							return failAfter
						}
						return pass
					})
				})
			}
		}
	}
}

// The request path refuses to start while the instance cannot confirm its lock.
func TestNotOwnerRefused(t *testing.T) {
	t.Parallel()
	w := newWorld()
	c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", Logger: slog.New(slog.DiscardHandler),
		Ownership: lostOwnership{}}, fakeLog{w}, nil, fakeSQL{w})
	_, err := c.Execute(context.Background(), txntype.Request{ID: "x", SQL: []txntype.Statement{stmt("INSERT INTO t VALUES (1)")}})
	require.ErrorIs(t, err, txntype.ErrUnavailable)
	require.ErrorIs(t, err, txntype.ErrNotOwner)
	assert.Zero(t, w.calls, "nothing was logged or run")
}

// A writer whose epoch moved on (its lock was taken over) writes nothing: Begin is refused.
func TestStaleEpochFenced(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.epochs["a"] = 2 // a takeover bumped it
	c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", Logger: slog.New(slog.DiscardHandler),
		Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}}}, fakeLog{w}, nil, fakeSQL{w})
	_, err := c.Execute(context.Background(), txntype.Request{ID: "x", SQL: []txntype.Statement{stmt("INSERT INTO t VALUES (1)")}})
	require.ErrorIs(t, err, txntype.ErrUnavailable)
	rows, sqlState, _, _ := w.snapshot()
	assert.Empty(t, rows)
	assert.Empty(t, sqlState)
}

type lostOwnership struct{}

func (lostOwnership) Fence() (txntype.Fence, error) {
	return txntype.Fence{}, fmt.Errorf("%w: test", txntype.ErrNotOwner)
}

// The log's server refuses the decision write (prepared, or committing without Kafka): the
// request is aborted on the spot, answered "safe to retry" (503), and recovery finds nothing to
// do; a lost answer to the same write (failAfter) stays in doubt instead.
func TestRulesDecisionWriteRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		shape, op string
	}{{"sql and kafka", "log.prepared"}, {"kafka only", "log.prepared"}, {"two databases", "log.committing"}} {
		t.Run(c.shape, func(t *testing.T) {
			t.Parallel()
			var req txntype.Request
			for _, sh := range shapes {
				if sh.name == c.shape {
					req = sh.req
				}
			}
			at := func(_ int, op string) mode {
				if op == c.op {
					return refused
				}
				return pass
			}
			answer, w := trial(t, req, at)
			assert.ErrorIs(t, answer, txntype.ErrUnavailable, "calls %v", w.ops)
			rows, _, _, _ := w.snapshot()
			require.NotNil(t, rows["p_x"])
			assert.Equal(t, txntype.StateAborted, rows["p_x"].State)
			assert.Equal(t, txntype.ClassRetriable, rows["p_x"].Error.Class)
			assert.NotContains(t, w.ops, "kafka.commit", "no EndTxn(commit) after a refused decision write")
			assert.NotContains(t, w.ops, "r:log.claim", "recovery had nothing to claim")
		})
	}
}
