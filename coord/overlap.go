package coord

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A request that runs alone logs its row while phase 1 runs (I14), when Config.OverlapBegin
// asks for it (COORDINATOR_OVERLAP_BEGIN; off by default, docs/decisions.md).
//
// I5 needs the active row durable before any participant is prepared, not before the work:
// what a crash leaves of a request whose row is not logged yet is an open SQL transaction,
// which the server rolls back when the session ends, and an open Kafka transaction, which
// nothing can commit (EndTxn(commit) follows the prepared row, I2) and which the id's next
// InitProducerId (the pool's fill at start, a takeover's Reinit) or the broker's transaction
// timeout aborts. So Begin runs beside the statements and the produce, and each database's
// PREPARE (or the one-phase COMMIT) is held until the row is durable (work.hold, one more round
// trip instead of the log write's wait). A Begin that did not log a fresh row (the id's row
// exists, the log is down, the budget ran out) cancels phase 1: nothing was prepared, the
// open Kafka transaction is aborted and its id goes back to the pool, and Begin's answer is the
// request's. The gids are never rolled back on that path: they are the id's, and the row found
// may be another run of the same id, live on another instance.
//
// The model checks it (model/kpgtx.pml, Request: the Kafka side before the Begin), and the
// mutant M_PREPARE_BEFORE_ROW, which lets the PREPARE land before the row, is caught: recovery
// takes the prepared gid without a row for an orphan (I6) and rolls it back while the request
// goes on to commit Kafka.

// runOverlapped runs w alone, its Begin beside its phase 1. ran is false when Begin did not log
// a fresh row: then nothing of the request was prepared and (t, err) is Begin's answer.
func (c *Coordinator) runOverlapped(ctx context.Context, w *work, budget time.Duration) (t *Transaction, ran bool, err error) {
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	row := *w.t // Begin reads its own copy: phase 1 fills w.t meanwhile
	done := make(chan struct{})
	var b begun
	go func() {
		defer close(done)
		b = c.logBegin(ctx, &row, budget)
		if !b.run {
			cancel(errBeginLost)
		}
	}()
	w.hold = func(hctx context.Context) error {
		select {
		case <-done:
		case <-hctx.Done():
			if cause := context.Cause(hctx); !errors.Is(cause, errBeginLost) {
				// The budget ran out (or the caller left) before the row was durable: nothing
				// was prepared, and the request aborts as one whose time ran out anywhere else
				// in phase 1 (abortable), not as the coordinator's own fault.
				return &Failure{Participant: ParticipantCoordinator, Class: ClassAbortable,
					Err: fmt.Errorf("the time budget ran out while the PREPARE waited for the transaction's row to be logged; nothing was prepared: %w", cause)}
			}
			return errBeginLost
		}
		if !b.run {
			return errBeginLost
		}
		return nil
	}
	ph, st := c.step(pctx, PhasePhase1, SpanPhase1)
	err = c.phase1(ph, w, w.t.OnePhase, true)
	st.end(err)
	<-done
	w.hold = nil
	if !b.run {
		c.dropKafka(w)
		return b.t, false, b.err
	}
	stored := b.stored
	stored.SQL, stored.Kafka, stored.KafkaOffsets = w.t.SQL, w.t.Kafka, w.t.KafkaOffsets
	w.t = stored
	t, err = c.afterPhase1(ctx, w, err)
	return t, true, err
}

// dropKafka aborts the Kafka transaction of a request whose row was never logged and returns
// its id to the pool: no row names it, and nothing can commit its records (I2). An abort that
// fails leaves the producer to be recreated before reuse, whose InitProducerId aborts it.
func (c *Coordinator) dropKafka(w *work) {
	if w.ktx == nil {
		return
	}
	ctx, cancel := context.WithTimeout(w.traced(context.Background()), kafkaAbortTimeout)
	defer cancel()
	c.abortKafka(ctx, w)
	w.ktx.Release(true)
	w.ktx = nil
}
