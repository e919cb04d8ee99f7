package test

// examples/reserve run against `coordinator dev` as its README says: a reservation committed
// when the payment is approved (the row and the record visible), rolled back when it is
// declined (nothing visible). Like TestDevPipelineExample it needs no services, so it never
// skips.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// reserveBinary builds examples/reserve once per test run.
var reserveBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "reserve-example-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "reserve")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/reserve")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./examples/reserve: %v\n%s", err, out)
	}
	return bin, nil
})

func TestDevReserveExample(t *testing.T) {
	t.Parallel()
	bin, err := reserveBinary()
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(bin)) })
	d := startDev(t)

	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ex := exec.CommandContext(ctx, bin, append([]string{"-url", d.base}, args...)...)
		ex.Env = coordinatorEnv()
		out, err := ex.CombinedOutput()
		require.NoError(t, err, "examples/reserve %v:\n%s", args, out)
		return string(out)
	}
	approved := run("-order", "r-paid", "-amount", "25")
	assert.Contains(t, approved, "reserved order r-paid: transaction reserve-r-paid prepared")
	assert.Contains(t, approved, "payment of 25 for order r-paid: approved")
	assert.Contains(t, approved, "order r-paid: committed")

	declined := run("-order", "r-declined", "-decline")
	assert.Contains(t, declined, "reserved order r-declined: transaction reserve-r-declined prepared")
	assert.Contains(t, declined, "payment of 25 for order r-declined: declined (card declined)")
	assert.Contains(t, declined, "order r-declined: aborted, rolled back")

	overLimit := run("-order", "r-over", "-amount", "5000")
	assert.Contains(t, overLimit, "declined (amount 5000 above the limit 1000)")
	assert.Contains(t, overLimit, "order r-over: aborted")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT id FROM orders WHERE id LIKE 'r-%' ORDER BY id")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"r-paid"}, ids, "only the paid order's row")
	var prepared int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&prepared))
	assert.Zero(t, prepared, "nothing left prepared")

	// Only the paid order's record is committed (read_committed), after the rollbacks' too.
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.brokers), kgo.ConsumeTopics("orders"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	marker := run("-order", "r-marker")
	require.Contains(t, marker, "order r-marker: committed")
	var keys []string
	for !slices.Contains(keys, "r-marker") && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			if len(r.Key) > 2 && string(r.Key[:2]) == "r-" {
				keys = append(keys, string(r.Key))
			}
		})
	}
	assert.Equal(t, []string{"r-paid", "r-marker"}, keys, "the records of the committed reservations only")
}
