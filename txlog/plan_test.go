package txlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// The batch writes reach each row by its primary key, whatever the statistics say. The table
// is analyzed while few rows are prepared, then many rows pass through active and prepared
// without a vacuum, as under load: every one of them leaves entries in the indexes on state.
// A plan that scans those indexes reads all of them at every write; it did, with the state a
// constant in the statement, and a batch write grew with every row written since the last
// vacuum. Both the plan made for the arguments and the generic plan are checked.
func TestBatchUpdateReachesRowsByKey(t *testing.T) {
	t.Parallel()
	l, pool := newLog(t)
	ctx := context.Background()
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	ids := txntype.KafkaIDs{TransactionalID: "tx-plan", ProducerID: 7, ProducerEpoch: 1}

	next := 0
	begin := func(n int) []*txntype.Transaction {
		t.Helper()
		ts := make([]*txntype.Transaction, n)
		for i := range ts {
			next++
			live, created, err := l.Begin(ctx, row(fmt.Sprintf("plan%d", next), epoch))
			require.NoError(t, err)
			require.True(t, created)
			live.Kafka = &txntype.KafkaState{KafkaIDs: ids, PreparedState: ids.PreparedState()}
			ts[i] = live
		}
		return ts
	}
	finish := func(ts []*txntype.Transaction) {
		t.Helper()
		require.NoError(t, l.PreparedBatch(ctx, ts, nil))
		done, err := l.CommittedBatch(ctx, ts, time.Time{})
		require.NoError(t, err)
		require.NotContains(t, done, false)
	}

	// Statistics that saw 200 committed rows and 3 prepared.
	finish(begin(200))
	prepared := begin(3)
	require.NoError(t, l.PreparedBatch(ctx, prepared, nil))
	_, err = pool.Exec(ctx, "ANALYZE coordinator_transactions")
	require.NoError(t, err)
	// Then 600 rows through active, prepared and committed, and a few left active.
	for range 20 {
		finish(begin(30))
	}
	active := begin(3)

	gidsOf := func(ts []*txntype.Transaction) []string {
		out := make([]string, len(ts))
		for i, tr := range ts {
			out[i] = tr.GID
		}
		return out
	}
	owners, epochs := []string{"a", "a", "a"}, []int64{epoch, epoch, epoch}
	empty := []string{"[]", "[]", "[]"}
	const byKey = "Index Scan coordinator_transactions_pkey"
	checkPlans(t, pool, []planCase{
		{"committed batch", txlog.CommittedBatchSQL, []any{gidsOf(prepared), owners, epochs, nil}, byKey},
		{"prepared batch", txlog.PreparedBatchSQL, []any{gidsOf(active), owners, epochs, empty, empty, empty,
			ids.TransactionalID, ids.ProducerID, ids.ProducerEpoch, ids.PreparedState()}, byKey},
	})
}

// planCase is a statement whose every read of the log's rows must be want ("<node> <index>").
type planCase struct {
	name, sql string
	args      []any
	want      string
}

// checkPlans checks each case's plan, as made for its arguments and as the generic plan.
func checkPlans(t *testing.T, pool *pgxpool.Pool, cases []planCase) {
	t.Helper()
	for _, c := range cases {
		for _, mode := range []string{"auto", "force_generic_plan"} {
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				scans := planScans(t, pool, mode, c.sql, c.args)
				require.NotEmpty(t, scans, "the plan reads coordinator_transactions")
				for _, s := range scans {
					assert.Equal(t, c.want, s, "every read of the log's rows")
				}
			})
		}
	}
}

// planScans explains sql with args under plan_cache_mode mode and returns every plan node that
// reads coordinator_transactions, as "<node type> <index name>".
func planScans(t *testing.T, pool *pgxpool.Pool, mode, sql string, args []any) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET plan_cache_mode = "+mode)
	require.NoError(t, err)
	defer conn.Exec(ctx, "RESET plan_cache_mode") //nolint:errcheck // the connection is released after
	var raw []byte
	require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&raw))
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(raw, &plans))
	require.Len(t, plans, 1)
	var out []string
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.Relation == "coordinator_transactions" && n.Type != "ModifyTable" {
			out = append(out, n.Type+" "+n.Index)
		}
		for _, p := range n.Plans {
			walk(p)
		}
	}
	walk(plans[0].Plan)
	return out
}

// planNode is the part of a JSON plan node that planScans reads.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

// A page's claim (C1) reaches each row by its primary key, as the batch writes do, with
// thousands of rows in doubt; and the pass reads its page of them.
func TestClaimManyReachesRowsByKey(t *testing.T) {
	t.Parallel()
	l, pool := newLog(t)
	ctx := context.Background()
	epoch, err := txlog.BumpEpoch(ctx, pool, "a")
	require.NoError(t, err)
	var ts []*txntype.Transaction
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range 3000 {
		g.Go(func() error {
			live, _, err := l.Begin(gctx, row(fmt.Sprintf("due%d", i), epoch))
			mu.Lock()
			ts = append(ts, live)
			mu.Unlock()
			return err
		})
	}
	require.NoError(t, g.Wait())
	_, err = pool.Exec(ctx, "ANALYZE coordinator_transactions")
	require.NoError(t, err)

	n := 3
	page := ts[:n]
	gids, from, to, owners := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	epochs := make([]int64, n)
	for i, tr := range page {
		gids[i], from[i], to[i], owners[i], epochs[i] = tr.GID, "active", "aborting", "a", epoch
	}
	checkPlans(t, pool, []planCase{
		{"claim", txlog.ClaimManySQL, []any{gids, from, to, owners, epochs, "r", int64(1)}, "Index Scan coordinator_transactions_pkey"},
	})
	rows, err := l.Due(ctx, "a", 0, 512)
	require.NoError(t, err)
	require.Len(t, rows, 512, "a page")
}
