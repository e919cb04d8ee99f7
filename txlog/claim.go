package txlog

import (
	"context"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// ClaimMany is Claim for a page of rows in one statement (C1, coord/page.go): each row is its
// own compare-and-set on the state, owner and owner epoch the resolver read (ts), succeeds only
// while by still holds its epoch, and moves to coord.ClaimState of its state (so only rows in
// doubt are accepted: a final one is an error). claimed are the rows that changed, read back
// as they are now (the resolver acts on these, never on what it read before); a row left out
// moved on. Every claim gets its event, as Claim's.
func (l *Log) ClaimMany(ctx context.Context, ts []*txntype.Transaction, by txntype.Fence) ([]*txntype.Transaction, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	if l.obs != nil {
		defer l.observeWrite(time.Now())
	}
	n := len(ts)
	gids, from, to, owners := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	epochs := make([]int64, n)
	for i, t := range ts {
		st, ok := coord.ClaimState(t.State)
		if !ok {
			return nil, fmt.Errorf("txlog: claim %s: it is %s, not in doubt", t.GID, t.State)
		}
		gids[i], from[i], to[i], owners[i], epochs[i] = t.GID, string(t.State), string(st), t.Owner, t.OwnerEpoch
	}
	rows, err := l.pool.Query(ctx, claimManySQL, gids, from, to, owners, epochs, by.Instance, by.Epoch)
	if err != nil {
		return nil, fmt.Errorf("txlog: claim %d rows by %s@%d: %w", n, by.Instance, by.Epoch, err)
	}
	defer rows.Close()
	claimed := make([]*txntype.Transaction, 0, n)
	for rows.Next() {
		t, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("txlog: claim %d rows: %w", n, err)
		}
		claimed = append(claimed, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("txlog: claim %d rows by %s@%d: %w", n, by.Instance, by.Epoch, err)
	}
	return claimed, nil
}

// claimManySQL: $1 gids, $2 the states read, $3 the states claimed, $4 and $5 the owners and
// epochs read, $6 and $7 the claimer. Each row is reached by its primary key (batchUpdateSQL
// says why the state comes from the input).
var claimManySQL = `
WITH input AS MATERIALIZED (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[])
        AS x(in_gid, in_state, in_to, in_owner, in_epoch)
), upd AS (
    UPDATE coordinator_transactions t SET state = x.in_to, owner_instance = $6, owner_epoch = $7,
        updated_at = now()
    FROM input x
    WHERE t.gid = x.in_gid AND t.state = x.in_state AND t.owner_instance = x.in_owner
      AND t.owner_epoch = x.in_epoch AND ` + fenced(6, 7) + `
    RETURNING ` + columns + `, x.in_state, x.in_owner, x.in_epoch
), ev AS (
    INSERT INTO coordinator_events (gid, state, detail)
    SELECT gid, state, jsonb_build_object('claimed_by', $6::text, 'epoch', $7::bigint,
        'previous_owner', in_owner, 'previous_epoch', in_epoch, 'previous_state', in_state)
    FROM upd
)
SELECT ` + columns + ` FROM upd`
