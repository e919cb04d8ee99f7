package test

// Tests of `coordinator dev` as a new user meets it: what its banner promises and the role its
// client statements run as. They need no services, so they never skip.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
func TestDevStatementRole(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	assert.Contains(t, d.banner, "Statements  run as role kpgtx_client")

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
		  "kafka":[{"topic":"orders","key":"r-1","value":"x"}]}`)
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
