package coord

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// Chained requests (O4, docs/design.md section 8): a pipeline member keeps several batches in
// flight, each naming the one sent before it (OffsetCommit.After). Two rules keep that as safe
// as one batch at a time:
//
//   - O4a, offsets in order: a request's TxnOffsetCommit is sent only after its predecessor's
//     was appended. The group coordinator makes a committed transaction's offsets the group's
//     only when their commit record sits after the current one in __consumer_offsets, so the
//     later batch's offsets win whatever order the two transactions' markers land in; sent the
//     other way round, the earlier batch's offsets would win and the group would go back.
//   - O4c, statements in order: a request runs its statements only once its predecessor's are
//     prepared. Otherwise two chained batches that touch the same rows could wait on each
//     other: the later one's prepared locks would block the earlier one, whose commit the later
//     one waits for (O4b), until the later one's budget ran out. In this order the later one
//     waits for the earlier one's locks, which its commit releases, and that commit waits for
//     nothing of the later one.
//   - O4b, commits in order: a request commits only if its predecessor committed. It waits, at
//     the end of its phase 1 and before anything that could commit it is logged, for its
//     predecessor's decision; a predecessor aborted, fenced, never logged or without a known
//     outcome aborts it (409, ErrPredecessorUncommitted), so no refused batch is committed
//     past, and by induction none of the batches chained after a refused one commits.
//
// A predecessor in flight on this instance is waited for through its flight's marks; any other
// is read from the log: its stored state says what it did (a prepared row has its offsets
// appended, but only committing and committed are a decision to commit: a prepared row's Kafka
// transaction may still time out). The waits are bounded by the request's own budget.

// chainMarks are the two moments of a chained request that its successor waits for; each
// channel is closed once.
type chainMarks struct {
	sqlPrepared chan struct{} // its statements are prepared on every database (O4c)
	appended    chan struct{} // its offsets were appended to __consumer_offsets (O4a)
	committed   chan struct{} // it is decided to commit (O4b)
	sqlLeft     atomic.Int32  // databases whose statements are not prepared yet
}

func newChainMarks() *chainMarks {
	return &chainMarks{sqlPrepared: make(chan struct{}), appended: make(chan struct{}), committed: make(chan struct{})}
}

// expectSQL sets how many databases w's statements run on; none: its statements are prepared.
func (w *work) expectSQL(dbs int) {
	if m := w.flight.chain; m != nil {
		if m.sqlLeft.Store(int32(dbs)); dbs == 0 {
			close(m.sqlPrepared)
		}
	}
}

// markSQLPrepared records that w's statements on one more database are prepared.
func (w *work) markSQLPrepared() {
	if m := w.flight.chain; m != nil && m.sqlLeft.Add(-1) == 0 {
		close(m.sqlPrepared)
	}
}

// markAppended records that w's offsets were appended (after TxnOffsetCommit succeeded).
func (w *work) markAppended() {
	if m := w.flight.chain; m != nil {
		close(m.appended)
	}
}

// markCommitted records that w is decided to commit (EndTxn(commit) succeeded).
func (w *work) markCommitted() {
	if m := w.flight.chain; m != nil {
		close(m.committed)
	}
}

// chainStage is what a successor waits for.
type chainStage uint8

const (
	stageSQLPrepared chainStage = iota
	stageAppended
	stageCommitted
)

func (s chainStage) String() string {
	switch s {
	case stageSQLPrepared:
		return "have its statements prepared"
	case stageAppended:
		return "have its offsets appended"
	}
	return "commit"
}

// notLoggedGrace is how long a successor looks for a predecessor that is neither in flight here
// nor logged: the two requests may have been sent back to back and reach the coordinator in
// the other order.
const notLoggedGrace = time.Second

// awaitPredecessor returns once w's predecessor (if any) reached stage, or an abortable failure
// (matching ErrPredecessorUncommitted) when it never will.
func (c *Coordinator) awaitPredecessor(ctx context.Context, w *work, stage chainStage) error {
	oc := w.req.KafkaOffsets
	if oc == nil || oc.After == "" {
		return nil
	}
	if w.chainSeen.Load()&(1<<stage) != 0 {
		return nil // seen already (by another database's wait, or in the log)
	}
	gid := c.GID(oc.After)
	var missingSince time.Time
	for {
		if f := c.flightOf(gid); f != nil {
			var mark <-chan struct{} // nil without marks (no offsets): only its end tells
			if f.chain != nil {
				mark = [...]chan struct{}{f.chain.sqlPrepared, f.chain.appended, f.chain.committed}[stage]
			}
			select {
			case <-mark:
				w.sawPredecessor(stage)
				return nil
			case <-f.done:
				select {
				case <-mark: // reached just before it ended
					w.sawPredecessor(stage)
					return nil
				default: // it ended here without reaching stage: its row says
				}
			case <-ctx.Done():
				return chainBroken(oc.After, stage, fmt.Sprintf("it had not reached that within this request's budget: %v", context.Cause(ctx)))
			}
		}
		t, err := c.log.Get(ctx, oc.After)
		switch {
		case errors.Is(err, txntype.ErrNotFound):
			if missingSince.IsZero() {
				missingSince = time.Now()
			}
			if time.Since(missingSince) > notLoggedGrace {
				return chainBroken(oc.After, stage, "it is not logged")
			}
			select {
			case <-ctx.Done():
				return chainBroken(oc.After, stage, "it is not logged")
			case <-time.After(5 * time.Millisecond):
			}
			continue
		case err != nil:
			return &txntype.Failure{Participant: txntype.ParticipantCoordinator, Class: txntype.ClassRetriable,
				Err: fmt.Errorf("reading predecessor %q: %w", oc.After, err)}
		}
		if c.InFlight(t.GID) && t.State == txntype.StateActive {
			continue // boarded meanwhile: wait for its marks
		}
		if reached(t.State, stage) {
			if reached(t.State, stageCommitted) {
				stage = stageCommitted
			}
			w.sawPredecessor(stage)
			return nil
		}
		return chainBroken(oc.After, stage, "it is "+string(t.State))
	}
}

// sawPredecessor records that w's predecessor reached stage, so that no later wait for it reads
// the log again. The stages of its phase 1 are independent of each other; a decision to commit
// implies them all.
func (w *work) sawPredecessor(stage chainStage) {
	bits := uint32(1) << stage
	if stage == stageCommitted {
		bits = 1<<stageSQLPrepared | 1<<stageAppended | 1<<stageCommitted
	}
	w.chainSeen.Or(bits)
}

// flightOf is the flight of the request with gid in flight here, or nil.
func (c *Coordinator) flightOf(gid string) *flight {
	v, ok := c.inflight.Load(gid)
	if !ok {
		return nil
	}
	f, _ := v.(*flight)
	return f
}

// reached reports whether a predecessor's stored state shows stage: its statements are
// prepared and its offsets appended once it is prepared (both happen in phase 1, before
// prepared is logged), and it is decided to commit only when committing or committed.
func reached(s txntype.State, stage chainStage) bool {
	switch s {
	case txntype.StateCommitting, txntype.StateCommitted:
		return true
	case txntype.StatePrepared:
		return stage != stageCommitted
	}
	return false
}

// chainBroken is the failure of a request whose predecessor will not reach stage.
func chainBroken(after string, stage chainStage, why string) error {
	return &txntype.Failure{Participant: txntype.ParticipantCoordinator, Class: txntype.ClassAbortable,
		Err: fmt.Errorf("%w: waited for %q (kafka_offsets.after) to %s, but %s", txntype.ErrPredecessorUncommitted, after, stage, why)}
}
