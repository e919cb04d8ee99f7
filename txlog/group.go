package txlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/kpgtx/coordinator/txntype"
)

// errClosed: the log was closed.
var errClosed = errors.New("txlog: closed")

// groupCommit batches the state writes of concurrent transactions into one database
// transaction: one round trip and one WAL flush for every write queued while the previous batch
// was committing (docs/design.md). A write that is alone is sent at once by its caller, with no
// hand-off to a writer goroutine, so a lone transaction waits for nothing. Each write keeps its
// own answer: a compare-and-set that finds
// the row moved on fails alone; an SQL error or a failed commit fails the whole batch (those
// writes are then unknown, and their callers treat them so).
type groupCommit struct {
	pool     *pgxpool.Pool
	reqs     chan *write
	maxBatch int
	wg       sync.WaitGroup
	once     sync.Once
	closed   chan struct{}
	obs      Observer // nil: no measurements
	// pending counts the writes between do and their answer: a write that finds none sends
	// itself.
	pending atomic.Int32
	// separate: a flush sends each Begin as its own statement (a benchmark's baseline).
	separate bool
	// inflight counts the flushes under way (a writer's, or a caller's alone); ended gets a
	// token when one ends (gather).
	inflight atomic.Int32
	ended    chan struct{}
	// hold is gatherWait (tests set another).
	hold time.Duration
}

type write struct {
	sql   string
	args  []any
	scan  func(pgx.Row) error // the write's own answer; its error fails only this write
	err   chan error
	begin *beginRow // a Begin, which a flush may merge with others (mergeBegins); else nil
}

// writers is how many batches may be in flight at once: one commits while the next fills.
const writers = 2

// gatherWait bounds how long a writer that took a write while another flush is under way waits
// for that flush to end, gathering the writes that arrive meanwhile (gather). It is about one
// flush on a quiet server: long enough to take in a burst, short enough that a flush stuck on a
// lock (up to LockTimeout) holds the other writer's writes no longer than this.
const gatherWait = 2 * time.Millisecond

func newGroupCommit(pool *pgxpool.Pool, obs Observer) *groupCommit {
	g := &groupCommit{pool: pool, reqs: make(chan *write), maxBatch: 256, closed: make(chan struct{}), obs: obs,
		ended: make(chan struct{}, 1), hold: gatherWait}
	for range writers {
		g.wg.Add(1)
		go g.loop()
	}
	return g
}

// do queues a write and waits for its answer. When ctx ends first the write may still commit:
// the error says so, and the caller must treat the write as unknown.
// begin, when not nil, lets a flush merge this write with the other Begins it carries.
func (g *groupCommit) do(ctx context.Context, sql string, args []any, begin *beginRow, scan func(pgx.Row) error) error {
	defer g.pending.Add(-1)
	if g.pending.Add(1) == 1 {
		return g.alone(ctx, sql, args, scan)
	}
	w := &write{sql: sql, args: args, scan: scan, err: make(chan error, 1), begin: begin}
	select {
	case g.reqs <- w:
	case <-g.closed:
		return errClosed
	case <-ctx.Done():
		// Not queued: nothing of it went out.
		return fmt.Errorf("%w: %w", txntype.ErrLogUnsent, ctx.Err())
	}
	select {
	case err := <-w.err:
		return err
	case <-ctx.Done():
		return fmt.Errorf("outcome of the log write unknown: %w", ctx.Err())
	}
}

// alone sends a write that has no company as an autocommit statement from the caller's
// goroutine. Writes that arrive meanwhile go to the writers. A write cut off by ctx may still
// commit: the error says so.
func (g *groupCommit) alone(ctx context.Context, sql string, args []any, scan func(pgx.Row) error) error {
	select {
	case <-g.closed:
		return errClosed
	default:
	}
	// Bounded like a batch's flush: a caller's context may have no deadline, and a connection
	// that stopped answering must not hold the caller for ever.
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	g.inflight.Add(1)
	defer g.flushEnded()
	start := time.Now()
	err := retried(func() error {
		return onConn(ctx, g.pool, func(c *pgxpool.Conn) error { return scan(c.QueryRow(ctx, sql, args...)) })
	})
	if g.obs != nil {
		g.obs.ObserveLogBatch(1, time.Since(start))
	}
	if err != nil && ctx.Err() != nil && !pgconn.SafeToRetry(err) &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("outcome of the log write unknown: %w", err)
	}
	return err
}

func (g *groupCommit) loop() {
	defer g.wg.Done()
	for {
		var first *write
		select {
		case first = <-g.reqs:
		case <-g.closed:
			return
		}
		batch := g.gather([]*write{first})
	fill:
		for len(batch) < g.maxBatch {
			select {
			case w := <-g.reqs:
				batch = append(batch, w)
			default:
				break fill
			}
		}
		g.inflight.Add(1)
		g.flush(batch)
		g.flushEnded()
	}
}

// gather holds a batch whose first write is a patient Begin (its request waits for its batch
// meanwhile, coord.JoinedBegin) and arrived while another flush is under way, until that flush
// ends (or gatherWait passes, or the Begin's batch is sealed: its leader then waits for it),
// taking in the writes that arrive meanwhile. Requests come in
// bursts (a shared transaction answers its members at once, and they send their next requests
// together): without it the burst's first Begin went alone, the next two each took a writer
// alone, and only the rest shared a flush, so that half the flushes at c=16 carried one write,
// each its own round trip, statement and WAL flush. Any other write is not held: a lone
// request's Begin, which often meets its predecessor's final write under way, is on its path.
func (g *groupCommit) gather(batch []*write) []*write {
	if b := batch[0].begin; b == nil || !b.patient || g.inflight.Load() == 0 {
		return batch
	}
	select { // a token left by a flush that ended before this one began says nothing now
	case <-g.ended:
	default:
	}
	if g.inflight.Load() == 0 {
		return batch
	}
	timer := time.NewTimer(g.hold)
	defer timer.Stop()
	sealed := batch[0].begin.sealed
	for len(batch) < g.maxBatch {
		select {
		case w := <-g.reqs:
			batch = append(batch, w)
		case <-g.ended:
			return batch
		case <-sealed: // its batch got its slot and waits for this Begin
			return batch
		case <-timer.C:
			return batch
		case <-g.closed:
			return batch
		}
	}
	return batch
}

// flushEnded ends a flush counted in inflight and tells a gathering writer.
func (g *groupCommit) flushEnded() {
	g.inflight.Add(-1)
	select {
	case g.ended <- struct{}{}:
	default:
	}
}

// flushTimeout bounds one batch's round trips and commit.
const flushTimeout = 30 * time.Second

func (g *groupCommit) flush(batch []*write) { g.flushIsolating(batch, isolations) }

// isolations bounds how often a flush sends its writes again without the one whose own statement
// failed (flushIsolating): each time costs up to a lock timeout when the failure was a lock.
const isolations = 1

// flushIsolating sends batch as one transaction. When a write's own statement fails with an
// error that rolled the transaction back (asLogRefused), the writes after it never ran and the
// ones before it were rolled back: that write gets its error, and, up to isolate times, the
// others are sent again without it, so that one write's failure (a row another transaction
// keeps locked, a constraint) does not fail every write it travelled with.
func (g *groupCommit) flushIsolating(batch []*write, isolate int) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if g.obs != nil {
		start := time.Now()
		defer func() { g.obs.ObserveLogBatch(len(batch), time.Since(start)) }()
	}
	if len(batch) == 1 {
		// Alone: an autocommit statement, no BEGIN/COMMIT.
		w := batch[0]
		w.err <- retried(func() error {
			return onConn(ctx, g.pool, func(c *pgxpool.Conn) error { return w.scan(c.QueryRow(ctx, w.sql, w.args...)) })
		})
		return
	}
	// The Begins of the batch go first, as one statement; the other writes follow, each its own.
	merged, rest, msql, margs := []*write(nil), batch, "", []any(nil)
	if !g.separate {
		merged, rest, msql, margs = mergeBegins(batch)
	}
	var errs []error
	err := retried(func() error {
		errs = make([]error, len(merged)+len(rest))
		return onConn(ctx, g.pool, func(conn *pgxpool.Conn) error { return g.send(ctx, conn, merged, rest, msql, margs, errs) })
	})
	all := append(merged, rest...)
	if err != nil && isolate > 0 && len(all) > 1 {
		if j := culprit(errs, len(merged)); j >= 0 {
			all[j].err <- errs[j]
			g.flushIsolating(append(all[:j:j], all[j+1:]...), isolate-1)
			return
		}
	}
	for i, w := range all {
		if err != nil {
			errs[i] = err
		}
		w.err <- errs[i]
	}
}

// culprit is the index of the write whose own statement failed a flush and rolled it back: the
// first answer that is such a server error (the server skipped every statement after it, and
// pgx answers them with the same error). -1 when there is none, or when it is the merged Begins'
// statement (first merged answers), whose writes cannot be told apart.
func culprit(errs []error, merged int) int {
	for i, e := range errs {
		if errors.Is(asLogRefused(e), txntype.ErrLogRefused) {
			if i < merged {
				return -1
			}
			return i
		}
	}
	return -1
}

// retried runs send again while it fails retryable, up to flushAttempts times.
func retried(send func() error) error {
	err := send()
	for attempt := 1; attempt < flushAttempts && retryable(err); attempt++ {
		err = send()
	}
	return err
}

// readCommit reads the answer to the COMMIT that ends a pipelined transaction (after its last
// statement's) and closes the batch: the transaction committed only when the server says
// COMMIT (a transaction that failed before ends ROLLBACK, or its COMMIT was skipped).
func readCommit(br pgx.BatchResults, what string) error {
	ct, err := br.Exec()
	if err != nil {
		return err
	}
	if ct.String() != "COMMIT" {
		return fmt.Errorf("txlog: %s ended %q", what, ct.String())
	}
	if err := br.Close(); err != nil {
		return errOutcomeUnknown{err}
	}
	return nil
}

func (g *groupCommit) close() {
	g.once.Do(func() { close(g.closed) })
	g.wg.Wait()
}

// send sends one flush's transaction on conn: BEGIN, the merged Begins, the other writes and
// COMMIT, in one round trip; each write's own answer goes to errs (merged first).
func (g *groupCommit) send(ctx context.Context, conn *pgxpool.Conn, merged, rest []*write, msql string, margs []any, errs []error) error {
	// BEGIN, the writes and COMMIT in one round trip. A statement that fails makes the
	// server skip the rest, COMMIT included: every write of the batch fails, as none
	// committed. A connection left inside the failed transaction is not reused (pgxpool
	// destroys a connection released in a transaction).
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if merged != nil {
		b.Queue(msql, margs...)
	}
	for _, w := range rest {
		b.Queue(w.sql, w.args...)
	}
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return err
	}
	if merged != nil {
		rows, _ := br.Query()
		if err := readMerged(rows, merged, errs); err != nil {
			for i := range merged {
				errs[i] = err
			}
		}
	}
	for i, w := range rest {
		// A write's own answer (a compare-and-set that matched no row) fails only it; an
		// SQL error aborts the transaction, and COMMIT's answer below fails them all.
		errs[len(merged)+i] = w.scan(br.QueryRow())
	}
	err := readCommit(br, "group commit")
	if err != nil {
		// The statement that failed names why the transaction was rolled back.
		for _, e := range errs {
			if retryable(e) {
				return e
			}
		}
	}
	return err
}
