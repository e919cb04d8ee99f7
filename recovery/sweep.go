package recovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// orphanMinAge protects a gid whose row was just reset for a retry from being taken for a
// leftover of its earlier, final attempt.
const orphanMinAge = 30 * time.Second

// orphans (I6): prepared gids with this coordinator's prefix and no log row are rolled back;
// leftovers of transactions whose final state is logged follow that state. Gids of transactions
// that are not final belong to resolve (or to a live request) and are left alone.
func (l *Loop) orphans(ctx context.Context, st *Stats) error {
	var errs error
	for _, db := range l.sql.Names() {
		prepared, err := l.sql.PreparedGIDs(ctx, db, l.cfg.GIDPrefix+"_")
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		if err := l.sharedOrphans(ctx, db, prepared, st); err != nil {
			errs = errors.Join(errs, err)
		}
		if len(prepared) == 0 {
			continue
		}
		globals := make([]string, 0, len(prepared))
		for g := range prepared {
			globals = append(globals, globalGID(g))
		}
		states, err := l.log.States(ctx, globals)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		for g, age := range prepared {
			state, known := states[globalGID(g)]
			switch {
			case !known:
				l.cfg.Logger.Warn("rolling back orphan prepared transaction (no log row)", "database", db, "gid", g)
				err = l.sql.RollbackPrepared(ctx, db, g)
				if err == nil {
					st.Orphans++
				}
			case state == txntype.StateCommitted && age > l.orphanAge:
				// Only the gid the row names as where its work is follows it: a stray own gid of
				// a row committed on a shared transaction would be a second copy of its work,
				// without its records (the model's finding S-F6).
				named, nerr := l.log.NamesSQLGID(ctx, globalGID(g), g)
				switch {
				case nerr != nil:
					err = nerr
				case named:
					err = l.sql.CommitPrepared(ctx, db, g)
				default:
					l.cfg.Logger.Warn("rolling back a prepared gid its committed row does not name", "database", db, "gid", g)
					err = l.sql.RollbackPrepared(ctx, db, g)
				}
			case state == txntype.StateAborted && age > l.orphanAge:
				err = l.sql.RollbackPrepared(ctx, db, g)
			default:
				continue
			}
			if err != nil {
				errs = errors.Join(errs, fmt.Errorf("orphan %s on %s: %w", g, db, err))
			}
		}
	}
	return errs
}

// sweepMarkers deletes marker rows that no longer prove anything: those of this coordinator's
// transactions whose final state, committed or aborted, is durable in the log. A marker of a
// row not final (its outcome may still be read from it, I4), of a heuristic row (evidence) or
// of no row of this log (not ours to judge) stays. Fencing markers stay while a transaction
// older than them runs (sqltxn.OldMarkers).
func (l *Loop) sweepMarkers(ctx context.Context, st *Stats) error {
	var errs error
	for _, db := range l.sql.Names() {
		gids, err := l.sql.OldMarkers(ctx, db, l.cfg.GIDPrefix+"_", l.cfg.MarkerAge, 1000)
		if err != nil || len(gids) == 0 {
			errs = errors.Join(errs, err)
			continue
		}
		shared, gids, err := l.sharedMarkers(ctx, gids)
		if err != nil {
			errs = errors.Join(errs, err)
		}
		if len(shared) > 0 {
			if err := l.sql.DeleteMarkers(ctx, db, shared); err != nil {
				errs = errors.Join(errs, err)
			} else {
				st.Markers += len(shared)
				if _, err := l.log.DeleteShared(ctx, shared, l.cfg.MarkerAge); err != nil {
					errs = errors.Join(errs, err)
				}
			}
		}
		if len(gids) == 0 {
			continue
		}
		globals := make([]string, len(gids))
		for i, g := range gids {
			globals[i] = globalGID(g)
		}
		states, err := l.log.States(ctx, globals)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		var del []string
		for _, g := range gids {
			if s, ok := states[globalGID(g)]; ok && (s == txntype.StateCommitted || s == txntype.StateAborted) {
				del = append(del, g)
			}
		}
		if len(del) == 0 {
			continue
		}
		if err := l.sql.DeleteMarkers(ctx, db, del); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		st.Markers += len(del)
	}
	// Registrations and tombstones that protect nothing any more (every member final, or a
	// tombstone once no active row is older than it, so no late prepared write can land).
	if _, err := l.log.DeleteShared(ctx, nil, l.cfg.MarkerAge); err != nil {
		errs = errors.Join(errs, err)
	}
	return errs
}

// globalGID strips the "@database" suffix of a SQL gid.
func globalGID(sqlGID string) string {
	if i := strings.LastIndexByte(sqlGID, '@'); i >= 0 {
		return sqlGID[:i]
	}
	return sqlGID
}

// reinitFor re-initialises a taken-over instance's transactional ids, which aborts whatever they
// left open, only while this takeover still holds the instance: its lock's session answers, the
// instance's epoch is still the one the takeover set, and the instance's row stays locked until
// the ids are done, so the instance cannot claim its lock again, lease an id and log prepared
// in between (found by the model, model/README.md: a takeover whose session was lost would
// otherwise abort the prepared transaction of the instance that had come back; I1, I8).
func (l *Loop) reinitFor(ctx context.Context, o *Owner, instance string, ids []string) error {
	tx, err := o.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("takeover of %s: the lock's session is gone: %w", instance, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := txlog.HoldEpoch(ctx, tx, instance, o.Epoch()); err != nil {
		return fmt.Errorf("takeover of %s abandoned before re-initialising its ids: %w", instance, err)
	}
	return l.kafka.Reinit(ctx, ids)
}

// takeover (I8): an instance silent for longer than the lease whose lock is free is dead (or
// alive without its lock). Its lock is taken on a connection of its own and its epoch bumped
// (LockFor), so that a process still running under that id writes nothing more; then its
// in-doubt transactions are claimed and resolved here (active ones only once older than
// TakeoverGuard), then its transactional ids are re-initialised (aborting what it left open).
// Holding its lock meanwhile keeps it from restarting halfway.
func (l *Loop) takeover(ctx context.Context, st *Stats) error {
	if l.cfg.DSN == "" {
		return nil
	}
	if _, err := l.own.Fence(); err != nil {
		return nil // not while this instance's own lock is lost
	}
	others, err := l.log.Instances(ctx, l.cfg.Instance)
	if err != nil {
		return err
	}
	var errs error
	for _, in := range others {
		if in.Silent < l.cfg.Lease {
			continue
		}
		o, free, err := LockFor(ctx, l.cfg.DSN, in.ID)
		if err != nil || !free {
			errs = errors.Join(errs, err)
			continue
		}
		err = l.takeOver(ctx, o, in.ID, in.TxnIDPrefix, in.PoolSize, st)
		o.Close(context.WithoutCancel(ctx))
		errs = errors.Join(errs, err)
	}
	return errs
}

func (l *Loop) takeOver(ctx context.Context, o *Owner, instance, prefix string, poolSize int, st *Stats) error {
	before := st.Resolved
	if err := l.resolveDue(ctx, instance, l.cfg.TakeoverGuard, st); err != nil {
		return err
	}
	if l.kafka != nil && prefix != "" {
		var ids []string
		for n := range poolSize {
			id := prefix + "-" + instance + "-" + fmt.Sprint(n)
			if busy, err := l.log.TransactionalIDInDoubt(ctx, id); err != nil || busy {
				continue // still in doubt: re-initialising would abort it (I1)
			}
			ids = append(ids, id)
		}
		if err := l.reinitFor(ctx, o, instance, ids); err != nil {
			return err
		}
	}
	st.TakenOver++
	l.cfg.Logger.Warn("took over a dead instance", "dead_instance", instance, "resolved", st.Resolved-before)
	return nil
}
