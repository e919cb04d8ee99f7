package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kpgtx/coordinator/sqlpolicy"
	"github.com/kpgtx/coordinator/txntype"
)

// Shared SQL transactions (docs/batching.md section 12). Members of a batch whose statements
// all go to one database, and are all plain queries or data changes, share one PostgreSQL
// transaction with the batch's other members on that database: a savepoint each, one marker,
// one PREPARE TRANSACTION, one COMMIT PREPARED. The rules, each enforced here or where named:
//
//   - S1 (B1 for a shared transaction): a member's records ride in the batch's Kafka
//     transaction only when its work is in a prepared shared transaction: the leader produces
//     after PREPARE answered, and a member whose statement failed was rolled back to its
//     savepoint and runs alone (prepareShared).
//   - S2: the shared gid is fresh, never any request's own gid ('+' is not allowed in request
//     ids), and only the batch's prepared write names it in the log: it registers the gid with
//     its members in the same all-or-nothing write (txlog.Log.PreparedBatch).
//   - S3 (claim before act for an unnamed gid): the orphan sweep rolls back a shared gid that no
//     registration names only after a durable tombstone for it, which refuses a late prepared
//     write; never while this process runs its batch, nor while it is young
//     (recovery.Loop.orphans).
//   - S4 (I4 for a shared gid): its marker is deleted only when every member its registration
//     names is final (recovery.Loop.sweepMarkers).
//   - S5: a member runs again alone only when nothing of its work can still commit in the shared
//     transaction: it was rolled back to its savepoint, or the shared transaction was never
//     prepared, or its ROLLBACK PREPARED answered. Otherwise it is answered aborted (409, not
//     "safe to retry") and S3 rolls the orphan back.
//   - S6: nothing of one member's session reaches the next: RESET ALL, SET CONSTRAINTS ALL
//     IMMEDIATE and the enter statement after each member, a read-only mode refused by its
//     guard (sqltxn.Databases.RunShared), and only statements sqlpolicy.Shareable accepts share.
//   - S7: a member joins its batch while its row is logged, and gets no participant work before
//     that row is durable (joined.go, awaitBegins).

func (c *Coordinator) newSharedGID(database string) string {
	return txntype.NewSharedGID(c.cfg.GIDPrefix, c.cfg.Instance, database)
}

// sharesSQL says whether a member of a batch may run its SQL in a shared transaction: sharing
// is on, all its statements go to one database, and every one of them is shareable (S6).
func (c *Coordinator) sharesSQL(w *work) bool {
	if !c.cfg.Batch.ShareSQL || len(w.req.Databases()) != 1 {
		return false
	}
	if w.req.Derived() {
		// P2: its records are resolved from its own results before it joins, so its SQL is
		// prepared on its own first (B1), like a member whose statements cannot share.
		return false
	}
	for _, s := range w.req.SQL {
		if !sqlpolicy.Shareable(s.Statement) {
			return false
		}
	}
	return true
}

// sqlGroup is one shared PostgreSQL transaction of a batch.
type sqlGroup struct {
	txntype.SharedGID
	members []*member
}

// prepareShared runs the SQL phase of a sealed batch's members that joined without it: the
// members on a database with other such members in one shared transaction, a member alone on
// its database in its own. It returns the members whose SQL is prepared (with the members that
// joined prepared): the batch's riders. Every other member has its outcome set (rerun or fail).
// Each shared gid stays in flight, so the sweep leaves it alone, until release (S3).
func (c *Coordinator) prepareShared(ctx context.Context, members []*member) (riders []*member, groups []*sqlGroup) {
	byDB := map[string][]*member{}
	var order []string
	for _, m := range members {
		if !m.sqlShared {
			riders = append(riders, m)
			continue
		}
		db := m.w.req.SQL[0].Database
		if byDB[db] == nil {
			order = append(order, db)
		}
		byDB[db] = append(byDB[db], m)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, db := range order {
		ms := byDB[db]
		if len(ms) == 1 && ms[0].deferred {
			// S8: alone on its database it would prepare its own gid, which no row names yet
			// (an orphan the sweep rolls back at once): it runs alone, its row first.
			ms[0].out.rerun = true
			continue
		}
		if len(ms) == 1 {
			m := ms[0]
			wg.Go(func() {
				if err := c.phase1(m.w.traced(ctx), m.w, false, false); err != nil {
					m.out.fail = err
					return
				}
				mu.Lock()
				riders = append(riders, m)
				mu.Unlock()
			})
			continue
		}
		g := &sqlGroup{SharedGID: txntype.SharedGID{Database: db, GID: c.newSharedGID(db)}}
		c.inflight.Store(txntype.GlobalGID(g.GID), struct{}{})
		groups = append(groups, g)
		wg.Go(func() {
			ok := c.runGroup(ctx, g, ms)
			mu.Lock()
			riders = append(riders, ok...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return riders, groups
}

// sharedSQLBound bounds the SQL round trip of a shared transaction: one slow statement (a lock
// wait, a sleep) would hold every member and the batch's slot, so past the bound the shared
// transaction is given up and every member runs alone, within its own budget. A member's short
// budget does not bound it (that would let one impatient caller fail everyone's shared
// transaction): like the rest of the batch, such a member gets its answer late.
const sharedSQLBound = time.Second

// runGroup runs one shared transaction and returns its members, whose work it holds prepared.
func (c *Coordinator) runGroup(ctx context.Context, g *sqlGroup, ms []*member) []*member {
	ctx, cancel := context.WithTimeout(ctx, sharedSQLBound)
	defer cancel()
	sctx, st := c.step(ctx, PhaseSQL, SpanSQL)
	stmts := make([][]txntype.Statement, len(ms))
	for i, m := range ms {
		stmts[i] = m.w.req.SQL
	}
	run := c.sql.RunShared(sctx, g.Database, stmts, g.GID, func() { c.fault(txntype.FaultAfterSQLWork) })
	st.end(run.Err)
	if run.Err == nil {
		c.fault(txntype.FaultAfterPrepare)
		c.fault(txntype.FaultSharedAfterSQLPrepare)
		for i, m := range ms {
			if run.Excluded[i] != nil {
				// S5: rolled back to its savepoint, nothing of it is left: it runs alone and
				// gets its own answer there (the failure may have come from a batch mate's rows).
				m.out.rerun = true
				continue
			}
			m.w.t.SQL = run.Results[i]
			g.members = append(g.members, m)
			g.Members = append(g.Members, m.w.t.GID)
		}
		if len(g.members) > 0 {
			c.cfg.Observer.ObserveSQLShared(len(g.members))
			return g.members
		}
		run.Err = errors.New("every member of the shared transaction was left out")
	}
	c.cfg.Logger.Warn("shared sql transaction failed; its requests run alone",
		"database", g.Database, "gid", g.GID, "members", len(ms), "error", run.Err)
	rerr := c.rollbackGroup(ctx, g)
	if rerr == nil && errors.Is(run.Err, txntype.ErrPrepareMayLand) {
		// The rollback found nothing, but the PREPARE may land after it: nothing proves the
		// members' work gone, so they are not run again (S5, the model's S-F1).
		rerr = run.Err
	}
	for i, m := range ms {
		m.w.t.SQL = nil
		switch e := run.Excluded[i]; {
		case errors.Is(e, txntype.ErrConfinementBreach):
			m.out.fail = e
		case e != nil:
			m.out.rerun = true
		default:
			m.out.rerun, m.out.fail = groupLost(g, run.Err, rerr)
		}
	}
	g.members = nil
	return nil
}

// rollbackGroup rolls a shared transaction back (before the decision only, I3).
func (c *Coordinator) rollbackGroup(ctx context.Context, g *sqlGroup) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.FinishTimeout)
	defer cancel()
	err := c.sql.RollbackPrepared(rctx, g.Database, g.GID)
	if err != nil {
		c.cfg.Logger.Warn("sql rollback of a shared transaction failed; recovery rolls the orphan back",
			"database", g.Database, "gid", g.GID, "error", err)
	}
	return err
}

// groupLost is what a member of a shared transaction that failed before the decision does (S5):
// run again alone once the rollback answered, else be aborted without running again.
func groupLost(g *sqlGroup, cause, rollbackErr error) (rerun bool, fail error) {
	if rollbackErr == nil {
		return true, nil
	}
	return false, &txntype.Failure{Participant: "sql:" + g.Database, Class: txntype.ClassAbortable,
		Err: fmt.Errorf("the shared transaction %s failed (%v) and could not be rolled back yet; "+
			"nothing of it can commit, and recovery rolls it back: %w", g.GID, cause, rollbackErr)}
}

// abandonGroups rolls back the shared transactions of a batch that failed before its prepared
// write and sets what their members do (S5).
func (c *Coordinator) abandonGroups(ctx context.Context, groups []*sqlGroup, cause error) {
	for _, g := range groups {
		if len(g.members) == 0 {
			continue
		}
		rerr := c.rollbackGroup(ctx, g)
		for _, m := range g.members {
			m.w.t.SQL, m.w.t.Kafka = nil, nil
			m.out.rerun, m.out.fail = groupLost(g, cause, rerr)
		}
	}
}

// releaseGroups ends the batch's hold on its shared gids: from now on the sweep may judge them
// by the log (S3).
func (c *Coordinator) releaseGroups(groups []*sqlGroup) {
	for _, g := range groups {
		c.inflight.Delete(txntype.GlobalGID(g.GID))
	}
}

// inGroup is m's shared transaction, or nil.
func inGroup(groups []*sqlGroup, m *member) *sqlGroup {
	for _, g := range groups {
		for _, gm := range g.members {
			if gm == m {
				return g
			}
		}
	}
	return nil
}
