package test

// Tests of `coordinator dev` as a new user meets it: what its banner promises, the role its
// client statements run as, and examples/pipeline run against it with the command the banner
// prints. They need no services, so they never skip.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// devStack is a running `coordinator dev` and what its banner says.
type devStack struct {
	p        *proc
	base     string // the API's base URL
	dsn      string // the dev database (as its superuser)
	brokers  string // the in-process Kafka
	pipeline string // the banner's command line for examples/pipeline
	banner   string
}

// startDev runs `coordinator dev` on free ports (the API and Kafka) and waits for its banner.
// It is stopped (SIGTERM) at the end of the test.
func startDev(t *testing.T, args ...string) *devStack {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	kafkaPort := freePort(t)
	p := startCoordinator(t, coordinatorEnv(), append([]string{"dev", "-listen", addr, "-kafka-port", fmt.Sprint(kafkaPort)}, args...)...)
	d := &devStack{p: p, base: "http://" + addr}
	waitHealthy(t, p, d.base, 90*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.stdout.String(), "Press Ctrl-C to stop.") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	d.banner = p.stdout.String()
	for _, line := range strings.Split(d.banner, "\n") {
		line = strings.TrimSpace(line)
		fields := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "PostgreSQL "):
			d.dsn = fields[1]
		case strings.HasPrefix(line, "Kafka "):
			d.brokers = fields[1]
		case strings.HasPrefix(line, "go run ./examples/pipeline"):
			d.pipeline = line
		}
	}
	require.NotEmpty(t, d.dsn, "no PostgreSQL in the banner:\n%s", d.banner)
	require.Equal(t, fmt.Sprintf("127.0.0.1:%d", kafkaPort), d.brokers, "the banner's Kafka:\n%s", d.banner)
	return d
}

// TestDevStatementRole: dev mode runs client statements as the statement role production can
// use (docs/sql.md), which may read and write the demo tables but not drop them, and says so.
// (The run also has topics of its own, -topics, which a request produces to.)
func TestDevStatementRole(t *testing.T) {
	t.Parallel()
	d := startDev(t, "-topics", "payments, refunds")
	assert.Contains(t, d.banner, "Statements  run as role kpgtx_client")
	assert.Contains(t, d.banner, "topics orders, shipments, payments, refunds")

	drop := call(t, http.MethodPost, d.base+"/v1/transactions", `{"sql":[{"statement":"DROP TABLE orders"}]}`)
	require.Equal(t, http.StatusConflict, drop.Status, "%s", drop.Raw)
	assert.Equal(t, "aborted", drop.str("state"))
	assert.Equal(t, "42501", drop.str("error", "sqlstate"), "refused for want of privilege: %s", drop.Raw)

	for _, stmt := range []string{"TRUNCATE orders", "ALTER TABLE shipments ADD COLUMN x int", "CREATE TABLE mine (x int)"} {
		r := call(t, http.MethodPost, d.base+"/v1/transactions", fmt.Sprintf(`{"sql":[{"statement":%q}]}`, stmt))
		assert.Equal(t, http.StatusConflict, r.Status, "%s: %s", stmt, r.Raw)
	}
	// DO would let dynamic SQL leave the role: refused before it runs.
	do := call(t, http.MethodPost, d.base+"/v1/transactions", `{"sql":[{"statement":"DO $$ BEGIN END $$"}]}`)
	assert.Equal(t, http.StatusBadRequest, do.Status, "%s", do.Raw)

	ins := call(t, http.MethodPost, d.base+"/v1/transactions",
		`{"sql":[{"statement":"INSERT INTO orders(id, total) VALUES ($1, $2)","args":["r-1",5]},
		         {"statement":"UPDATE orders SET total = total + 1 WHERE id = $1","args":["r-1"]},
		         {"statement":"INSERT INTO shipments VALUES ($1, 0, 0)","args":["r-1"]},
		         {"statement":"SELECT total FROM orders WHERE id = $1","args":["r-1"]}],
		  "kafka":[{"topic":"orders","key":"r-1","value":"x"},{"topic":"refunds","key":"r-1","value":"x"}]}`)
	require.Equal(t, http.StatusOK, ins.Status, "%s", ins.Raw)
	assert.Equal(t, "committed", ins.str("state"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var total string
	require.NoError(t, conn.QueryRow(ctx, "SELECT total::text FROM orders WHERE id = 'r-1'").Scan(&total))
	assert.Equal(t, "6", total, "the orders table is still there, with the row")
	var super bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = 'kpgtx_client'").Scan(&super))
	assert.False(t, super)
}

// pipelineBinary builds examples/pipeline into dir.
func pipelineBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "pipeline")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/pipeline")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./examples/pipeline:\n%s", out)
	return bin
}

// TestDevPipelineExample runs examples/pipeline against `coordinator dev` with the command
// line the banner prints (the README's `go run ./examples/pipeline`, plus the ports of this
// run), sends orders, and checks that each became one shipment row and one shipment record,
// that the example logged its batches and rebalances, that `txn show` gives a batch's offsets,
// and that it stops cleanly.
func TestDevPipelineExample(t *testing.T) {
	t.Parallel()
	bin := pipelineBinary(t, t.TempDir()) // each run its own: -count=N removes the last one's
	d := startDev(t)
	require.NotEmpty(t, d.pipeline, "the banner gives the example's command:\n%s", d.banner)
	args := strings.Fields(strings.TrimPrefix(d.pipeline, "go run ./examples/pipeline"))
	assert.Equal(t, []string{"-coordinator", d.base, "-brokers", d.brokers}, args, "ports other than the defaults are given")

	// An order sent before the example starts is processed too (the group starts at the
	// beginning), one sent after it is running as well.
	orders := []string{"o-before"}
	post := func(id string) {
		r := call(t, http.MethodPost, d.base+"/v1/transactions", fmt.Sprintf(
			`{"sql":[{"statement":"INSERT INTO orders(id, total) VALUES ($1, $2)","args":[%q,1]}],"kafka":[{"topic":"orders","key":%q,"value":"{}"}]}`, id, id))
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	}
	post(orders[0])

	ex := exec.Command(bin, args...)
	ex.Env = coordinatorEnv()
	var log lockedBuffer
	ex.Stdout, ex.Stderr = &log, &log
	require.NoError(t, ex.Start())
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = ex.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = ex.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("examples/pipeline:\n%s", log.String())
		}
	})
	for i := range 5 {
		id := fmt.Sprintf("o-%d", i)
		orders = append(orders, id)
		post(id)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var shipped []string
	for {
		rows, err := conn.Query(ctx, "SELECT order_id FROM shipments ORDER BY order_id")
		require.NoError(t, err)
		shipped, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		if len(shipped) >= len(orders) || ctx.Err() != nil {
			break
		}
		select {
		case <-exited:
			require.FailNow(t, "the example exited", "%v\n%s", exitErr, log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	assert.ElementsMatch(t, orders, shipped, "one shipment row per order")

	// One shipment record per order, committed.
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.brokers), kgo.ConsumeTopics("shipments"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var keys []string
	for len(keys) < len(orders) && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { keys = append(keys, string(r.Key)) })
	}
	assert.ElementsMatch(t, orders, keys, "one shipment record per order")

	out := log.String()
	assert.Contains(t, out, "pipeline: partitions assigned")
	assert.Contains(t, out, "partitions=orders/0")
	ids := regexp.MustCompile(`msg="pipeline: batch committed" id=(\S+) state=committed .*offsets=orders/0→(\d+)`).FindAllStringSubmatch(out, -1)
	require.NotEmpty(t, ids, "the example logs its batches:\n%s", out)

	// The last batch's transaction, with the offsets it committed, through the CLI.
	last := ids[len(ids)-1]
	code, stdout, stderr := runCoordinator(t, coordinatorEnv(), "txn", "show", last[1], "-server", d.base)
	require.Equal(t, 0, code, "%s%s", stdout, stderr)
	assert.Contains(t, stdout, "offset:")
	assert.Contains(t, stdout, "orders/0 next "+last[2])
	assert.Contains(t, stdout, "group:")
	assert.Regexp(t, `shipping  generation \d+  member `, stdout)

	// Ctrl-C stops it between batches, leaving the group, with status 0.
	require.NoError(t, ex.Process.Signal(os.Interrupt))
	select {
	case <-exited:
		require.NoError(t, exitErr, "exit status after SIGINT")
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the example did not stop after SIGINT")
	}
	assert.Contains(t, log.String(), "pipeline: stopped; left the group")
	assert.Contains(t, log.String(), "pipeline: partitions revoked")
}

// TestDevKafkaPortTaken: the usual Kafka port taken (a local Kafka, another dev mode), dev mode
// takes a free one and its banner gives the example's command with it; asked for explicitly,
// a taken port is an error.
func TestDevKafkaPortTaken(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	taken := strings.TrimPrefix(d.brokers, "127.0.0.1:")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	code, _, stderr := runCoordinator(t, coordinatorEnv(), "dev", "-listen", addr, "-kafka-port", taken)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "choose another port with -kafka-port")
}
