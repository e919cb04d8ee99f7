package kafkatxn

import (
	"context"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EndTxn finishes an open transaction from its ids alone with a raw EndTxn request, routed by kgo
// to the transactional.id's coordinator. This is how a transaction is resumed when the
// producer's own EndTransaction had no clear answer, and after a crash. It never sends
// InitProducerId (which would abort the transaction and bump the epoch).
//
// Answers: nil when Kafka committed (commit=true) or aborted (commit=false); an error wrapping
// txntype.ErrKafkaAborted only when Kafka confirms that the transaction was aborted
// (confirmAbort); any other error when the outcome is still unknown.
func (p *Pool) EndTxn(ctx context.Context, ids txntype.KafkaIDs, commit bool) error {
	if p.endParked(ctx, ids, commit) {
		// A transaction that waited for its caller, ended through its own producer.
		return nil
	}
	backoff := 20 * time.Millisecond
	for {
		err := p.endTxnOnce(ctx, ids, commit)
		switch {
		case err == nil:
			return nil
		case commit && endTxnAbortAsked(err):
			// An instruction to abort, not an outcome: ask Kafka what became of it (I3).
			return p.confirmAbort(ctx, ids, err)
		case !endTxnRetriable(err):
			return classify(fmt.Errorf("end txn %s %s: %w", ids.TransactionalID, ids.PreparedState(), err))
		}
		select {
		case <-ctx.Done():
			return classify(fmt.Errorf("end txn %s %s: %w (last answer: %w)", ids.TransactionalID,
				ids.PreparedState(), context.Cause(ctx), err))
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

func (p *Pool) endTxnOnce(ctx context.Context, ids txntype.KafkaIDs, commit bool) error {
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID = ids.TransactionalID
	req.ProducerID = ids.ProducerID
	req.ProducerEpoch = ids.ProducerEpoch
	req.Commit = commit
	resp, err := req.RequestWith(ctx, p.ender())
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

// Kafka's transaction states (DescribeTransactions) that confirmAbort reads.
const (
	statePrepareCommit  = "PrepareCommit"
	stateCompleteCommit = "CompleteCommit"
	statePrepareAbort   = "PrepareAbort"
	stateCompleteAbort  = "CompleteAbort"
)

// confirmAbort decides what an EndTxn(commit) answer that asks for an abort (endTxnAbortAsked)
// means for the transaction ids names, from what Kafka's transaction coordinator reports about
// the id (DescribeTransactions). Evidence only: an abort is counted only when Kafka confirms it.
//
// On transactions v2 every end of a transaction bumps the epoch: the transaction that ran at
// epoch e ends at e+1 (Kafka's own timeout abort fences first, which may end it at e+2). No other
// transaction can have ended there while ours is in doubt, because its id is quarantined (I1).
//
//   - PrepareAbort/CompleteAbort, same producer id, epoch e+1 or e+2: aborted, confirmed
//     (txntype.ErrKafkaAborted);
//   - PrepareCommit/CompleteCommit, same producer id, epoch e+1: committed (nil);
//   - Ongoing at (producer id, e): still open, not decided: unknown, retriable;
//   - anything else (another producer id, a later epoch, Empty, unknown id; transactions v1,
//     where the epoch does not move): the id has moved on and the coordinator no longer
//     remembers this transaction: unknown, classified fenced, so that recovery reads the logged
//     records back (the outcome oracle, I7).
//
// A describe that fails leaves the outcome unknown (retriable).
func (p *Pool) confirmAbort(ctx context.Context, ids txntype.KafkaIDs, answer error) error {
	o, _, err := p.DescribeTransaction(ctx, ids.TransactionalID)
	if err != nil {
		return &txntype.Failure{Participant: txntype.ParticipantKafka, Class: txntype.ClassRetriable,
			Err: fmt.Errorf("%w (%s answered %w); describing the transaction failed: %w", errAbortUnconfirmed, ids.PreparedState(), answer, err)}
	}
	return abortEvidence(ids, o, answer)
}

// abortEvidence is confirmAbort's rule on what Kafka reported (o); see there.
func abortEvidence(ids txntype.KafkaIDs, o OpenTxn, answer error) error {
	seen := fmt.Sprintf("Kafka reports %s with producer %d epoch %d", orNone(o.State), o.ProducerID, o.ProducerEpoch)
	same := o.ProducerID == ids.ProducerID
	switch {
	case same && (o.State == statePrepareAbort || o.State == stateCompleteAbort) &&
		(o.ProducerEpoch == ids.ProducerEpoch+1 || o.ProducerEpoch == ids.ProducerEpoch+2):
		return classify(fmt.Errorf("%w: %s: EndTxn(commit) answered %w and %s", txntype.ErrKafkaAborted, ids.PreparedState(), answer, seen))
	case same && (o.State == statePrepareCommit || o.State == stateCompleteCommit) && o.ProducerEpoch == ids.ProducerEpoch+1:
		return nil
	case same && o.State == stateOngoing && o.ProducerEpoch == ids.ProducerEpoch:
		return &txntype.Failure{Participant: txntype.ParticipantKafka, Class: txntype.ClassRetriable,
			Err: fmt.Errorf("%w: %s: EndTxn(commit) answered %w, but %s: still open", errAbortUnconfirmed, ids.PreparedState(), answer, seen)}
	}
	return &txntype.Failure{Participant: txntype.ParticipantKafka, Class: txntype.ClassFenced,
		Err: fmt.Errorf("%w: %s: EndTxn(commit) answered %w, and %s: the id has moved on", errAbortUnconfirmed, ids.PreparedState(), answer, seen)}
}

func orNone(state string) string {
	if state == "" {
		return "no transaction"
	}
	return state
}
