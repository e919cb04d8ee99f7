package coord_test

import (
	"context"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// Waiting is txlog's X1 write: Prepared's, with state waiting and decide_by.
func (l fakeLog) Waiting(ctx context.Context, t *txntype.Transaction, within, bound time.Duration) error {
	want := clone(t)
	return l.cas(ctx, "log.waiting", t, func(row *txntype.Transaction) {
		now := time.Now()
		by := now.Add(within)
		if limit := row.CreatedAt.Add(bound); !row.CreatedAt.IsZero() && limit.Before(by) {
			by = limit
		}
		row.State, row.Kafka, row.SQLGIDs, row.SQL = txntype.StateWaiting, want.Kafka, want.SQLGIDs, want.SQL
		row.DecideBy, row.PreparedAt = &by, &now
	})
}

// DecideWaiting is txlog's conditional decision write (X2-X4).
func (l fakeLog) DecideWaiting(ctx context.Context, gid string, d txntype.Decision) (*txntype.Transaction, error) {
	m := l.w.call(ctx, "log.decide_waiting")
	if err := refusal(m, "log.decide_waiting"); err != nil {
		return nil, err
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	row, ok := l.w.rows[gid]
	now := time.Now()
	reached := ok && row.DecideBy != nil && !now.Before(*row.DecideBy)
	if !ok || row.State != txntype.StateWaiting || (d.Deadline && !reached) || l.w.epochs[d.By.Instance] != d.By.Epoch {
		return nil, fmt.Errorf("log.decide_waiting %s: %w", gid, txntype.ErrMovedOn)
	}
	abort := func(msg string) {
		row.State = txntype.StateAborting
		row.Error = &txntype.ErrorDetail{Participant: txntype.ParticipantCoordinator, Class: txntype.ClassAbortable, Message: msg}
	}
	switch {
	case d.Commit && !reached && row.CallerPreparedState() == d.PreparedState:
		row.State = txntype.StatePrepared
		if row.Kafka == nil || row.Kafka.TransactionalID == "" {
			row.State = txntype.StateCommitting
		}
	case !d.Commit && !d.Deadline:
		abort(d.Reason)
	case reached:
		abort("no decision before decide_by: presumed abort")
	default:
		abort("the commit's prepared_state does not match")
	}
	row.Owner, row.OwnerEpoch = d.By.Instance, d.By.Epoch
	if m == failAfter {
		return nil, errInjected
	}
	return clone(row), nil
}
