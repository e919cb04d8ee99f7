package recovery

import (
	"context"
	"errors"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// resolvePage resolves a page's prepared rows together (C1, coord.Rules.ResolvePage): one claim
// for all of them, one EndTxn per Kafka transaction (the members of a shared one are decided
// by one answer), every SQL gid once, one final write. A row the page could not finish is
// recorded as a failed attempt and retried after backoff, as a row resolved alone is. own: the
// rows are this instance's, whose transactional ids go back to its pool.
func (l *Loop) resolvePage(ctx context.Context, ts []*txntype.Transaction, own bool, st *Stats) {
	if len(ts) == 0 {
		return
	}
	by, err := l.own.Fence()
	if err != nil {
		return // nothing can be claimed without the instance lock; the next pass tries again
	}
	ctx, span := coord.StartSpan(ctx, SpanResolvePage)
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	results := l.rules().ResolvePage(rctx, ts, by, l.cfg.Parallelism)
	cancel()
	var resolved, failed int
	ids := map[string]bool{} // the pool ids the page's resolved rows held: each released once
	for _, r := range results {
		_, rs := coord.StartSpan(ctx, SpanResolve)
		coord.TransactionAttrs(rs, r.T)
		if rs.IsRecording() {
			rs.SetAttributes(coord.AttrState.String(string(txntype.StatePrepared))) // as it was found
		}
		endResolve(rs, r.State, r.Err)
		switch {
		case errors.Is(r.Err, errMovedOn):
		case r.Err != nil:
			_ = l.failed(ctx, r.T, r.Err)
			failed++
		default:
			l.cfg.Logger.Info("in-doubt transaction resolved", "gid", r.T.GID, "state", r.State)
			if own {
				if id := l.idOf(r.T); id != "" {
					ids[id] = true
				}
			}
			resolved++
		}
	}
	for id := range ids { // I1: the rows' final states are durable
		l.releaseID(ctx, id)
	}
	st.Resolved += resolved
	st.Failed += failed
	if span.IsRecording() {
		span.SetAttributes(AttrResolved.Int(resolved), AttrFailed.Int(failed))
	}
	coord.EndSpan(span, nil)
}
