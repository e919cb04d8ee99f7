package txlog_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// countingObserver adds up the writes the group commit reports and the largest batch.
type countingObserver struct {
	writes, batches, largest atomic.Int64
}

func (o *countingObserver) ObserveLogWrite(time.Duration) {}
func (o *countingObserver) ObserveLogBatch(n int, _ time.Duration) {
	o.writes.Add(int64(n))
	o.batches.Add(1)
	for {
		l := o.largest.Load()
		if int64(n) <= l || o.largest.CompareAndSwap(l, int64(n)) {
			return
		}
	}
}

// Group commit against PostgreSQL: a lone write is sent alone (by its caller); concurrent writes
// share batches, and every write keeps its own answer: a compare-and-set that finds its row moved
// on fails alone, the others in its batch commit.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	obs := &countingObserver{}
	l, pool := newLogWith(t, txlog.Options{GroupCommit: true, Observer: obs})
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)

	// Sequential writes: every batch carries one.
	for i := range 5 {
		_, created, err := l.Begin(ctx, row(fmt.Sprintf("seq-%d", i), epoch))
		require.NoError(t, err)
		require.True(t, created)
	}
	assert.EqualValues(t, 5, obs.writes.Load())
	assert.EqualValues(t, 5, obs.batches.Load())

	// Concurrent writes: begins, then prepared writes of which every third is stale.
	const n = 96
	rows := make([]*txntype.Transaction, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			t0, created, err := l.Begin(ctx, row(fmt.Sprintf("con-%d", i), epoch))
			if assert.NoError(t, err) && assert.True(t, created) {
				rows[i] = t0
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			tx := *rows[i]
			if i%3 == 0 {
				tx.State = txntype.StatePrepared // not what the row holds: the compare-and-set fails
			}
			errs[i] = l.Transition(ctx, &tx, txntype.StateAborted)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%3 == 0 {
			assert.ErrorIs(t, err, txntype.ErrMovedOn, "write %d", i)
		} else {
			assert.NoError(t, err, "write %d", i)
		}
	}
	for i := range n {
		got, err := l.Get(ctx, rows[i].ID)
		require.NoError(t, err)
		want := txntype.StateAborted
		if i%3 == 0 {
			want = txntype.StateActive
		}
		assert.Equal(t, want, got.State, "row %d", i)
	}
	assert.EqualValues(t, 5+2*n, obs.writes.Load(), "every write reported once")
	assert.Greater(t, obs.largest.Load(), int64(1), "concurrent writes shared a batch")
}

// A write the server refuses (here an error message with a NUL, which PostgreSQL text cannot
// hold) inside a group commit: the writes it shared a batch with fail with it, none of them
// half-done, and each write's answer matches its row (nil: changed; an error: unchanged).
func TestGroupCommitRefusedWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := newLogWith(t, txlog.Options{GroupCommit: true})
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	const n = 48
	rows := make([]*txntype.Transaction, n)
	for i := range n {
		r, _, err := l.Begin(ctx, row(fmt.Sprintf("ref-%d", i), epoch))
		require.NoError(t, err)
		rows[i] = r
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tx := *rows[i]
			tx.Error = &txntype.ErrorDetail{Participant: "sql:default", Class: txntype.ClassAbortable, Message: "fine"}
			if i%8 == 0 {
				tx.Error.Message = "bad\x00byte"
			}
			errs[i] = l.Transition(ctx, &tx, txntype.StateAborted)
		})
	}
	wg.Wait()
	for i := range n {
		got, err := l.Get(ctx, rows[i].ID)
		require.NoError(t, err)
		if i%8 == 0 {
			assert.Error(t, errs[i], "write %d", i)
		}
		if errs[i] == nil {
			assert.Equal(t, txntype.StateAborted, got.State, "write %d answered nil", i)
		} else {
			assert.Equal(t, txntype.StateActive, got.State, "write %d answered %v, yet its row changed", i, errs[i])
		}
	}
}

// Concurrent Begins under group commit are merged into one statement per flush; each keeps
// the answer it has alone: a new id is created; of two Begins of one id, one creates the row
// and the other finds it; a finished row is found, not changed; a row aborted with a retriable
// error is reset only for the same digest; a stale epoch begins nothing. Every created or reset
// row gets its one 'active' event.
func TestGroupCommitMergedBegins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	obs := &countingObserver{}
	l, pool := newLogWith(t, txlog.Options{GroupCommit: true, Observer: obs})
	stale, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	const n = 24
	finish := func(id string, class txntype.Class) {
		t.Helper()
		r, created, err := l.Begin(ctx, row(id, stale))
		require.NoError(t, err)
		require.True(t, created)
		r.Error = &txntype.ErrorDetail{Participant: "sql:default", Class: class, Message: "ended"}
		require.NoError(t, l.Transition(ctx, r, txntype.StateAborted))
	}
	for i := range n {
		finish(fmt.Sprintf("keep-%d", i), txntype.ClassAbortable)
		finish(fmt.Sprintf("retry-%d", i), txntype.ClassRetriable)
		finish(fmt.Sprintf("digest-%d", i), txntype.ClassRetriable)
	}
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	before := obs.largest.Load()

	type attempt struct {
		id      string
		epoch   int64
		digest  byte
		created bool
		state   txntype.State
		err     error
	}
	var attempts []*attempt
	add := func(id string, epoch int64, digest byte) {
		attempts = append(attempts, &attempt{id: id, epoch: epoch, digest: digest})
	}
	for i := range n {
		add(fmt.Sprintf("new-%d", i), epoch, 1)
		add(fmt.Sprintf("dup-%d", i), epoch, 1)
		add(fmt.Sprintf("dup-%d", i), epoch, 1)
		add(fmt.Sprintf("keep-%d", i), epoch, 1)
		add(fmt.Sprintf("retry-%d", i), epoch, 1)
		add(fmt.Sprintf("digest-%d", i), epoch, 2)
		add(fmt.Sprintf("fenced-%d", i), stale, 1)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, a := range attempts {
		wg.Go(func() {
			<-start
			r := row(a.id, a.epoch)
			r.Digest = []byte{a.digest}
			got, created, err := l.Begin(ctx, r)
			a.created, a.err = created, err
			if err == nil {
				a.state = got.State
				assert.Equal(t, r.GID, got.GID, "%s", a.id)
			}
		})
	}
	close(start)
	wg.Wait()
	assert.Greater(t, obs.largest.Load(), before, "concurrent Begins shared a flush")

	dups := map[string]int{}
	for _, a := range attempts {
		kind := a.id[:strings.IndexByte(a.id, '-')]
		switch kind {
		case "fenced":
			assert.ErrorIs(t, a.err, txntype.ErrNotOwner, "%s", a.id)
			_, err := l.Get(ctx, a.id)
			assert.ErrorIs(t, err, txntype.ErrNotFound, "%s: a stale epoch began a row", a.id)
			continue
		case "dup":
			require.NoError(t, a.err, "%s", a.id)
			if a.created {
				dups[a.id]++
			}
			continue
		}
		require.NoError(t, a.err, "%s", a.id)
		want := map[string]struct {
			created bool
			state   txntype.State
		}{"new": {true, txntype.StateActive}, "retry": {true, txntype.StateActive},
			"keep": {false, txntype.StateAborted}, "digest": {false, txntype.StateAborted}}[kind]
		assert.Equal(t, want.created, a.created, "%s", a.id)
		assert.Equal(t, want.state, a.state, "%s", a.id)
	}
	for i := range n {
		id := fmt.Sprintf("dup-%d", i)
		assert.Equal(t, 1, dups[id], "%s: exactly one of its two Begins created it", id)
		for kind, want := range map[string]int{"new": 1, "dup": 1, "retry": 2, "keep": 1, "digest": 1} {
			id := fmt.Sprintf("%s-%d", kind, i)
			events, err := l.Events(ctx, "p_"+id)
			require.NoError(t, err)
			active := 0
			for _, e := range events {
				if e.State == txntype.StateActive {
					active++
				}
			}
			assert.Equal(t, want, active, "%s: 'active' events", id)
		}
	}
}

// BenchmarkBegin: concurrent Begins under group commit, a flush's Begins merged into one
// statement against the baseline of one statement each, in the same run (ns/op is per Begin;
// writes/flush is the group commit's mean batch).
func BenchmarkBegin(b *testing.B) {
	for _, mode := range []string{"merged", "separate"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			obs := &countingObserver{}
			l, pool := newLogWith(b, txlog.Options{GroupCommit: true, Observer: obs})
			if mode == "separate" {
				l.SeparateBegins()
			}
			epoch, err := txlog.BumpEpoch(ctx, pool, "a")
			require.NoError(b, err)
			var next atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprintf("b-%d", next.Add(1))
					if _, _, err := l.Begin(ctx, row(id, epoch)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			if n := obs.batches.Load(); n > 0 {
				b.ReportMetric(float64(obs.writes.Load())/float64(n), "writes/flush")
			}
		})
	}
}

// Two instances on one log begin the same request ids at once, in opposite orders, each through
// its own group commit: their merged Begins take the ids' keys in one order, so neither
// deadlocks the other, and a log transaction the server does roll back for a deadlock is sent
// again. Every Begin answers: exactly one of each id's two creates the row.
func TestGroupCommitTwoInstancesSameIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	la, pool := newLogWith(t, txlog.Options{GroupCommit: true})
	lb := txlog.New(pool, txlog.Options{GroupCommit: true})
	t.Cleanup(lb.Close)
	ea, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	eb, err := txlog.BumpEpoch(ctx, pool, "b")
	require.NoError(t, err)
	const n, rounds = 48, 4
	for round := range rounds {
		created := make([]atomic.Int32, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			for _, side := range []struct {
				l     *txlog.Log
				inst  string
				epoch int64
				id    int
			}{{la, "a", ea, i}, {lb, "b", eb, n - 1 - i}} {
				wg.Go(func() {
					<-start
					r := row(fmt.Sprintf("two-%d-%02d", round, side.id), side.epoch)
					r.Instance, r.Owner = side.inst, side.inst
					_, ok, err := side.l.Begin(ctx, r)
					if assert.NoError(t, err, "%s: %s", side.inst, r.ID) && ok {
						created[side.id].Add(1)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		for i := range n {
			assert.EqualValues(t, 1, created[i].Load(), "round %d, id %d: created by exactly one instance", round, i)
		}
	}
}

// The Begins of a burst that meets a flush under way share flushes when their requests wait
// for their batch meanwhile (coord.JoinedBegin): the writers hold them until that flush ends.
// Other writes are not held. And a flush stuck in the database holds the patient Begins no
// longer than the gather bound: they commit while it is still under way.
func TestGroupCommitGathersJoinedBegins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	burst := func(t *testing.T, l *txlog.Log, epoch int64, prefix string, patient bool, sealed <-chan struct{}) {
		t.Helper()
		bctx := ctx
		if patient {
			bctx = coord.WithJoinedBegin(ctx, sealed)
		}
		var wg sync.WaitGroup
		for i := range 24 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * time.Millisecond) // a burst, as requests arrive
				_, created, err := l.Begin(bctx, row(fmt.Sprintf("%s-%d", prefix, i), epoch))
				assert.NoError(t, err)
				assert.True(t, created)
			})
		}
		wg.Wait()
	}
	flushes := func(t *testing.T, patient bool) int64 {
		obs := &countingObserver{}
		l, pool := newLogWith(t, txlog.Options{GroupCommit: true, Observer: obs})
		l.SetGatherWait(time.Minute) // only the end of the flush under way ends a gather
		epoch, err := txlog.BumpEpoch(ctx, pool, "a")
		require.NoError(t, err)
		slow := make(chan error, 1)
		go func() { slow <- l.SlowWrite(ctx, 400*time.Millisecond) }()
		require.Eventually(t, func() bool { return obs.batches.Load() == 0 && l.Pending() == 1 }, time.Second, time.Millisecond)
		burst(t, l, epoch, "b", patient, nil)
		require.NoError(t, <-slow)
		return obs.batches.Load() - 1 // the slow write's
	}
	t.Run("patient", func(t *testing.T) {
		t.Parallel()
		assert.LessOrEqual(t, flushes(t, true), int64(2), "one gathered batch per writer")
	})
	t.Run("not patient", func(t *testing.T) {
		t.Parallel()
		assert.Greater(t, flushes(t, false), int64(2), "nothing held: the first writes go at once")
	})
	// stuckFlush starts a 3 s flush on a fresh log (gather: its gather bound, 0 for the default)
	// and reports whether it is still under way.
	stuckFlush := func(t *testing.T, gather time.Duration) (*txlog.Log, int64, *atomic.Bool) {
		t.Helper()
		l, pool := newLogWith(t, txlog.Options{GroupCommit: true})
		if gather > 0 {
			l.SetGatherWait(gather)
		}
		epoch, err := txlog.BumpEpoch(ctx, pool, "a")
		require.NoError(t, err)
		stuck := &atomic.Bool{}
		stuck.Store(true)
		go func() {
			assert.NoError(t, l.SlowWrite(ctx, 3*time.Second))
			stuck.Store(false)
		}()
		require.Eventually(t, func() bool { return l.Pending() == 1 }, time.Second, time.Millisecond)
		return l, epoch, stuck
	}
	t.Run("bounded by a stuck flush", func(t *testing.T) {
		t.Parallel()
		l, epoch, stuck := stuckFlush(t, 0)
		burst(t, l, epoch, "s", true, nil)
		assert.True(t, stuck.Load(), "the Begins committed while the stuck flush was under way")
	})
	// Once its batch is sealed, the leader waits for the Begin: nothing holds it any more, however
	// long the flush under way and the gather bound.
	t.Run("released when its batch is sealed", func(t *testing.T) {
		t.Parallel()
		l, epoch, stuck := stuckFlush(t, time.Minute)
		sealed := make(chan struct{})
		time.AfterFunc(5*time.Millisecond, func() { close(sealed) })
		burst(t, l, epoch, "z", true, sealed)
		assert.True(t, stuck.Load(), "the Begins committed while the flush was under way")
	})
}
