package coord

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// The steps every request path is made of (path.go): its Begin, its phase 1 and each side's
// part of it, the EndTxn that decides, and phase 2.

// begun is the outcome of a request's Begin (step 1): run, the row is fresh and the request's
// to run (stored is the row as logged); otherwise t and err are the request's answer, and
// nothing of it may be prepared.
type begun struct {
	run    bool
	stored *txntype.Transaction
	t      *txntype.Transaction
	err    error
}

// begin logs w's row active with its gids, before any participant sees the request (I5, I6:
// a prepared gid without a row is an orphan, rolled back at once); work.t is the stored row.
func (c *Coordinator) begin(ctx context.Context, w *work, budget time.Duration) begun {
	b := c.logBegin(ctx, w.t, budget)
	if b.run {
		w.t = b.stored
	}
	return b
}

// logBegin logs t's row active with its gids.
func (c *Coordinator) logBegin(ctx context.Context, t *txntype.Transaction, budget time.Duration) begun {
	bctx, st := c.step(ctx, PhaseLogBegin, SpanLogBegin)
	stored, created, err := c.log.Begin(bctx, t)
	st.end(err)
	return beginAnswer(ctx, t, stored, created, err, budget)
}

// beginAnswer is what a Begin's answer means for the request (logBegin).
func beginAnswer(ctx context.Context, t, stored *txntype.Transaction, created bool, err error, budget time.Duration) begun {
	if err != nil {
		if !beginUndone(err) {
			// The insert was sent and its answer lost: the row may exist (active, owned by this
			// instance's epoch, which recovery presumes aborted once this request has left
			// flight). Not "safe to retry": the outcome is unknown until the row, or its
			// absence, says so.
			return begun{err: &txntype.OutcomeError{Sentinel: txntype.ErrInDoubt, Txn: unlogged(t), Cause: fmt.Errorf(
				"log begin: the row's insert was sent and its answer lost; the row may exist: %w", err)}}
		}
		if errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The request's own budget was too small to log it: the caller's choice, not an
			// outage, and nothing of the request ran (the insert never went out).
			return begun{err: txntype.Invalid("timeout_ms", fmt.Sprintf("the time budget of %s ran out before the transaction was logged; nothing was run: send it again with a larger timeout_ms", budget))}
		}
		return begun{err: &txntype.OutcomeError{Sentinel: txntype.ErrUnavailable, Cause: fmt.Errorf("log begin: %w", err)}}
	}
	if !created {
		if !bytes.Equal(stored.Digest, t.Digest) {
			return begun{err: txntype.ErrIDConflict}
		}
		t, err := Answer(stored, nil)
		return begun{t: t, err: err}
	}
	return begun{run: true, stored: stored}
}

// beginUndone reports a Begin failure that proves no row was written by it: the insert never
// reached the log's server (ErrLogUnsent), the server refused it (ErrLogRefused), or the
// instance's epoch no longer holds (ErrNotOwner, the fenced insert wrote nothing). Only then is
// the request safe to send again (503); any other failure may have logged the row.
func beginUndone(err error) bool {
	return errors.Is(err, txntype.ErrLogUnsent) || errors.Is(err, txntype.ErrLogRefused) || errors.Is(err, txntype.ErrNotOwner)
}

// phase1 runs the work and the prepare of every participant (the Kafka side only withKafka);
// onePhase commits the single database directly instead of preparing it.
func (c *Coordinator) phase1(ctx context.Context, w *work, onePhase, withKafka bool) error {
	// A SQL failure stops the Kafka side at once (its abort is authoritative). A Kafka failure
	// does not cancel the SQL side: a PREPARE cut off by a cancel may still complete on the
	// server after we looked for it, leaving an orphan; the SQL round trip is short, so it is
	// left to finish and then rolled back.
	kctx, cancelKafka := context.WithCancelCause(ctx)
	defer cancelKafka(nil)
	var (
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
	}

	// P2: records that name a statement's result are produced once the statements ran.
	derived := withKafka && len(w.req.Kafka) > 0 && w.req.Derived()
	if withKafka && (len(w.req.Kafka) > 0 || w.req.KafkaOffsets != nil) && !derived {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.kafkaPhase1(kctx, w); err != nil {
				fail(err)
			}
		}()
	}
	results := make([]txntype.SQLResult, len(w.req.SQL))
	dbs := w.req.Databases()
	w.expectSQL(len(dbs))
	for _, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// O4c: a chained request's statements run once its predecessor's are prepared.
			err := c.awaitPredecessor(ctx, w, stageSQLPrepared)
			if err == nil {
				err = c.sqlPhase1(ctx, w, db, onePhase, results)
			}
			if err != nil {
				fail(err)
				cancelKafka(err)
				return
			}
			w.markSQLPrepared()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	w.t.SQL = results
	if derived {
		if err := c.materialize(ctx, w); err != nil {
			return err
		}
		return c.kafkaPhase1(ctx, w)
	}
	return nil
}

func (c *Coordinator) kafkaPhase1(ctx context.Context, w *work) (err error) {
	ctx, st := c.step(ctx, PhaseKafka, SpanKafka)
	defer func() { st.end(err) }()
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrRecords.Int(len(w.req.Kafka)))
	}
	ktx, err := c.kafka.Acquire(ctx)
	c.observeSince(PhasePoolAcquire, st.start)
	if err != nil {
		return err
	}
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrTransactionalID.String(ktx.TransactionalID()))
	}
	w.mu.Lock()
	w.ktx = ktx
	w.mu.Unlock()
	oc := w.req.KafkaOffsets
	recs := w.req.Kafka
	if oc != nil {
		recs = nil // produced once the offsets are in (below)
	}
	if err := ktx.Begin(ctx, recs); err != nil {
		return err
	}
	if oc != nil {
		// O1: the offsets ride in this transaction, and a refused commit fails phase 1, so
		// nothing of the request can commit without them. They go first: a fenced member
		// produces nothing, and under transactions v2 the records' implicit partition adds do
		// not race the offsets' own (a race the broker answers CONCURRENT_TRANSACTIONS, which
		// held the flush for seconds).
		// O4a: a chained request's offsets go after its predecessor's.
		if err := c.awaitPredecessor(ctx, w, stageAppended); err != nil {
			return err
		}
		if err := ktx.CommitOffsets(ctx, oc); err != nil {
			return err
		}
		w.markAppended()
		// Logged with prepared (I2), with the ids of the transaction that commits them.
		w.t.KafkaOffsets = oc
		if len(w.req.Kafka) > 0 {
			if err := ktx.Add(ctx, w.req.Kafka); err != nil {
				return err
			}
		}
	}
	ks, err := ktx.Prepare(ctx)
	if err != nil {
		return err
	}
	c.fault(txntype.FaultAfterKafkaFlush)
	if ks.Records == nil {
		ks.Records = []txntype.RecordOffset{} // offsets only: no record, an empty list (never null)
	}
	ks.PreparedState = ks.KafkaIDs.PreparedState()
	w.t.Kafka = &ks
	kafkaAttrs(st.span, ks.KafkaIDs)
	return nil
}

func (c *Coordinator) sqlPhase1(ctx context.Context, w *work, db string, onePhase bool, results []txntype.SQLResult) error {
	var stmts []txntype.Statement
	var idx []int
	for i, s := range w.req.SQL {
		if s.Database == db {
			stmts = append(stmts, s)
			idx = append(idx, i)
		}
	}
	if !onePhase {
		w.mu.Lock()
		w.prepared = append(w.prepared, db)
		w.mu.Unlock()
	}
	sctx, st := c.step(ctx, PhaseSQL, SpanSQL)
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrDatabase.String(db), AttrStatements.Int(len(stmts)))
	}
	res, err := c.sql.Run(sctx, db, stmts, c.sqlGID(w.t.GID, db), onePhase, func() { c.fault(txntype.FaultAfterSQLWork) })
	st.end(err)
	if err != nil {
		return err
	}
	if !onePhase {
		c.fault(txntype.FaultAfterPrepare)
	}
	for j, i := range idx {
		results[i] = res[j]
	}
	return nil
}

// decide sends EndTxn(commit) and follows Kafka's answer. An unclear answer is retried with a
// raw EndTxn by the stored ids until the caller's budget runs out; then the outcome is left to
// recovery (the error return).
func (c *Coordinator) decide(ctx, fctx context.Context, ktx txntype.KafkaTxn, ids txntype.KafkaIDs, gid string) (commit bool, cause, err error) {
	err = ktx.Commit(fctx)
	for backoff := 50 * time.Millisecond; ; backoff = min(backoff*2, time.Second) {
		switch {
		case err == nil:
			return true, nil, nil
		case errors.Is(err, txntype.ErrKafkaAborted):
			return false, err, nil
		}
		c.cfg.Logger.Warn("kafka commit outcome unknown; retrying EndTxn by ids",
			"gid", gid, "transactional_id", ids.TransactionalID, "error", err)
		select {
		case <-ctx.Done():
			return false, nil, fmt.Errorf("kafka commit outcome unknown: %w", err)
		case <-time.After(backoff):
		}
		err = c.kafka.EndTxn(fctx, ids, true)
	}
}

// phase2 commits or rolls back every prepared SQL transaction following the decision, then
// logs the final state (I4; the rules are finishSQL and mixedDetail, shared with recovery).
func (c *Coordinator) phase2(ctx context.Context, w *work, commit bool, cause error) ended {
	pctx, st := c.step(ctx, PhasePhase2, SpanPhase2)
	if st.span.IsRecording() {
		st.span.SetAttributes(AttrDecision.String(decision(commit)))
	}
	mixed, failed := finishSQL(pctx, c.sql, w.t.SQLGIDs, commit)
	st.end(failed)
	if failed == nil && len(mixed) == 0 && commit {
		c.fault(txntype.FaultAfterCommitPrepared)
	}
	switch {
	case len(mixed) > 0:
		w.t.Error = mixedDetail(commit, mixed)
		return c.finishWith(ctx, w, txntype.StateHeuristicMixed, nil, true)
	case failed != nil && commit && w.t.State != txntype.StateCommitting:
		// Kafka committed; SQL phase 2 is pending. committing tells recovery to finish it.
		if err := c.log.Transition(ctx, w.t, txntype.StateCommitting); err != nil {
			c.cfg.Logger.Error("log committing failed", "gid", w.t.GID, "error", err)
		}
		return c.inDoubt(w, fmt.Errorf("sql commit prepared: %w", failed))
	case failed != nil && commit:
		return c.inDoubt(w, fmt.Errorf("sql commit prepared: %w", failed))
	case failed != nil:
		return c.inDoubt(w, fmt.Errorf("sql rollback prepared: %w", failed))
	}
	if commit {
		return c.finish(w, txntype.StateCommitted, nil)
	}
	return c.finish(w, txntype.StateAborted, cause)
}
