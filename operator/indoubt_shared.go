package operator

import (
	"context"
	"strings"
	"time"

	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txntype"
)

// sharedInDoubt places the shared prepared transactions in the in-doubt view: one that names
// members listed there is shown with each of them (its work is theirs); one whose members are
// all final is a leftover the sweep finishes their way; one no registration names (or a
// tombstone) is an orphan the sweep rolls back, once it is neither in flight here nor young
// (S3). Others belong to members in flight or still young in another instance.
func (d *Desk) sharedInDoubt(ctx context.Context, now time.Time, prepared []sqltxn.PreparedXact, byGID map[string]*InDoubtEntry) ([]*InDoubtEntry, error) {
	if len(prepared) == 0 {
		return nil, nil
	}
	gids := make([]string, len(prepared))
	for i, p := range prepared {
		gids[i] = p.GID
	}
	regs, err := d.log.SharedGIDs(ctx, gids)
	if err != nil {
		return nil, err
	}
	var out []*InDoubtEntry
	for _, p := range prepared {
		global := globalGID(p.GID)
		reg := regs[p.GID]
		listed := false
		for _, m := range reg.Members {
			if e := byGID[m]; e != nil {
				e.addPostgres(p)
				listed = true
			}
		}
		if listed {
			continue
		}
		e := &InDoubtEntry{ID: global, GID: global, Key: global, Issue: IssueOrphan, Since: p.PreparedAt}
		if len(reg.Members) > 0 {
			commit, decided, err := d.loop.SharedDecision(ctx, reg.Members)
			if err != nil {
				return nil, err
			}
			if !decided {
				continue // its members are in flight, young elsewhere, or moved on meanwhile
			}
			e.Issue, e.State = IssueLeftover, txntype.StateAborted
			if commit {
				e.State = txntype.StateCommitted
			}
		} else if d.loop.SharedYoung(p.GID, now.Sub(p.PreparedAt)) {
			continue // its batch may still be on its way to its prepared write
		}
		e.addPostgres(p)
		out = append(out, e)
	}
	return out, nil
}

// globalGID strips the "@database" suffix of a SQL gid.
func globalGID(sqlGID string) string {
	if i := strings.LastIndexByte(sqlGID, '@'); i >= 0 {
		return sqlGID[:i]
	}
	return sqlGID
}
