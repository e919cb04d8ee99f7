package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/devstack"
	"github.com/kpgtx/coordinator/service"
)

// needEnv returns an environment variable a test needs. In CI a missing service is a failure;
// elsewhere the test is skipped with the command that provides it.
func needEnv(t testing.TB, key string) string {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set: CI must run scripts/test.sh, which starts PostgreSQL and Kafka", key)
		}
		t.Skipf("%s is not set: run `bash scripts/test.sh` (or `eval \"$(bash scripts/services.sh env)\"`) to test against real services", key)
	}
	return v
}

// useKfake reports whether the suite runs against the in-process kfake instead of real Kafka.
func useKfake() bool { return os.Getenv("TEST_KAFKA") == "kfake" || os.Getenv("KAFKA_BROKERS") == "" }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// env is one test's isolated coordinator: its own schemas, topics, gid and transactional-id
// prefixes, on the shared real services (or a kfake of its own).
type env struct {
	t       testing.TB
	svc     *service.Service
	srv     *httptest.Server
	db      *pgxpool.Pool // the default database, test schema first on the search_path
	db2     *pgxpool.Pool // the second database, "other"
	brokers []string
	topic   string
	prefix  string
	cfg     service.Config
	rf      int16 // replication factor of the test's topics (default 1)
}

type envOpts struct {
	poolSize  int
	secondDB  bool
	configure func(*service.Config)
	// dsn and brokers, when set, replace DATABASE_URL and KAFKA_BROKERS (private services).
	dsn     string
	brokers []string
	// replicationFactor of the test's topics (0: 1).
	replicationFactor int16
	// serviceOpts are passed to service.Open (newEnv).
	serviceOpts []service.Option
}

// dsnWithSchema puts the schema first on the search_path of every connection.
func dsnWithSchema(t testing.TB, dsn, schema string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func createSchema(t testing.TB, dsn, schema string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err, "connect to %s", dsn)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	pool, err := pgxpool.New(ctx, dsnWithSchema(t, dsn, schema))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, total numeric NOT NULL, note text)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	})
	return pool
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	e := newStore(t, o)
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := service.Open(ctx, e.cfg, logger, o.serviceOpts...)
	require.NoError(t, err)
	e.svc = svc
	e.srv = httptest.NewServer(svc.Handler())
	loopCtx, stopLoop := context.WithCancel(context.Background())
	svc.Start(loopCtx)
	t.Cleanup(func() {
		stopLoop()
		svc.Recovery.Wait()
		svc.Retention.Wait()
		e.srv.Close()
		svc.Close()
	})
	return e
}

// testRetryWindow is COORDINATOR_RETRY_WINDOW in the tests: their clients retry an id for
// seconds, so the retention's floor (R4) follows the test's own timeouts.
const testRetryWindow = 5 * time.Second

// newStore prepares a test's isolated schemas, topic and prefixes, and the service
// configuration for them, without starting a coordinator (black-box tests run the binary).
func newStore(t testing.TB, o envOpts) *env {
	t.Helper()
	ctx := context.Background()
	dsn := o.dsn
	if dsn == "" {
		dsn = needEnv(t, "DATABASE_URL")
	}
	e := &env{t: t, prefix: "t" + randHex(5), rf: max(1, o.replicationFactor)}
	schema := e.prefix
	e.db = createSchema(t, dsn, schema)

	cfg := service.Defaults()
	cfg.DatabaseURL = dsnWithSchema(t, dsn, schema)
	cfg.Instance = "test"
	cfg.GIDPrefix = e.prefix
	cfg.TxnIDPrefix = e.prefix
	cfg.PoolSize = 8
	if o.poolSize > 0 {
		cfg.PoolSize = o.poolSize
	}
	cfg.MaxConns = 40
	cfg.RecoveryInterval = 200 * time.Millisecond
	cfg.InstanceLease = time.Second
	if o.secondDB {
		dsn2 := needEnv(t, "DATABASE_URL_2")
		e.db2 = createSchema(t, dsn2, schema)
		cfg.Databases = map[string]string{"other": dsnWithSchema(t, dsn2, schema)}
	}

	e.topic = e.prefix + "-orders"
	if len(o.brokers) > 0 {
		e.brokers = o.brokers
	} else if useKfake() {
		k, err := devstack.StartKafka(ctx)
		require.NoError(t, err)
		t.Cleanup(k.Stop)
		e.brokers = k.Brokers()
	} else {
		e.brokers = strings.Split(needEnv(t, "KAFKA_BROKERS"), ",")
	}
	e.createTopic(e.topic, 3)
	cfg.Brokers = e.brokers
	// The retention runs throughout every test (R4), at the shortest window the test's settings
	// allow, unless the test sets its own; clients of the tests retry an id for seconds.
	cfg.RetryWindow = testRetryWindow
	cfg.RetentionInterval = time.Second
	if o.configure != nil {
		o.configure(&cfg)
	}
	if cfg.Retention == service.Defaults().Retention {
		cfg.Retention = cfg.RetentionFloor()
	}
	e.cfg = cfg
	// Registered first, so it runs last: after every coordinator of the test has stopped.
	t.Cleanup(func() {
		e.rollbackLeftovers(dsn)
		if e.db2 != nil {
			e.rollbackLeftovers(os.Getenv("DATABASE_URL_2"))
		}
	})
	return e
}

// rollbackLeftovers rolls back prepared transactions with this test's prefix, so a failing test
// does not hold locks for the next.
func (e *env) rollbackLeftovers(dsn string) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1", e.prefix+"\\_%")
	if err != nil {
		return
	}
	gids, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, g := range gids {
		_, _ = c.Exec(ctx, "ROLLBACK PREPARED '"+g+"'")
	}
	// The test's log is gone: so is its claim on the namespace.
	_, _ = c.Exec(ctx, "DELETE FROM kpgtx.namespaces WHERE namespace = $1", e.prefix)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (e *env) createTopic(topic string, partitions int32) {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	require.NoError(e.t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, max(1, e.rf), nil, topic)
	require.NoError(e.t, err)
	require.NoError(e.t, resp.Err, "create topic %s", topic)
	if !useKfake() {
		e.t.Cleanup(func() {
			cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
			if err != nil {
				return
			}
			defer cl.Close()
			_, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), topic)
		})
	}
}

// response is an API answer.
type response struct {
	Status int
	Body   map[string]any
	Raw    []byte
}

func (r response) str(path ...string) string {
	v := r.get(path...)
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func (r response) get(path ...string) any {
	var cur any = r.Body
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func (e *env) do(method, path string, body any) response {
	e.t.Helper()
	r, err := e.send(method, path, body)
	require.NoError(e.t, err)
	return r
}

// postQuiet is post for goroutines: it reports errors with t.Error instead of stopping.
func (e *env) postQuiet(body any) response {
	r, err := e.send(http.MethodPost, "/v1/transactions", body)
	if err != nil {
		e.t.Error(err)
	}
	return r
}

func (e *env) send(method, path string, body any) (response, error) {
	return sendTo(e.srv.URL, method, path, body)
}

// sendTo sends a request to the instance serving at base.
func sendTo(base, method, path string, body any) (response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	r := response{Status: resp.StatusCode, Raw: raw}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber() // producer ids exceed float64's integers
		if err := dec.Decode(&r.Body); err != nil {
			return r, fmt.Errorf("body %s: %w", raw, err)
		}
	}
	return r, nil
}

// settled waits until the final writes of the commits this instance answered have ended
// (coord/finals.go): a test that reads log rows straight from the table after a load calls it
// first, as a GET on this instance would wait for the one row it reads.
func (e *env) settled() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(e.t, e.svc.Coord.WaitFinals(ctx), "the final writes of answered commits")
}

func (e *env) post(body any) response {
	e.t.Helper()
	return e.do(http.MethodPost, "/v1/transactions", body)
}

// countOrders counts rows with the id in the default database (pool may be e.db or e.db2).
func countRows(t testing.TB, pool *pgxpool.Pool, id string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM orders WHERE id = $1", id).Scan(&n))
	return n
}

// preparedLeft lists prepared gids of this test still on the server.
func (e *env) preparedLeft() []string {
	e.t.Helper()
	rows, err := e.db.Query(context.Background(), "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1", e.prefix+"\\_%")
	require.NoError(e.t, err)
	gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(e.t, err)
	return gids
}

// committedWithKey is how many committed records of the env's topic carry key.
func (e *env) committedWithKey(key string) int {
	e.t.Helper()
	n := 0
	for _, r := range e.committedRecords(e.topic) {
		if string(r.Key) == key {
			n++
		}
	}
	return n
}

// committedRecords returns what a read_committed consumer reads from the topic, by
// "partition/offset". To know where the end is, it first appends an end marker to every
// partition: a read_committed consumer delivers the marker only after every transaction before
// it is decided, and skips aborted batches.
func (e *env) committedRecords(topic string) map[string]*kgo.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(e.t, err)
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	require.NoError(e.t, err)
	require.NoError(e.t, details[topic].Err)
	marker := "__end__" + randHex(4)
	pending := map[int32]bool{}
	for p := range details[topic].Partitions {
		pending[p] = true
		require.NoError(e.t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(marker)}).FirstErr())
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(e.t, err)
	defer consumer.Close()
	out := map[string]*kgo.Record{}
	for len(pending) > 0 {
		fetches := consumer.PollFetches(ctx)
		require.NoError(e.t, ctx.Err(), "timed out reading %s; partitions still pending %v", topic, pending)
		fetches.EachError(func(_ string, _ int32, err error) { require.NoError(e.t, err) })
		fetches.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == marker {
				delete(pending, r.Partition)
				return
			}
			if strings.HasPrefix(string(r.Key), "__end__") {
				return
			}
			out[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = r
		})
	}
	return out
}
