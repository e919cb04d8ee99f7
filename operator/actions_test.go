package operator

import (
	"context"
	"fmt"
	"testing"
	"time"

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
		{"retry waiting", "a", txntype.StateWaiting, retry, ErrWaiting},
		{"resolve waiting", "a", txntype.StateWaiting, resolve, ErrWaiting},
		{"retry another instance's waiting row", "b", txntype.StateWaiting, retry, ErrWaiting},
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

// A waiting row (X1) is listed as waiting, not in doubt, with abort as its only action, and is
// counted apart in the status.
func TestWaitingRow(t *testing.T) {
	t.Parallel()
	e := newDeskEnv(t)
	ctx := context.Background()
	gid := e.row(t, "w", "a", txntype.StateWaiting)
	_, err := e.admin.Exec(ctx, "UPDATE "+e.schema+".coordinator_transactions SET decide_by = now() + interval '1 hour' WHERE gid = $1", gid)
	require.NoError(t, err)
	other := e.row(t, "wb", "b", txntype.StateWaiting)

	view, err := e.d.InDoubt(ctx)
	require.NoError(t, err)
	byGID := map[string]*InDoubtEntry{}
	for _, en := range view.Entries {
		byGID[en.GID] = en
	}
	for _, g := range []string{gid, other} {
		en := byGID[g]
		require.NotNil(t, en, "%s listed (another instance's at once)", g)
		assert.Equal(t, IssueWaiting, en.Issue)
		assert.Equal(t, []string{"abort"}, en.Actions)
		assert.Nil(t, en.Log.NextAttemptAt, "no recovery attempt is scheduled")
	}
	assert.Contains(t, byGID[gid].Hint, "waiting for its caller's commit or rollback until ")

	st, err := e.d.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, st.Waiting.Count)
	assert.Equal(t, 1, st.Waiting.Self)
	assert.Zero(t, st.InDoubt.ByIssue[IssueWaiting], "not in doubt")

	// This desk's loop holds no instance lock: the abort cannot be written, says so, and the
	// row still waits (test/waiting_ops_test.go aborts one on a running coordinator).
	got, err := e.d.Abort(ctx, gid, "alice", "stuck caller")
	require.ErrorIs(t, err, txntype.ErrUnavailable)
	assert.NotErrorIs(t, err, txntype.ErrNotAllowed)
	assert.Equal(t, txntype.StateWaiting, got.State)
	cur, err := e.log.GetGID(ctx, gid)
	require.NoError(t, err)
	assert.Equal(t, txntype.StateWaiting, cur.State)
}

func TestWaitingNote(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	by := now.Add(90 * time.Second)
	assert.Equal(t, "waiting for its caller's commit or rollback until 2026-01-02T15:01:30Z (in 1m30s): not in doubt; without a decision by then recovery aborts it (presumed abort); abort aborts it now, retry and resolve do not apply",
		WaitingNote(&by, now))
	assert.Contains(t, WaitingNote(&by, by.Add(time.Second)), "deadline reached (decide_by 2026-01-02T15:01:30Z)")
	acts, hint := advice(&InDoubtEntry{Issue: IssueWaiting, Log: &LogInfo{Transaction: &txntype.Transaction{DecideBy: &by}}}, by)
	assert.Equal(t, []string{"abort"}, acts)
	assert.Contains(t, hint, "recovery aborts it")
}
