package coord

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// Requests in flight on this instance, by gid.
//
// A request is in flight from before its row is logged until its answer, or, for a commit
// answered before its final write (finals.go, D1), until that write ended. The recovery loop
// leaves such rows alone (InFlight). A second request with the same id that arrives meanwhile
// must not answer from the log: the first run's row may not be logged yet (its Begin still
// on the way, or a batch member's Begin still running beside its wait for the batch, S7), and
// "not found" would be false for an id that is running. So it waits for the first run's outcome, bounded by its own budget:
//
//   - the first run ended: the second goes on as any repeat of the id, and its Begin finds the
//     stored row (or, when the first run logged nothing, runs it);
//   - its own budget ended first: in doubt (202), the outcome is not known yet; GET tells later;
//   - another body: 422 at once, as the stored row would say.

// flight is one request id in flight on this instance.
type flight struct {
	digest []byte
	req    txntype.Transaction // the request as boarded: GET shows it before its row is logged
	since  time.Time           // when it was boarded
	done   chan struct{}       // closed when the run has left the in-flight set
	// chain are the marks a chained successor waits for (chain.go); nil for a request
	// without offsets.
	chain *chainMarks
}

// board puts the request with gid and digest in flight: mine is its flight, or nil when
// another run of the id is in flight, whose outcome then answers the request (err, or nil when
// that run ended and the request may go on as a repeat of the id: board again).
func (c *Coordinator) board(ctx context.Context, t *txntype.Transaction, offsets bool) (mine *flight, err error) {
	gid := t.GID
	f := &flight{digest: t.Digest, req: *t, since: time.Now(), done: make(chan struct{})}
	if offsets {
		f.chain = newChainMarks()
	}
	v, busy := c.inflight.LoadOrStore(gid, f)
	if !busy {
		return f, nil
	}
	other, ok := v.(*flight)
	if !ok {
		// Not a request's gid (a shared transaction's, sharedsql.go): never a request id's.
		return nil, &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Txn: unlogged(t), Cause: fmt.Errorf("%s is in flight on this instance", gid)}
	}
	if !bytes.Equal(other.digest, t.Digest) {
		return nil, txntype.ErrIDConflict
	}
	select {
	case <-other.done:
		return nil, nil
	case <-ctx.Done():
		return nil, &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Txn: unlogged(t), Cause: fmt.Errorf(
			"%s is in flight on this instance and its outcome was not known within this request's budget: %w",
			gid, context.Cause(ctx))}
	}
}

// inFlightView is the request with gid in flight on this instance, as GET shows it while its
// row is not logged yet (active, since it was boarded); ok is false when none is.
func (c *Coordinator) inFlightView(gid string) (t *txntype.Transaction, ok bool) {
	v, ok := c.inflight.Load(gid)
	if !ok {
		return nil, false
	}
	f, ok := v.(*flight)
	if !ok {
		return nil, false
	}
	a := f.req
	at := f.since.Truncate(time.Microsecond)
	a.State, a.CreatedAt, a.UpdatedAt = txntype.StateActive, at, at
	return &a, true
}

// land takes f's run out of flight and wakes the requests of the same id that wait for it.
func (c *Coordinator) land(gid string, f *flight) {
	c.inflight.CompareAndDelete(gid, f)
	close(f.done)
}

// unlogged is the answer's view of t, a request whose row this request did not see logged: the
// row as it would be logged (active, stamped now). A 202 always carries a transaction.
func unlogged(t *txntype.Transaction) *txntype.Transaction {
	a := *t
	now := time.Now().Truncate(time.Microsecond)
	a.State, a.CreatedAt, a.UpdatedAt = txntype.StateActive, now, now
	return &a
}
