package coord

import (
	"context"

	"github.com/kpgtx/coordinator/txntype"
)

// D1: a request that asks for it (Request.Answer AnswerDecided) is answered at its decision.
//
// Once the decision to commit is durable, the outcome is fixed: with Kafka, EndTxn(commit)
// succeeded after the row was logged prepared with the ids (I2), and recovery resumes such a
// row by EndTxn by the stored ids, which Kafka answers committed, and then commits every gid
// (I5, I4); without Kafka (several databases), the committing row is the decision and recovery
// commits every gid. Nothing after that point aborts: phase 2 only follows the decision (I3,
// I4). So such a request is answered 200 there, with the state committing, and its phase 2 and
// its final write run behind the answer, as a committed answer's final write does (finals.go):
//
//   - the answer says "committing": its records are committed in Kafka (read_committed
//     consumers see them once Kafka wrote its markers), its rows are not yet visible in
//     PostgreSQL, for up to the phase 2 time (one COMMIT PREPARED round trip per database; at
//     most the finish bound, after which recovery commits them);
//   - it is counted as committed in the outcome metrics;
//   - the request stays in flight with its transactional id until its final write ended, and a
//     read of its id on this instance (Get, the same id sent again) waits for it and answers the
//     final state; another instance reads the row prepared or committing: in doubt (202),
//     never the other outcome;
//   - a phase 2 that fails leaves the row committing (or prepared) to recovery, which commits
//     it: the 200 never turns into an abort. A gid resolved by hand the other way ends
//     heuristic_mixed, as it would for any request.
//
// A one-phase request has no phase 2: its COMMIT is the decision, and it is answered committed
// as ever. An abort is answered when it is logged, as ever.

// answerDecided answers w at its decision to commit (the row's state committing, D1), and runs
// its phase 2 and final write behind the answer, which hold the hand-off.
func (c *Coordinator) answerDecided(w *work) ended {
	answer, p := c.decidedAnswer(w)
	c.behindAnswer(w, p)
	return ended{t: answer, handedOff: true}
}

// decidedAnswer is w's answer at its decision to commit (D1); from now on its final write, not
// the request, ends its time in flight (handOff).
func (c *Coordinator) decidedAnswer(w *work) (*txntype.Transaction, *pendingFinal) {
	a := *w.t
	a.State = txntype.StateCommitting
	p := c.handOff(w)
	c.cfg.Logger.Debug("transaction decided; its phase 2 follows", "gid", w.t.GID)
	return &a, p
}

// behindAnswer runs w's phase 2 and final write after its decided answer, then ends its time
// in flight.
func (c *Coordinator) behindAnswer(w *work, p *pendingFinal) {
	ctx, cancel := context.WithTimeout(w.traced(context.Background()), c.cfg.FinishTimeout)
	go func() {
		defer cancel()
		defer c.finalDone(w, p)
		c.fault(txntype.FaultDecidedBeforePhase2)
		// Its outcome is logged (committed, or left to recovery in doubt); the caller has had
		// its answer.
		_ = c.phase2(ctx, w, true, nil)
	}()
}
