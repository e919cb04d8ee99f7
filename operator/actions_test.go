package operator

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// row logs a transaction of instance in state st (no participant holds anything of it):
// begun as this instance's, then moved there by hand.
func (e *deskEnv) row(t *testing.T, id, instance string, st txntype.State) string {
	t.Helper()
	ctx := context.Background()
	gid := e.schema + "_" + id
	_, created, err := e.log.Begin(ctx, &txntype.Transaction{ID: id, GID: gid, Instance: "a", State: txntype.StateActive,
		Owner: "a", OwnerEpoch: e.epoch, Digest: []byte{1}})
	require.NoError(t, err)
	require.True(t, created)
	_, err = e.admin.Exec(ctx, "UPDATE "+e.schema+".coordinator_transactions SET state = $1, instance_id = $2 WHERE gid = $3",
		string(st), instance, gid)
	require.NoError(t, err)
	return gid
}

// The guards of the operator's actions refuse, with their own sentinel, where acting could
// break atomicity or is not this desk's to do, and change nothing.
func TestActionGuards(t *testing.T) {
	t.Parallel()
	e := newDeskEnv(t)
	ctx := context.Background()
	resolve := func(d *Desk, gid string) error {
		_, err := d.Resolve(ctx, gid, txntype.StateAborted, txlog.AdminAction{Action: "resolve", By: "test", Reason: "test"})
		return err
	}
	abort := func(d *Desk, gid string) error { _, err := d.Abort(ctx, gid, "test", ""); return err }
	retry := func(d *Desk, gid string) error { _, err := d.Retry(ctx, gid); return err }
	tests := []struct {
		name     string
		instance string
		state    txntype.State
		act      func(*Desk, string) error
		want     error
	}{
		{"abort committed", "a", txntype.StateCommitted, abort, ErrNotAbortable},
		{"abort committing", "a", txntype.StateCommitting, abort, ErrNotAbortable},
		{"abort heuristic", "a", txntype.StateHeuristic, abort, ErrHeuristic},
		{"retry heuristic mixed", "a", txntype.StateHeuristicMixed, retry, ErrHeuristic},
		{"resolve prepared", "a", txntype.StatePrepared, resolve, ErrNotHeuristic},
		{"resolve committed", "a", txntype.StateCommitted, resolve, ErrNotHeuristic},
		{"retry another instance's row without its lock", "b", txntype.StateActive, retry, ErrInstanceAlive},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gid := e.row(t, fmt.Sprintf("g%d", i), tt.instance, tt.state)
			err := tt.act(e.d, gid)
			require.ErrorIs(t, err, tt.want)
			assert.ErrorIs(t, err, txntype.ErrNotAllowed, "every refusal is a refusal to the API")
			cur, gerr := e.log.GetGID(ctx, gid)
			require.NoError(t, gerr)
			assert.Equal(t, tt.state, cur.State, "a refusal changes nothing")
		})
	}
}
