package kafkatxn

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kpgtx/coordinator/coord"
)

// EndTxn finishes an open transaction from its ids alone with a raw EndTxn request, routed by kgo
// to the transactional.id's coordinator. This is how a transaction is resumed when the
// producer's own EndTransaction had no clear answer, and after a crash. It never sends
// InitProducerId (which would abort the transaction and bump the epoch).
//
// Answers: nil when Kafka committed (commit=true) or aborted (commit=false); an error wrapping
// coord.ErrKafkaAborted when a commit finds the transaction aborted; any other error when the
// outcome is still unknown.
func (p *Pool) EndTxn(ctx context.Context, ids coord.KafkaIDs, commit bool) error {
	backoff := 20 * time.Millisecond
	for {
		err := p.endTxnOnce(ctx, ids, commit)
		switch {
		case err == nil:
			return nil
		case commit && endTxnAborted(err):
			return classify(fmt.Errorf("%w: %s: %w", coord.ErrKafkaAborted, ids.PreparedState(), err))
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

func (p *Pool) endTxnOnce(ctx context.Context, ids coord.KafkaIDs, commit bool) error {
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID = ids.TransactionalID
	req.ProducerID = ids.ProducerID
	req.ProducerEpoch = ids.ProducerEpoch
	req.Commit = commit
	resp, err := req.RequestWith(ctx, p.admin)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}
