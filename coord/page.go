package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// C1: a resolver decides prepared rows by the page. Rules.Resolve takes one row through claim,
// decision, phase 2 and final write, four to five round trips of the log and the participants
// per row. After an outage a resolver finds thousands of prepared rows, and many of them are the
// members of one shared Kafka transaction (docs/batching.md) and share SQL gids. ResolvePage
// applies the same rules to many rows with fewer writes:
//
//   - Claim before act (I9): every row is claimed in one statement (Log.ClaimMany), each row its
//     own compare-and-set on what the resolver read; the claim returns the row as it is now, and
//     only claimed rows are acted on.
//   - Resume by the stored ids (I5): one EndTxn(commit) per distinct stored (transactionalId,
//     producerId, epoch). The members of one Kafka transaction have the same ids, so one answer
//     is each member's answer: a member's own EndTxn would be a retry of the same request.
//   - Phase 2 follows the decision (I4): every distinct SQL gid of the committed rows once, in
//     one round trip per database (CommitAll); one write logs the committed rows (CommittedBatch).
//   - Anything else goes the one-row way (Finish, idempotent): a Kafka answer other than commit
//     (aborted, fenced: the oracle), a gid that did not commit here, a row without Kafka ids.
//     An unclear answer (broker down) decides nothing: every member is retried later.

// Resolved is what became of one row of a page.
type Resolved struct {
	T     *txntype.Transaction
	State txntype.State // the final state logged, when Err is nil
	// Err matching ErrMovedOn: someone else claimed or finished the row first, nothing was
	// touched for it; any other: this attempt failed and the row is to be tried again.
	Err error
}

// ResolvePage resolves prepared rows nobody runs, claimed for by (C1): at most parallelism
// Kafka transactions are decided at once. Rows not in state prepared are refused with an error
// (the caller sends them to Resolve). The result has one entry per row, in any order.
func (r Rules) ResolvePage(ctx context.Context, ts []*txntype.Transaction, by txntype.Fence, parallelism int) []Resolved {
	out := make([]Resolved, 0, len(ts))
	var page []*txntype.Transaction
	for _, t := range ts {
		if t.State != txntype.StatePrepared {
			out = append(out, Resolved{T: t, Err: fmt.Errorf("%s is %s, not prepared: not a page's row", t.GID, t.State)})
			continue
		}
		page = append(page, t)
	}
	if len(page) == 0 {
		return out
	}
	cctx, span := startSpan(ctx, SpanLogClaim)
	claimed, err := r.Log.ClaimMany(cctx, page, by)
	EndSpan(span, err)
	if err != nil {
		for _, t := range page {
			out = append(out, Resolved{T: t, Err: err})
		}
		return out
	}
	got := make(map[string]bool, len(claimed))
	for _, t := range claimed {
		got[t.GID] = true
	}
	for _, t := range page {
		if !got[t.GID] {
			out = append(out, Resolved{T: t, Err: fmt.Errorf("%s was not claimed: %w", t.GID, txntype.ErrMovedOn)})
		}
	}

	// One EndTxn per Kafka transaction, at most parallelism at once.
	var (
		mu        sync.Mutex
		committed []*txntype.Transaction // Kafka committed: phase 2 of every gid
		alone     []*txntype.Transaction // the one-row way
	)
	sem := make(chan struct{}, max(parallelism, 1))
	var wg sync.WaitGroup
	for _, mates := range Mates(claimed) {
		if k := mates[0].Kafka; k == nil || k.TransactionalID == "" || r.Kafka == nil {
			mu.Lock()
			alone = append(alone, mates...)
			mu.Unlock()
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := r.endTxn(ctx, mates[0].Kafka.KafkaIDs)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				committed = append(committed, mates...)
			case errors.Is(err, txntype.ErrKafkaAborted) || txntype.AsFailure(err).Class == txntype.ClassFenced:
				alone = append(alone, mates...) // decided, but not commit: each row's own rule
			default:
				for _, t := range mates { // unclear: nothing decided, try later
					out = append(out, Resolved{T: t, Err: err})
				}
			}
		})
	}
	wg.Wait()

	if len(committed) > 0 {
		pctx, span := startSpan(ctx, SpanSQLPhase2)
		ok := CommitAll(pctx, r.SQL, committed)
		EndSpan(span, nil)
		var both []*txntype.Transaction
		for i, t := range committed {
			if ok[i] {
				both = append(both, t)
			} else {
				alone = append(alone, t) // its gid's outcome is the one-row way's (marker, mixed)
			}
		}
		out = append(out, r.logCommitted(ctx, both)...)
	}

	// The one-row way, after the claim: its decision and phase 2 repeat idempotently.
	for _, t := range alone {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			to, err := r.Finish(ctx, t, nil)
			mu.Lock()
			defer mu.Unlock()
			out = append(out, Resolved{T: t, State: to, Err: err})
		})
	}
	wg.Wait()
	return out
}

// endTxn is resumePrepared's EndTxn(commit) by the stored ids, traced.
func (r Rules) endTxn(ctx context.Context, ids txntype.KafkaIDs) error {
	ectx, span := startSpan(ctx, SpanEndTxn)
	kafkaAttrs(span, ids)
	err := r.Kafka.EndTxn(ectx, ids, true)
	switch {
	case err == nil && span.IsRecording():
		span.SetAttributes(AttrDecision.String(decision(true)))
	case errors.Is(err, txntype.ErrKafkaAborted) && span.IsRecording():
		span.SetAttributes(AttrDecision.String(decision(false)))
	}
	EndSpan(span, err)
	return err
}

// logCommitted logs rows committed on every participant in one write, each row its own
// compare-and-set; a row the write left out moved on (a takeover fenced this resolver), and a
// failed write leaves every row prepared, to be resolved again (idempotently).
func (r Rules) logCommitted(ctx context.Context, ts []*txntype.Transaction) []Resolved {
	if len(ts) == 0 {
		return nil
	}
	fctx, span := startSpan(ctx, SpanLogFinal)
	if span.IsRecording() {
		span.SetAttributes(AttrState.String(string(txntype.StateCommitted)))
	}
	done, err := r.Log.CommittedBatch(fctx, ts, time.Time{})
	EndSpan(span, err)
	out := make([]Resolved, len(ts))
	for i, t := range ts {
		switch {
		case err != nil:
			out[i] = Resolved{T: t, Err: err}
		case done[i]:
			out[i] = Resolved{T: t, State: txntype.StateCommitted}
		default:
			out[i] = Resolved{T: t, Err: fmt.Errorf("%s: final write: %w", t.GID, txntype.ErrMovedOn)}
		}
	}
	return out
}

// Mates groups the rows logged prepared with the same Kafka ids (the members of one shared Kafka
// transaction, docs/batching.md) in their order of first appearance; every other row is a group
// of its own.
func Mates(ts []*txntype.Transaction) [][]*txntype.Transaction {
	var groups [][]*txntype.Transaction
	index := map[txntype.KafkaIDs]int{}
	for _, t := range ts {
		if t.State == txntype.StatePrepared && t.Kafka != nil && t.Kafka.TransactionalID != "" {
			if i, ok := index[t.Kafka.KafkaIDs]; ok {
				groups[i] = append(groups[i], t)
				continue
			}
			index[t.Kafka.KafkaIDs] = len(groups)
		}
		groups = append(groups, []*txntype.Transaction{t})
	}
	return groups
}

// CommitAll commits every SQL gid the transactions name, each distinct gid once (a shared one
// holds several), in one round trip per database (SQL.CommitPreparedMany); ok[i] says whether
// every gid of ts[i] committed. A transaction left out finishes on its own path, which repeats
// phase 2 idempotently (I4): a gid already gone is resolved there by its marker row.
func CommitAll(ctx context.Context, sql txntype.SQL, ts []*txntype.Transaction) (ok []bool) {
	ok = make([]bool, len(ts))
	gids := map[string][]string{}
	owner := map[string][][]int{} // per database, the transactions of each gid (several: a shared one)
	seen := map[string]int{}      // sql gid → its index in gids[database]
	for i, t := range ts {
		ok[i] = true
		for _, g := range t.SQLGIDs {
			j, dup := seen[g.GID]
			if !dup {
				j = len(gids[g.Database])
				seen[g.GID] = j
				gids[g.Database] = append(gids[g.Database], g.GID)
				owner[g.Database] = append(owner[g.Database], nil)
			}
			owner[g.Database][j] = append(owner[g.Database][j], i)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for db := range gids {
		// A COMMIT PREPARED waits for its WAL flush: one connection per chunk lets the server
		// flush many at once (a page of a recovery pass holds hundreds; a batch, one chunk).
		for from := 0; from < len(gids[db]); from += commitChunk {
			to := min(from+commitChunk, len(gids[db]))
			wg.Go(func() {
				errs := sql.CommitPreparedMany(ctx, db, gids[db][from:to])
				mu.Lock()
				defer mu.Unlock()
				for j, err := range errs {
					if err != nil {
						for _, i := range owner[db][from+j] {
							ok[i] = false
						}
					}
				}
			})
		}
	}
	wg.Wait()
	return ok
}

// commitChunk is the most gids CommitAll sends on one connection.
const commitChunk = 32
