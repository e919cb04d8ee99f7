package test

// Black-box tests of the coordinator binary: build cmd/coordinator, run it as an operator would
// (environment, flags, signals) and talk to it over HTTP.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/devstack"
	"github.com/kpgtx/coordinator/service"
)

// builtBinary is the coordinator binary shared by the tests running at the same time. It is
// built by the first test that needs it and removed when the last one that holds it ends, so a
// test run leaves no binary behind (a later test, if any, builds it again from the build cache).
var builtBinary struct {
	mu   sync.Mutex
	dir  string
	refs int
}

// coordinatorBinary returns the path of a freshly built cmd/coordinator.
func coordinatorBinary(t testing.TB) string {
	t.Helper()
	builtBinary.mu.Lock()
	defer builtBinary.mu.Unlock()
	if builtBinary.refs == 0 {
		dir, err := os.MkdirTemp("", "coordinator-bin-")
		require.NoError(t, err)
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "coordinator"), "./cmd/coordinator")
		cmd.Dir = ".." // the module root
		out, err := cmd.CombinedOutput()
		if err != nil {
			_ = os.RemoveAll(dir)
			require.NoError(t, err, "go build ./cmd/coordinator:\n%s", out)
		}
		builtBinary.dir = dir
	}
	builtBinary.refs++
	t.Cleanup(func() {
		builtBinary.mu.Lock()
		defer builtBinary.mu.Unlock()
		builtBinary.refs--
		if builtBinary.refs == 0 {
			_ = os.RemoveAll(builtBinary.dir)
			builtBinary.dir = ""
		}
	})
	return filepath.Join(builtBinary.dir, "coordinator")
}

// coordinatorEnv is this process's environment without any coordinator setting (so the
// developer's shell cannot leak into a test), plus the given KEY=value pairs.
func coordinatorEnv(set ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		key, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(key, "COORDINATOR_") || strings.HasPrefix(key, "KAFKA_") || strings.HasPrefix(key, "DATABASE_URL") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, retentionAtFloor(set)...)
}

// retentionAtFloor adds to a coordinator's settings a retention at the floor its settings allow
// (R4), passes every second and a test's retry window, unless the test sets a retention itself
// or its settings are refused anyway (a test of the refusal).
func retentionAtFloor(set []string) []string {
	vars := map[string]string{"COORDINATOR_RETRY_WINDOW": testRetryWindow.String(), "COORDINATOR_RETENTION_INTERVAL": "1s"}
	for _, kv := range set {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	if _, own := vars["COORDINATOR_RETENTION"]; own {
		return set
	}
	cfg, err := service.Load(func(k string) string { return vars[k] })
	if err != nil {
		return set
	}
	out := append([]string(nil), set...)
	for _, k := range []string{"COORDINATOR_RETRY_WINDOW", "COORDINATOR_RETENTION_INTERVAL"} {
		if !slices.Contains(set, k+"="+vars[k]) {
			out = append(out, k+"="+vars[k])
		}
	}
	return append(out, "COORDINATOR_RETENTION="+cfg.RetentionFloor().String())
}

// lockedBuffer collects a child's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a running coordinator.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdout lockedBuffer
	stderr lockedBuffer
	done   chan struct{} // closed when it has exited
	err    error         // cmd.Wait's answer, once done is closed
}

// startCoordinator runs the binary. At the end of the test a coordinator still running gets
// SIGTERM (so that dev mode removes its stack) and, after 15 s, SIGKILL; its output is logged
// when the test failed.
func startCoordinator(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	return startBinary(t, coordinatorBinary(t), env, args...)
}

// startBinary is startCoordinator with a given coordinator binary (the benchmark's baseline).
func startBinary(t testing.TB, binary string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = env
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(15 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("coordinator %s\n--- stdout:\n%s\n--- stderr:\n%s", strings.Join(args, " "), p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// exitCode waits up to timeout for the process to end and returns its exit status.
func (p *proc) exitCode(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		require.FailNow(p.t, "coordinator did not exit", "within %s", timeout)
	}
	if p.err == nil {
		return 0
	}
	var ee *exec.ExitError
	require.True(p.t, errors.As(p.err, &ee), "wait: %v", p.err)
	require.True(p.t, ee.Exited(), "coordinator ended by a signal, not an exit: %v", p.err)
	return ee.ExitCode()
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(sig))
}

// runCoordinator runs the binary to its end (at most 20 s) and returns its exit status.
func runCoordinator(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startCoordinator(t, env, args...)
	code = p.exitCode(20 * time.Second)
	return code, p.stdout.String(), p.stderr.String()
}

// handedOut remembers the ports freePort gave, so that tests running in parallel never get the
// same one (a port closed by one test is often the next one the kernel gives another).
var handedOut sync.Map

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago and that no other test
// of this process got.
func freePort(t testing.TB) int {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if _, taken := handedOut.LoadOrStore(port, true); !taken {
			return port
		}
	}
}

// waitHealthy polls base/healthz until it answers 200. It fails at once when the process exits.
func waitHealthy(t testing.TB, p *proc, base string, timeout time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			require.FailNow(t, "coordinator exited before it was healthy", "%v\nstderr:\n%s", p.err, p.stderr.String())
		default:
		}
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "coordinator not healthy", "%s/healthz after %s: last answer %v", base, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// call sends a request with a JSON body (if any) and decodes a JSON answer.
func call(t *testing.T, method, u, body string) response {
	t.Helper()
	r, _ := sendAs(t, "", method, u, body)
	return r
}

// withPassword gives a DSN without a password a made-up one (the test servers trust local
// connections, so it is never asked for), so a test can check that it is never printed.
func withPassword(t *testing.T, dsn string) (string, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	if pw, ok := u.User.Password(); ok {
		return dsn, pw
	}
	pw := "pw" + randHex(8)
	user := "postgres"
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, pw)
	return u.String(), pw
}

func TestBinaryServe(t *testing.T) {
	t.Parallel()
	coordinatorBinary(t) // hold the binary from the start, so parallel tests share one build
	dsn := needEnv(t, "DATABASE_URL")
	prefix := "b" + randHex(5)
	db := createSchema(t, dsn, prefix)
	dbURL, password := withPassword(t, dsnWithSchema(t, dsn, prefix))
	base := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	env := coordinatorEnv(
		"DATABASE_URL="+dbURL,
		"COORDINATOR_LISTEN="+strings.TrimPrefix(base, "http://"),
		"COORDINATOR_GID_PREFIX="+prefix,
		"KAFKA_TRANSACTIONAL_ID_PREFIX="+prefix,
		"COORDINATOR_INSTANCE=bin",
		"KAFKA_POOL_SIZE=4",
	)
	if !useKfake() {
		env = append(env, "KAFKA_BROKERS="+needEnv(t, "KAFKA_BROKERS"))
	}
	p := startCoordinator(t, env, "serve")
	waitHealthy(t, p, base, 60*time.Second)

	r := call(t, http.MethodPost, base+"/v1/transactions",
		`{"id":"bin-1","sql":[{"statement":"INSERT INTO orders (id, total) VALUES ($1, $2)","args":["bin-1",7]}]}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	assert.Equal(t, "committed", r.str("state"))
	assert.Equal(t, 1, countRows(t, db, "bin-1"))

	g := call(t, http.MethodGet, base+"/v1/transactions/bin-1", "")
	require.Equal(t, http.StatusOK, g.Status, "%s", g.Raw)
	assert.Equal(t, "committed", g.str("state"))

	spec := call(t, http.MethodGet, base+"/openapi.yaml", "")
	require.Equal(t, http.StatusOK, spec.Status)
	assert.Contains(t, string(spec.Raw), "openapi:")
	assert.Contains(t, string(spec.Raw), "/v1/transactions")

	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exitCode(10*time.Second), "exit status after SIGTERM")

	// The logs: JSON lines, the startup line says what runs, the password never appears.
	logs := p.stderr.String()
	assert.NotContains(t, logs, password)
	var msgs []string
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), "log line is not JSON: %s", sc.Text())
		msgs = append(msgs, fmt.Sprint(line["msg"]))
		if line["msg"] == "coordinator starting" {
			assert.Equal(t, "bin", line["instance"])
			assert.NotEmpty(t, line["database_url"])
			if useKfake() {
				assert.Equal(t, "(none: SQL only)", line["kafka_brokers"])
			} else {
				assert.Equal(t, os.Getenv("KAFKA_BROKERS"), line["kafka_brokers"])
			}
		}
	}
	assert.Contains(t, msgs, "coordinator starting")
	assert.Contains(t, msgs, "coordinator stopped")
	assert.Empty(t, p.stdout.String(), "serve writes logs to stderr only")
}

func TestBinaryRefusesBadConfig(t *testing.T) {
	t.Parallel()
	coordinatorBinary(t)
	const unreachable = "DATABASE_URL=postgres://coordinator:sekret@127.0.0.1:1/nowhere?connect_timeout=5"
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		want []string // in stderr
	}{
		{name: "nothing configured", args: []string{"serve"}, code: 2,
			want: []string{"DATABASE_URL", "nothing is configured", "coordinator dev"}},
		{name: "flags but no database", args: []string{"serve", "-listen", "127.0.0.1:0"}, code: 1,
			want: []string{"DATABASE_URL is required"}},
		{name: "pool size not an integer", env: []string{unreachable, "KAFKA_POOL_SIZE=abc"}, args: []string{"serve"}, code: 1,
			want: []string{`KAFKA_POOL_SIZE="abc"`}},
		{name: "gid prefix with blanks", env: []string{unreachable, "COORDINATOR_GID_PREFIX=bad prefix!"}, args: []string{"serve"}, code: 1,
			want: []string{"COORDINATOR_GID_PREFIX"}},
		{name: "duration", env: []string{unreachable, "KAFKA_TRANSACTION_TIMEOUT=soon"}, args: []string{"serve"}, code: 1,
			want: []string{"KAFKA_TRANSACTION_TIMEOUT"}},
		{name: "request outlives kafka transaction", env: []string{unreachable, "KAFKA_BROKERS=127.0.0.1:1", "KAFKA_TRANSACTION_TIMEOUT=20s"},
			args: []string{"serve"}, code: 1, want: []string{"COORDINATOR_MAX_TIMEOUT", "KAFKA_TRANSACTION_TIMEOUT"}},
		{name: "flag overrides environment", env: []string{unreachable, "KAFKA_POOL_SIZE=8"}, args: []string{"serve", "-pool-size", "0"}, code: 1,
			want: []string{"KAFKA_POOL_SIZE=0"}},
		{name: "bad flag value", env: []string{unreachable}, args: []string{"serve", "-pool-size", "many"}, code: 2,
			want: []string{"-pool-size"}},
		{name: "bad log level", env: []string{unreachable}, args: []string{"serve", "-log-level", "loud"}, code: 2,
			want: []string{`log level "loud"`, "COORDINATOR_LOG_LEVEL"}},
		{name: "database unreachable", env: []string{unreachable}, args: []string{"serve"}, code: 1,
			want: []string{"DATABASE_URL", "cannot reach PostgreSQL"}},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2,
			want: []string{`unknown command "frobnicate"`, "serve", "dev", "migrate", "DATABASE_URL", "KAFKA_BROKERS"}},
		{name: "migrate without direction", env: []string{unreachable}, args: []string{"migrate"}, code: 2,
			want: []string{"up|down"}},
		{name: "migrate sideways", env: []string{unreachable}, args: []string{"migrate", "sideways"}, code: 2,
			want: []string{`"sideways"`, "up|down"}},
		{name: "migrate without database", args: []string{"migrate", "up"}, code: 2,
			want: []string{"DATABASE_URL"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCoordinator(t, coordinatorEnv(tc.env...), tc.args...)
			assert.Equal(t, tc.code, code, "exit status; stderr:\n%s", stderr)
			for _, w := range tc.want {
				assert.Contains(t, stderr, w)
			}
			assert.Contains(t, stderr, "coordinator: ")
			assert.NotContains(t, stderr+stdout, "sekret", "the password was printed")
			assert.NotContains(t, stdout, "coordinator: ", "errors go to stderr")
		})
	}

	t.Run("help", func(t *testing.T) {
		t.Parallel()
		code, stdout, _ := runCoordinator(t, coordinatorEnv(), "help")
		assert.Equal(t, 0, code)
		for _, w := range []string{"serve", "dev", "migrate", "DATABASE_URL", "KAFKA_BROKERS", "COORDINATOR_LISTEN"} {
			assert.Contains(t, stdout, w)
		}
	})
}

// banner is what `coordinator dev` prints for the user.
type banner struct {
	postURL, postBody, getURL, dsn, dir string
}

func parseBanner(t *testing.T, out string) banner {
	t.Helper()
	var b banner
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		fields := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "curl -s -X POST "):
			b.postURL = fields[4]
			start := strings.Index(line, " -d '")
			require.True(t, start > 0 && strings.HasSuffix(line, "'"), "curl line: %s", line)
			b.postBody = line[start+len(" -d '") : len(line)-1]
		case strings.HasPrefix(line, "curl -s http"):
			b.getURL = fields[2]
		case strings.HasPrefix(line, "PostgreSQL "):
			b.dsn = fields[1]
		case strings.HasPrefix(line, "Data "):
			b.dir = fields[1]
		}
	}
	require.NotEmpty(t, b.postURL, "no POST in the banner:\n%s", out)
	require.NotEmpty(t, b.getURL, "no GET in the banner:\n%s", out)
	require.NotEmpty(t, b.dsn, "no PostgreSQL in the banner:\n%s", out)
	require.NotEmpty(t, b.dir, "no data directory in the banner:\n%s", out)
	return b
}

// TestBinaryDev runs `coordinator dev` with nothing configured, sends the request its banner
// shows and checks that Ctrl-C leaves nothing behind. It needs no services, so it never skips:
// once with the local PostgreSQL server binaries, once with none on the lookup path
// (COORDINATOR_DEV_POSTGRES_PATH at an empty directory), where dev fetches a PostgreSQL build
// (the first run on a machine downloads it; later runs take it from the cache).
func TestBinaryDev(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		env   []string
		ready time.Duration // a first run downloads the build
	}{
		{name: "local PostgreSQL", ready: 90 * time.Second},
		{name: "fetched PostgreSQL", env: []string{"COORDINATOR_DEV_POSTGRES_PATH=" + t.TempDir()}, ready: 10 * time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testBinaryDev(t, tc.env, tc.ready)
		})
	}
}

func testBinaryDev(t *testing.T, env []string, ready time.Duration) {
	coordinatorBinary(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startCoordinator(t, coordinatorEnv(env...), "dev", "-listen", addr)
	waitHealthy(t, p, "http://"+addr, ready)
	if len(env) > 0 {
		assert.Contains(t, p.stderr.String(), "postgresql-"+devstack.PostgresVersion+"-", "dev runs the fetched build")
	}
	// The banner is printed before the server answers, but it reaches our buffer through a
	// pipe copy that may lag behind /healthz: wait for its last line.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.stdout.String(), "Press Ctrl-C to stop.") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	b := parseBanner(t, p.stdout.String())
	assert.True(t, strings.HasPrefix(b.postURL, "http://"+addr+"/"), "banner URL %s, listening on %s", b.postURL, addr)

	r := call(t, http.MethodPost, b.postURL, b.postBody)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	assert.Equal(t, "committed", r.str("state"))
	recs, _ := r.get("kafka", "records").([]any)
	assert.Len(t, recs, 1, "the record of the banner's request: %s", r.Raw)

	g := call(t, http.MethodGet, b.getURL, "")
	require.Equal(t, http.StatusOK, g.Status, "%s", g.Raw)
	assert.Equal(t, "committed", g.str("state"))
	assert.Equal(t, r.str("id"), g.str("id"))

	// The row is in the dev database's demo table.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.dsn)
	require.NoError(t, err)
	var total string
	require.NoError(t, conn.QueryRow(ctx, "SELECT total::text FROM orders WHERE id = 'o-1'").Scan(&total))
	assert.Equal(t, "10", total)
	require.NoError(t, conn.Close(ctx))

	_, err = os.Stat(b.dir)
	require.NoError(t, err, "the data directory exists while dev runs")

	p.signal(os.Interrupt)
	require.Equal(t, 0, p.exitCode(15*time.Second), "exit status after SIGINT")

	// Nothing left behind: the data directory is gone and no PostgreSQL answers on its port.
	_, err = os.Stat(b.dir)
	assert.True(t, errors.Is(err, os.ErrNotExist), "data directory %s still there: %v", b.dir, err)
	u, err := url.Parse(b.dsn)
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err == nil {
		_ = c.Close()
		t.Errorf("PostgreSQL of dev mode still listens on port %d", port)
	}
}

// TestBinaryMigrateConfigFile: `coordinator migrate` takes DATABASE_URL from a -config file,
// like serve.
func TestBinaryMigrateConfigFile(t *testing.T) {
	t.Parallel()
	dsn := needEnv(t, "DATABASE_URL")
	schema := "m" + randHex(5)
	pool := createSchema(t, dsn, schema)
	file := filepath.Join(t.TempDir(), "coordinator.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf("database_url: %q\n", dsnWithSchema(t, dsn, schema))), 0o600))

	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM information_schema.tables WHERE table_schema = $1
			 AND table_name IN ('coordinator_transactions', 'coordinator_events', 'coordinator_instances')`, schema).Scan(&n))
		return n
	}
	code, _, stderr := runCoordinator(t, coordinatorEnv(), "migrate", "-config", file, "up")
	require.Equal(t, 0, code, stderr)
	assert.Positive(t, count(), "the log's tables exist")
	code, _, stderr = runCoordinator(t, coordinatorEnv(), "migrate", "-config", file, "down")
	require.Equal(t, 0, code, stderr)
	assert.Zero(t, count())
}
