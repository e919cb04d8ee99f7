package coord_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// Shared Kafka transactions against the fake world: three requests gather into one batch, a
// fault hits one step of the batch (or one member), recovery runs to the end, and then for
// every request: its row is final, its SQL side and its records follow the row, and its answer
// agrees (200 ⇒ committed, 409 ⇒ neither side committed).

const members = 3

type batchRun struct {
	w       *world
	c       *coord.Coordinator
	answers map[string]error
}

// nth fails the k-th call (0-based) of op with m; every other call passes.
func nth(op string, k int, m mode) func(*world) func(int, string) mode {
	var mu sync.Mutex
	seen := 0
	return func(*world) func(int, string) mode {
		return func(_ int, o string) mode {
			if o != op {
				return pass
			}
			mu.Lock()
			defer mu.Unlock()
			seen++
			if seen-1 == k {
				return m
			}
			return pass
		}
	}
}

// runBatch runs members requests through one shared Kafka transaction: the batch slots are
// held until all have joined. failSQL names requests whose statements the database refuses.
func runBatch(t *testing.T, faults func(*world) func(int, string) mode, failSQL ...string) *batchRun {
	t.Helper()
	return runBatchWith(t, false, faults, failSQL...)
}

// runBatchWith is runBatch; shareSQL: the members share one SQL transaction too (their SQL
// runs after they joined, so the ones whose SQL fails join as well).
func runBatchWith(t *testing.T, shareSQL bool, faults func(*world) func(int, string) mode, failSQL ...string) *batchRun {
	t.Helper()
	return runBatchAnswer(t, shareSQL, txntype.AnswerCommitted, faults, failSQL...)
}

// runBatchAnswer is runBatchWith with every request asking to be answered as answer says.
func runBatchAnswer(t *testing.T, shareSQL bool, answer txntype.AnswerMode, faults func(*world) func(int, string) mode, failSQL ...string) *batchRun {
	t.Helper()
	r := runBatchOnly(t, shareSQL, answer, faults, failSQL...)
	r.recover(nil)
	return r
}

// runBatchOnly is runBatchAnswer without the recovery after the requests.
func runBatchOnly(t *testing.T, shareSQL bool, answer txntype.AnswerMode, faults func(*world) func(int, string) mode, failSQL ...string) *batchRun {
	t.Helper()
	r, _, wait := startBatch(t, shareSQL, answer, faults, failSQL...)
	wait()
	require.NoError(t, r.c.WaitFinals(context.Background()), "the committed answers' final writes end")
	return r
}

// startBatch starts runBatchOnly's requests and lets their batch run: answered gets each
// request's id as its Execute returns, and wait waits for all of them.
func startBatch(t *testing.T, shareSQL bool, answer txntype.AnswerMode, faults func(*world) func(int, string) mode,
	failSQL ...string) (r *batchRun, answered <-chan string, wait func()) {
	t.Helper()
	w := newWorld()
	w.pauseAt = -1 // a resolver run inside a call runs to its end
	for _, id := range failSQL {
		w.failSQL["p_"+id+"@"+txntype.DefaultDatabase] = true
	}
	log, sql, kafka := fakeLog{w}, fakeSQL{w}, fakeKafka{w}
	if faults != nil {
		w.at = faults(w) // before New: it may ask for deferred rows (deferring)
	}
	c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", DefaultTimeout: 500 * time.Millisecond,
		FinishTimeout: time.Second, Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}},
		Logger: slog.New(slog.DiscardHandler), Batch: coord.BatchConfig{MaxMembers: 8, Concurrency: 1,
			ShareSQL: shareSQL || w.deferRows, DeferRows: w.deferRows}}, log, kafka, sql)
	c.ShareAlways()
	release := c.HoldBatchSlots()
	r = &batchRun{w: w, c: c, answers: map[string]error{}}
	done := make(chan string, members)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range members {
		id := fmt.Sprintf("r%d", i)
		wg.Go(func() {
			req := batchRequest(id)
			if w.otherDB[id] {
				req.SQL[0].Database = "other"
			}
			req.Answer = answer
			_, err := c.Execute(context.Background(), req)
			mu.Lock()
			r.answers[id] = err
			mu.Unlock()
			done <- id
		})
		if w.deferRows {
			// In order: r0 leads, and logs its row; the others join with none (S8).
			require.Eventually(t, func() bool { return c.OpenBatchMembers() == i+1 }, 5*time.Second, time.Millisecond)
		}
	}
	joined := members - len(failSQL)
	if shareSQL || w.deferRows {
		joined = members
	}
	require.Eventually(t, func() bool { return c.OpenBatchMembers() == joined }, 5*time.Second, time.Millisecond,
		"the prepared requests gather in the open batch")
	release()
	return r, done, wg.Wait
}

// recover is recovery (as instance r) until every row is final: each round resolves the
// prepared rows by the page (C1) and the others alone. faults, when set, decide the calls of
// the first round; the rounds after it run without faults.
func (r *batchRun) recover(faults func(*world) func(int, string) mode) {
	ctx := context.Background()
	log := fakeLog{r.w}
	rules := coord.Rules{Log: log, SQL: fakeSQL{r.w}, Kafka: fakeKafka{r.w}}
	by := txntype.Fence{Instance: "r", Epoch: 1}
	r.w.at = nil
	if faults != nil {
		r.w.at = faults(r.w)
	}
	for range 5 {
		var page []*txntype.Transaction
		for i := range members {
			row, err := log.Get(ctx, fmt.Sprintf("r%d", i))
			switch {
			case err != nil || row.State.Final():
			case row.State == txntype.StatePrepared:
				page = append(page, row)
			default:
				_, _ = rules.Resolve(ctx, row, by, nil)
			}
		}
		rules.ResolvePage(ctx, page, by, 2)
		r.w.at = nil
	}
}

func batchRequest(id string) txntype.Request {
	return txntype.Request{ID: id, SQL: []txntype.Statement{stmt("INSERT INTO t VALUES ($1)", id)},
		Kafka: []txntype.Record{{Topic: "t", Value: txntype.Text(id)}}}
}

// check asserts atomicity and truthful answers for every request, and returns the states.
func (r *batchRun) check(t *testing.T) map[string]txntype.State {
	t.Helper()
	rows, sqlState, _, kafka := r.w.snapshot()
	r.w.mu.Lock()
	recs := maps.Clone(r.w.kafkaRecs)
	r.w.mu.Unlock()
	r.w.mu.Lock()
	var rowless []string
	for _, op := range r.w.rowless {
		// S8 allows a deferred member's work in the batch's shared transactions before its row,
		// never its own.
		id := op[strings.LastIndexByte(op, ' ')+1:]
		if !r.w.deferred[id] || strings.HasPrefix(op, "sql.run ") {
			rowless = append(rowless, op)
		}
	}
	assert.Empty(t, rowless, "S7: a participant got work before the request's row existed; calls %v", r.w.ops)
	assert.Zero(t, r.w.anchorless, "S8: a prepared write of deferred rows alone")
	r.w.mu.Unlock()
	states := map[string]txntype.State{}
	for i := range members {
		id := fmt.Sprintf("r%d", i)
		row := rows["p_"+id]
		answer := r.answers[id]
		// Kafka transactions carrying this request's record, and how many committed.
		var carriers, committedIn []int64
		for pid, vs := range recs {
			if slices.Contains(vs, id) {
				carriers = append(carriers, pid)
				if kafka[pid] == "committed" {
					committedIn = append(committedIn, pid)
				}
			}
		}
		if row == nil {
			require.Error(t, answer, "%s: no row, yet answered 200", id)
			assert.Empty(t, committedIn, "%s: no row, yet its record committed", id)
			continue
		}
		require.True(t, row.State.Final(), "%s: recovery left %s; calls %v", id, row.State, r.w.ops)
		states[id] = row.State
		committed := row.State == txntype.StateCommitted
		db := txntype.DefaultDatabase
		if r.w.otherDB[id] {
			db = "other"
		}
		sqlGID := "p_" + id + "@" + db
		r.w.mu.Lock()
		work := slices.Clone(r.w.sqlWork[sqlGID])
		r.w.mu.Unlock()
		sqlCommits := 0
		for _, g := range work {
			if sqlState[g] == "prepared" {
				r.sweep(t, g)
				_, sqlState, _, _ = r.w.snapshot()
			}
			if sqlState[g] == "committed" {
				sqlCommits++
			}
		}
		want := 0
		if committed {
			want = 1
		}
		assert.Equal(t, want, sqlCommits, "%s %s: its SQL work committed %d times (in %v: %v); calls %v",
			id, row.State, sqlCommits, work, sqlState, r.w.ops)
		if committed {
			assert.Len(t, committedIn, 1, "%s committed: its record committed exactly once (carriers %v); calls %v", id, carriers, r.w.ops)
		} else {
			assert.Empty(t, committedIn, "%s %s: its record committed; calls %v", id, row.State, r.w.ops)
		}
		switch {
		case answer == nil:
			assert.True(t, committed, "%s answered 200, ended %s; calls %v", id, row.State, r.w.ops)
		case errors.Is(answer, txntype.ErrAborted), errors.Is(answer, txntype.ErrUnavailable):
			assert.False(t, committed, "%s answered %v, ended committed; calls %v", id, answer, r.w.ops)
		default:
			assert.ErrorIs(t, answer, txntype.ErrInDoubt, id)
		}
	}
	return states
}

// sweep applies the orphan sweep's rules to a gid left prepared: a request's own gid follows its
// final row; a shared one follows its registration (S3): committed when every member it names
// committed, rolled back when unregistered (tombstoned) or aborted.
func (r *batchRun) sweep(t *testing.T, g string) {
	t.Helper()
	rows, _, _, _ := r.w.snapshot()
	commit := false
	if txntype.IsSharedGID("p", g) {
		r.w.mu.Lock()
		ms, registered := r.w.shared[g]
		if !registered {
			r.w.shared[g] = nil // the tombstone
		}
		r.w.mu.Unlock()
		commit = registered
		for _, m := range ms {
			commit = commit && rows[m].State == txntype.StateCommitted
		}
	} else {
		commit = rows[strings.TrimSuffix(g, "@"+txntype.DefaultDatabase)].State == txntype.StateCommitted
	}
	if commit {
		require.NoError(t, fakeSQL{r.w}.CommitPrepared(context.Background(), txntype.DefaultDatabase, g))
	} else {
		require.NoError(t, fakeSQL{r.w}.RollbackPrepared(context.Background(), txntype.DefaultDatabase, g))
	}
}

// claimBeforePreparedWrite has a resolver claim and resolve the row gid right before the
// batch's first prepared write (a race with the live leader at that exact step).
func claimBeforePreparedWrite(t *testing.T, gid string) func(*world) func(int, string) mode {
	t.Helper()
	var once sync.Once
	return func(w *world) func(int, string) mode {
		return func(_ int, op string) mode {
			if op != "log.prepared_batch" {
				return pass
			}
			once.Do(func() {
				rows, _, _, _ := w.snapshot()
				rules := coord.Rules{Log: fakeLog{w}, SQL: fakeSQL{w}, Kafka: fakeKafka{w}}
				_, err := rules.Resolve(context.WithValue(context.Background(), resolverKey{}, true), rows[gid],
					txntype.Fence{Instance: "r", Epoch: 1}, nil)
				assert.NoError(t, err)
			})
			return pass
		}
	}
}

func count(ops []string, op string) int {
	n := 0
	for _, o := range ops {
		if o == op {
			n++
		}
	}
	return n
}

func TestBatchSharesOneKafkaTransaction(t *testing.T) {
	t.Parallel()
	r := runBatch(t, nil)
	states := r.check(t)
	for id, st := range states {
		assert.Equal(t, txntype.StateCommitted, st, id)
		assert.NoError(t, r.answers[id], id)
	}
	assert.Equal(t, 1, count(r.w.ops, "kafka.acquire"), "one id for the batch")
	assert.Equal(t, 1, count(r.w.ops, "kafka.commit"), "one EndTxn for the batch")
	assert.Equal(t, 1, count(r.w.ops, "log.prepared_batch"), "one prepared write for the batch")
	assert.Zero(t, count(r.w.ops, "log.prepared"), "no member logged prepared alone")
	assert.Equal(t, 1, count(r.w.ops, "log.committed_batch"), "one final write for the batch")
	assert.Zero(t, count(r.w.ops, "log.committed"), "no member logged committed alone")
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	assert.Equal(t, map[int64][]bool{1: {true}}, r.w.releases, "B3: the shared id is released once, when every member is final")
}

// B1: a request whose SQL fails never rides; the others commit without it.
func TestBatchMemberSQLFails(t *testing.T) {
	t.Parallel()
	r := runBatch(t, nil, "r1")
	states := r.check(t)
	assert.Equal(t, txntype.StateAborted, states["r1"])
	assert.ErrorIs(t, r.answers["r1"], txntype.ErrAborted)
	for _, id := range []string{"r0", "r2"} {
		assert.Equal(t, txntype.StateCommitted, states[id], id)
		assert.NoError(t, r.answers[id], id)
	}
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	for pid, vs := range r.w.kafkaRecs {
		assert.NotContains(t, vs, "r1", "the failed request's record rode in transaction %d", pid)
	}
}

// A fault at each step of the batch, before or after its effect: whatever happens, every
// request is atomic and its answer true.
func TestBatchFaultAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"kafka.acquire", "kafka.begin", "kafka.add", "kafka.flush", "log.prepared_batch",
		"kafka.commit", "kafka.endtxn", "sql.commit_prepared_many", "log.committed_batch", "sql.commit_prepared",
		"log.committed", "sql.rollback_prepared", "kafka.abort"} {
		for _, m := range []mode{failBefore, failAfter, refused} {
			for k := range 2 {
				t.Run(fmt.Sprintf("%s/%d/mode %d", op, k, m), func(t *testing.T) {
					t.Parallel()
					runBatch(t, nth(op, k, m)).check(t)
				})
			}
		}
	}
}

// D1 in a batch: members answered at the batch's decision, a fault at each step after it (or
// before): every 200 ends committed on both sides, whatever phase 2 met.
func TestBatchDecidedFaultAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, shareSQL := range []bool{false, true} {
		for _, op := range []string{"kafka.commit", "kafka.endtxn", "sql.commit_prepared_many", "log.committed_batch",
			"sql.commit_prepared", "log.committed", "log.committing", "log.prepared_batch"} {
			for _, m := range []mode{failBefore, failAfter} {
				t.Run(fmt.Sprintf("shared sql %t/%s/mode %d", shareSQL, op, m), func(t *testing.T) {
					t.Parallel()
					runBatchAnswer(t, shareSQL, txntype.AnswerDecided, nth(op, 0, m)).check(t)
				})
			}
		}
	}
}

// D1 for every member of a batch, its leader included: each that asked is answered at the
// batch's decision while the batch's phase 2 is still held (the leader, which runs the batch on
// its own request's goroutine, leaves phase 2 to another one).
func TestBatchDecidedAnswersBeforePhase2(t *testing.T) {
	t.Parallel()
	for _, shareSQL := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared sql %t", shareSQL), func(t *testing.T) {
			t.Parallel()
			hold := make(chan struct{})
			var phase2 atomic.Int32
			held := func(*world) func(int, string) mode {
				return func(_ int, op string) mode {
					if strings.HasPrefix(op, "sql.commit_prepared") {
						phase2.Add(1)
						select {
						case <-hold:
						case <-time.After(5 * time.Second): // the test has failed; let it end
						}
					}
					return pass
				}
			}
			r, answered, wait := startBatch(t, shareSQL, txntype.AnswerDecided, held)
			for range members {
				select {
				case <-answered:
				case <-time.After(3 * time.Second):
					close(hold)
					wait()
					t.Fatalf("a member was not answered while phase 2 was held (answers: %v)", r.answers)
				}
			}
			assert.Positive(t, phase2.Load(), "phase 2 had begun, and was held")
			close(hold)
			wait()
			require.NoError(t, r.c.WaitFinals(context.Background()))
			r.recover(nil)
			for id, st := range r.check(t) {
				assert.Equal(t, txntype.StateCommitted, st, id)
				assert.NoError(t, r.answers[id], id)
			}
		})
	}
}

// A resolver claims one member right before the batch's prepared write: the write is refused
// as a whole, nothing commits on that Kafka transaction, and every answer follows its row.
func TestBatchPreparedWriteRefused(t *testing.T) {
	t.Parallel()
	claim := claimBeforePreparedWrite(t, "p_r1")
	r := runBatch(t, claim)
	states := r.check(t)
	assert.Equal(t, txntype.StateAborted, states["r1"])
	assert.ErrorIs(t, r.answers["r1"], txntype.ErrAborted, "the claimed member answers from its row")
	assert.Zero(t, count(r.w.ops, "kafka.commit"), "no EndTxn(commit) after a refused prepared write")
}

// B4 (the model's finding B1): when the prepared write's answer is lost, every member is in
// doubt and the shared id is quarantined; recovery may release it only at the last member.
func TestBatchQuarantineReleasedAtLastMember(t *testing.T) {
	t.Parallel()
	r := runBatch(t, nth("log.prepared_batch", 0, failBefore))
	r.check(t)
	var got []string
	for i := range members {
		id, ok := r.c.TakeQuarantined(fmt.Sprintf("p_r%d", i))
		if ok {
			got = append(got, id)
		}
		if i < members-1 {
			assert.False(t, ok, "the id is released at member %d of %d", i+1, members)
		}
	}
	require.Len(t, got, 1, "the shared id is released exactly once, at the last member")
	r.w.mu.Lock()
	assert.Equal(t, map[int64][]bool{1: {false}}, r.w.releases, "B3: the shared id is quarantined once, by the last member")
	r.w.mu.Unlock()
	for i := range members {
		assert.ErrorIs(t, r.answers[fmt.Sprintf("r%d", i)], txntype.ErrInDoubt, "r%d: the prepared write's outcome is unknown", i)
	}
}

// The batch's EndTxn(commit) lands but its answer is lost, and Kafka stays unreachable for the
// retries by ids: every member is in doubt (202), none may roll back on its own, and recovery
// commits them all.
func TestBatchDecisionUnknown(t *testing.T) {
	t.Parallel()
	lost := func(*world) func(int, string) mode {
		return func(_ int, op string) mode {
			switch op {
			case "kafka.commit":
				return failAfter
			case "kafka.endtxn":
				return failBefore
			}
			return pass
		}
	}
	r := runBatch(t, lost)
	states := r.check(t)
	for i := range members {
		id := fmt.Sprintf("r%d", i)
		assert.ErrorIs(t, r.answers[id], txntype.ErrInDoubt, id)
		assert.Equal(t, txntype.StateCommitted, states[id], id)
	}
}

// The log's server refuses the batch's prepared write (a client's lock on the log held past the
// log's lock timeout): nothing is logged prepared, so the batch is aborted at once rather than
// left in doubt, every member answers "safe to retry" (503) with both sides rolled back, and the
// shared id goes back to the pool.
func TestBatchPreparedWriteRefusedByServer(t *testing.T) {
	t.Parallel()
	for _, shareSQL := range []bool{false, true} {
		t.Run(fmt.Sprintf("share sql %t", shareSQL), func(t *testing.T) {
			t.Parallel()
			r := runBatchWith(t, shareSQL, nth("log.prepared_batch", 0, refused))
			states := r.check(t)
			for i := range members {
				id := fmt.Sprintf("r%d", i)
				assert.ErrorIs(t, r.answers[id], txntype.ErrUnavailable, id)
				assert.Equal(t, txntype.StateAborted, states[id], id)
				_, quarantined := r.c.TakeQuarantined("p_" + id)
				assert.False(t, quarantined, "%s: nothing is in doubt, so nothing is quarantined", id)
			}
			assert.Zero(t, count(r.w.ops, "kafka.commit"), "no EndTxn(commit) after a refused prepared write")
			assert.Equal(t, members, count(r.w.ops, "log.aborted"), "each member logs its abort itself")
		})
	}
}
