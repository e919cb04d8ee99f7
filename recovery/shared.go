package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/txntype"
)

// Shared PostgreSQL transactions of batches (coord/sharedsql.go): one gid holds several
// requests' work, and the log names it only from the batch's prepared write on, which
// registers it with its members.

// sharedOrphans applies S3 to the shared transactions among a database's prepared gids and
// removes them from prepared (the rest are the plain orphan rules'):
//
//   - in flight in this process, or another instance's and younger than orphanMinAge: left
//     alone (the batch may still be on its way to its prepared write);
//   - registered with members: it follows them, committed when every member is committed,
//     rolled back when every member is aborted; otherwise the members' resolution finishes it;
//   - not registered: a tombstone is written first, which refuses a late prepared write of its
//     batch, and only then is it rolled back (claim before act). When the tombstone finds a
//     registration instead, the members decide.
//
// Every shared gid leaves prepared before anything is read, whatever happens next: a shared gid
// has no log row of its own, so the plain rule ("no row: roll back") would roll back one whose
// members are logged prepared, committed in Kafka (found by TestNetFaultPostgres: the
// registrations' read failed on a cut connection, and the gid fell through to that rule).
func (l *Loop) sharedOrphans(ctx context.Context, db string, prepared map[string]time.Duration, st *Stats) error {
	ages := map[string]time.Duration{}
	var gids []string
	for g, age := range prepared {
		if txntype.IsSharedGID(l.cfg.GIDPrefix, g) {
			gids = append(gids, g)
			ages[g] = age
			delete(prepared, g)
		}
	}
	if len(gids) == 0 {
		return nil
	}
	regs, err := l.log.SharedGIDs(ctx, gids)
	if err != nil {
		return fmt.Errorf("shared transactions on %s left as they are: %w", db, err)
	}
	var errs error
	for _, g := range gids {
		age := ages[g]
		if l.SharedYoung(g, age) {
			continue
		}
		reg, ok := regs[g]
		if !ok {
			if reg, err = l.log.TombstoneShared(ctx, g); err != nil {
				errs = errors.Join(errs, err)
				continue
			}
		}
		commit, decided, err := l.SharedDecision(ctx, reg.Members)
		if err != nil || !decided {
			errs = errors.Join(errs, err)
			continue
		}
		if commit {
			err = l.sql.CommitPrepared(ctx, db, g)
		} else {
			l.cfg.Logger.Warn("rolling back a shared prepared transaction", "database", db, "gid", g,
				"members", len(reg.Members))
			if err = l.sql.RollbackPrepared(ctx, db, g); err == nil && len(reg.Members) == 0 {
				st.Orphans++
			}
		}
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("shared transaction %s on %s: %w", g, db, err))
		}
	}
	return errs
}

// SharedYoung reports whether an unnamed shared gid may still belong to a live batch (S3): one of
// this process in flight, or, for another instance's, one younger than orphanAge. This
// instance's own gid that no batch of this process runs has no live batch: another process of
// the same instance would hold its lock, and its late prepared write meets the tombstone.
func (l *Loop) SharedYoung(g string, age time.Duration) bool {
	if l.coord.InFlight(globalGID(g)) {
		return true
	}
	return txntype.SharedGIDInstance(l.cfg.GIDPrefix, g) != l.cfg.Instance && age < l.orphanAge
}

// SharedDecision is how a shared transaction with these members ends, once known: no members
// (a tombstone): rolled back; every member committed: committed; every member aborted: rolled
// back. Anything else is left to the members' own resolution (decided=false).
func (l *Loop) SharedDecision(ctx context.Context, members []string) (commit, decided bool, err error) {
	if len(members) == 0 {
		return false, true, nil
	}
	states, err := l.log.States(ctx, members)
	if err != nil {
		return false, false, err
	}
	committed, aborted := 0, 0
	for _, m := range members {
		switch states[m] {
		case txntype.StateCommitted:
			committed++
		case txntype.StateAborted:
			aborted++
		}
	}
	switch len(members) {
	case committed:
		return true, true, nil
	case aborted:
		return false, true, nil
	}
	return false, false, nil
}

// sharedMarkers applies S4 to the shared transactions among a database's old markers and removes
// them from gids: a shared transaction's marker is deleted only when every member its
// registration names is committed or aborted (until then a member's idempotent COMMIT PREPARED
// may still need it to learn that the gid committed), and its registration goes with it. A marker
// whose registration is gone is deleted too: the registration went only once every member was
// final.
func (l *Loop) sharedMarkers(ctx context.Context, gids []string) (del, rest []string, err error) {
	var shared []string
	for _, g := range gids {
		if txntype.IsSharedGID(l.cfg.GIDPrefix, g) {
			shared = append(shared, g)
		} else {
			rest = append(rest, g)
		}
	}
	if len(shared) == 0 {
		return nil, rest, nil
	}
	regs, err := l.log.SharedGIDs(ctx, shared)
	if err != nil {
		return nil, rest, err
	}
	for _, g := range shared {
		reg, ok := regs[g]
		if !ok {
			del = append(del, g)
			continue
		}
		if commit, decided, err := l.SharedDecision(ctx, reg.Members); err == nil && decided && commit {
			del = append(del, g)
		}
	}
	return del, rest, nil
}
