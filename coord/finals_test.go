package coord_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// heldLog is the fake log with its committed writes held until hold is closed; fail makes them
// fail (no effect) once let go.
type heldLog struct {
	fakeLog
	hold    chan struct{}
	entered chan string // a gid (or "batch") when a committed write starts
	fail    bool
}

func (l heldLog) Committed(ctx context.Context, t *txntype.Transaction, at time.Time) error {
	l.entered <- t.GID
	<-l.hold
	if l.fail {
		return errInjected
	}
	return l.fakeLog.Committed(ctx, t, at)
}

func (l heldLog) CommittedBatch(ctx context.Context, ts []*txntype.Transaction, at time.Time) ([]bool, error) {
	l.entered <- "batch"
	<-l.hold
	if l.fail {
		return make([]bool, len(ts)), errInjected
	}
	return l.fakeLog.CommittedBatch(ctx, ts, at)
}

// A commit is answered before its final write (finals.go): the answer does not wait for it,
// the request stays in flight and keeps its transactional id until the write ended, a read of
// its id waits for the write, and the answer's stamps are the stored row's. A write that fails
// leaves the row to recovery and the id quarantined, the answer 200 all the same.
func TestCommitAnsweredBeforeFinalWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		req      txntype.Request
		fail     bool
		wantRow  txntype.State // after the write ended
		wantKeep bool          // the id's release (keep)
	}{
		{"two-phase", twoDBsAndKafka("x"), false, txntype.StateCommitted, true},
		{"two-phase, the write fails", twoDBsAndKafka("x"), true, txntype.StatePrepared, false},
		{"one-phase", txntype.Request{ID: "x", SQL: []txntype.Statement{stmt("INSERT INTO t VALUES (1)")}}, false, txntype.StateCommitted, false},
		{"one-phase, the write fails", txntype.Request{ID: "x", SQL: []txntype.Statement{stmt("INSERT INTO t VALUES (1)")}}, true, txntype.StateActive, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			log := heldLog{fakeLog: fakeLog{w}, hold: make(chan struct{}), entered: make(chan string, 8), fail: tc.fail}
			var k txntype.Kafka
			if len(tc.req.Kafka) > 0 {
				k = fakeKafka{w}
			}
			c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", Logger: slog.New(slog.DiscardHandler),
				Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}}}, log, k, fakeSQL{w})

			answer, err := c.Execute(context.Background(), tc.req)
			require.NoError(t, err, "answered while the final write is held")
			require.Equal(t, txntype.StateCommitted, answer.State)
			require.NotNil(t, answer.FinishedAt)
			assert.Equal(t, answer.UpdatedAt, *answer.FinishedAt)
			require.Equal(t, "p_x", <-log.entered, "the final write has started")
			assert.True(t, c.InFlight("p_x"), "in flight until the write ends: recovery leaves it alone")
			assertReleases(t, w, nil, "the id stays leased until the write ends (I1)")

			got := make(chan *txntype.Transaction, 1)
			go func() {
				row, err := c.Get(context.Background(), "x")
				assert.NoError(t, err)
				got <- row
			}()
			again := make(chan *txntype.Transaction, 1)
			go func() {
				row, _ := c.Execute(context.Background(), tc.req)
				again <- row
			}()
			select {
			case row := <-got:
				t.Fatalf("Get answered %s before the final write ended", row.State)
			case row := <-again:
				t.Fatalf("the same id sent again answered %v before the final write ended", row)
			case <-time.After(50 * time.Millisecond):
			}
			close(log.hold)
			row := <-got
			require.NoError(t, c.WaitFinals(context.Background()))
			assert.Equal(t, tc.wantRow, row.State)
			assert.Equal(t, tc.wantRow, (<-again).State, "the same id again: the stored row")
			if !tc.fail {
				assert.Equal(t, answer.UpdatedAt, row.UpdatedAt, "the answer's stamps are the row's")
				assert.Equal(t, answer.FinishedAt, row.FinishedAt)
			}
			assert.False(t, c.InFlight("p_x"))
			if k != nil {
				assertReleases(t, w, []bool{tc.wantKeep}, "released once the write ended: kept only when it landed")
			}
		})
	}
}

// The members of a shared Kafka transaction are answered when the batch's phase 2 committed
// them, the leader among them, while the write logging them committed is held.
func TestBatchAnsweredBeforeFinalWrite(t *testing.T) {
	t.Parallel()
	w := newWorld()
	log := heldLog{fakeLog: fakeLog{w}, hold: make(chan struct{}), entered: make(chan string, 8)}
	c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", FinishTimeout: time.Second,
		Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}}, Logger: slog.New(slog.DiscardHandler),
		Batch: coord.BatchConfig{MaxMembers: 8, Concurrency: 1}}, log, fakeKafka{w}, fakeSQL{w})
	c.ShareAlways()
	release := c.HoldBatchSlots()
	const members = 3
	answers := make(chan error, members)
	var wg sync.WaitGroup
	for i := range members {
		wg.Go(func() {
			txn, err := c.Execute(context.Background(), batchRequest(fmt.Sprintf("r%d", i)))
			if err == nil && txn.State != txntype.StateCommitted {
				err = fmt.Errorf("answered %s", txn.State)
			}
			answers <- err
		})
	}
	require.Eventually(t, func() bool { return c.OpenBatchMembers() == members }, 5*time.Second, time.Millisecond)
	release()
	require.Equal(t, "batch", <-log.entered)
	wg.Wait() // every member answered, the batch's final write still held
	for range members {
		require.NoError(t, <-answers)
	}
	rows, _, _, _ := w.snapshot()
	for i := range members {
		gid := fmt.Sprintf("p_r%d", i)
		assert.Equal(t, txntype.StatePrepared, rows[gid].State, "%s: not yet logged committed", gid)
		assert.True(t, c.InFlight(gid), gid)
	}
	assertReleases(t, w, nil, "the shared id stays leased until the write ends")
	close(log.hold)
	require.NoError(t, c.WaitFinals(context.Background()))
	rows, _, _, _ = w.snapshot()
	for i := range members {
		gid := fmt.Sprintf("p_r%d", i)
		assert.Equal(t, txntype.StateCommitted, rows[gid].State, gid)
		assert.False(t, c.InFlight(gid), gid)
	}
	assertReleases(t, w, []bool{true}, "one release of the shared id, kept")
}

// assertReleases checks the Release calls of the world's one producer (none yet: want nil).
func assertReleases(t *testing.T, w *world, want []bool, msg string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var got []bool
	for _, r := range w.releases {
		got = append(got, r...)
	}
	assert.Equal(t, want, got, msg)
}
