package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txntype"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	began := time.Now()
	pg, err := StartPostgres(ctx, PostgresOptions{Logger: testLogger(t)})
	require.NoError(t, err)
	t.Logf("StartPostgres took %s", time.Since(began))
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })

	require.Regexp(t, `^postgres://postgres@127\.0\.0\.1:\d+/coordinator\?sslmode=disable$`, pg.DSN())
	dir := pg.dir
	require.DirExists(t, dir)

	conn, err := pgx.Connect(ctx, pg.DSN())
	require.NoError(t, err)

	var db, mpt string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	require.Equal(t, "coordinator", db)
	require.NoError(t, conn.QueryRow(ctx, "SHOW max_prepared_transactions").Scan(&mpt))
	require.Equal(t, "100", mpt)

	_, err = conn.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO t VALUES (1)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "PREPARE TRANSACTION 'devstack-test'")
	require.NoError(t, err)

	var prepared int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'devstack-test'").Scan(&prepared))
	require.Equal(t, 1, prepared)

	// Finish it from another session, as the coordinator does after a crash.
	conn2, err := pgx.Connect(ctx, pg.DSN())
	require.NoError(t, err)
	_, err = conn2.Exec(ctx, "COMMIT PREPARED 'devstack-test'")
	require.NoError(t, err)
	var n int
	require.NoError(t, conn2.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, conn2.Close(ctx))
	// conn stays open: Stop must shut down despite open client connections.

	port := strings.TrimPrefix(strings.Split(strings.Split(pg.DSN(), "@")[1], "/")[0], "127.0.0.1:")
	began = time.Now()
	require.NoError(t, pg.Stop(ctx))
	t.Logf("Stop took %s", time.Since(began))
	require.NoDirExists(t, dir)
	_, err = net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
	require.Error(t, err, "port must be closed after Stop")
	require.NoError(t, pg.Stop(ctx), "Stop is idempotent")
}

func TestPostgresGivenDirAndPort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	base := t.TempDir()
	// When root, the postgres user must be able to reach the directory (t.TempDir and its parent are 0700).
	require.NoError(t, os.Chmod(filepath.Dir(base), 0o755))
	require.NoError(t, os.Chmod(base, 0o755))
	dir := filepath.Join(base, "pg")
	port, err := freePort()
	require.NoError(t, err)

	pg, err := StartPostgres(ctx, PostgresOptions{Dir: dir, Port: port})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })
	require.Equal(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/coordinator?sslmode=disable", port), pg.DSN())
	require.FileExists(t, filepath.Join(dir, "postgres.log"))

	// The same port again fails with the server's log in the error, and cleans up after itself.
	dir2 := filepath.Join(base, "pg2")
	pg2, err := StartPostgres(ctx, PostgresOptions{Dir: dir2, Port: port})
	require.Nil(t, pg2)
	require.Error(t, err)
	t.Logf("second start on the same port: %v", err)
	require.ErrorIs(t, err, errPortTaken)
	require.NoDirExists(t, dir2)

	require.NoError(t, pg.Stop(ctx))
	require.NoDirExists(t, dir)
}

func TestPostgresLongDir(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	base := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(base), 0o755))
	require.NoError(t, os.Chmod(base, 0o755))
	// Too long for a Unix socket path: the server listens on TCP only.
	dir := filepath.Join(base, strings.Repeat("d", 100))
	pg, err := StartPostgres(ctx, PostgresOptions{Dir: dir})
	require.NoError(t, err)
	require.NoError(t, pg.Stop(ctx))
	require.NoDirExists(t, dir)
}

func TestPostgresRefusesNonEmptyDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o600))
	_, err := StartPostgres(context.Background(), PostgresOptions{Dir: dir})
	require.ErrorContains(t, err, "not empty")
	require.FileExists(t, filepath.Join(dir, "keep"))
}

func TestPostgresGivenDirNotReachable(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only root hands the directory to another user")
	}
	parent := t.TempDir()
	require.NoError(t, os.Chmod(parent, 0o700))
	dir := filepath.Join(parent, "pg")
	_, err := StartPostgres(context.Background(), PostgresOptions{Dir: dir})
	require.ErrorContains(t, err, "not reachable by user")
	require.NoDirExists(t, dir)
}

func TestFindPostgresBinDir(t *testing.T) {
	t.Parallel()
	notFound := func(string) (string, error) { return "", errors.New("not found") }

	root := t.TempDir()
	for _, v := range []string{"9.6", "13", "16"} {
		bin := filepath.Join(root, v, "bin")
		require.NoError(t, os.MkdirAll(bin, 0o755))
		if v == "16" {
			continue // client-only install: no server binaries
		}
		for _, name := range []string{"initdb", "postgres"} {
			require.NoError(t, os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755))
		}
	}
	dir, err := findPostgresBinDir(notFound, filepath.Join(root, "*", "bin"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "13", "bin"), dir)

	onPath := func(name string) (string, error) {
		if name == "initdb" {
			return filepath.Join(root, "9.6", "bin", "initdb"), nil
		}
		return "", errors.New("not found")
	}
	dir, err = findPostgresBinDir(onPath, filepath.Join(root, "none", "*"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "9.6", "bin"), dir)

	_, err = findPostgresBinDir(notFound, filepath.Join(root, "none", "*"))
	require.ErrorContains(t, err, "apt-get install postgresql")
}

func TestKafkaTransactions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const topic = "devstack-test"
	k, err := StartKafka(ctx, topic)
	require.NoError(t, err)
	t.Cleanup(func() {
		k.Stop()
		k.Stop() // idempotent
	})
	require.Len(t, k.Brokers(), 1)
	require.True(t, strings.HasPrefix(k.Brokers()[0], "127.0.0.1:"))

	producer, err := kgo.NewClient(
		kgo.SeedBrokers(k.Brokers()...),
		kgo.TransactionalID("devstack-test-txn"),
		kgo.DefaultProduceTopic(topic),
	)
	require.NoError(t, err)
	t.Cleanup(producer.Close) // clients close before the cluster stops (cleanups run last-in first-out)

	// An aborted transaction stays invisible to read_committed consumers.
	require.NoError(t, producer.BeginTransaction())
	require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Value: []byte("aborted")}).FirstErr())
	require.NoError(t, producer.EndTransaction(ctx, kgo.TryAbort))

	require.NoError(t, producer.BeginTransaction())
	var produceErr error
	producer.Produce(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("committed")}, func(_ *kgo.Record, err error) {
		produceErr = err
	})
	require.NoError(t, producer.Flush(ctx))
	require.NoError(t, produceErr)
	require.NoError(t, producer.EndTransaction(ctx, kgo.TryCommit))

	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(k.Brokers()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	require.NoError(t, err)
	t.Cleanup(consumer.Close)

	var got []string
	for len(got) == 0 {
		fetches := consumer.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fetches.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	require.Equal(t, []string{"committed"}, got)

	// Topics are not auto-created, even when the client asks for it.
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = true
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("no-such-topic")
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, consumer)
	require.NoError(t, err)
	require.Len(t, resp.Topics, 1)
	require.ErrorIs(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode), kerr.UnknownTopicOrPartition)
}

// TestPostgresFetched: with no server binaries on the lookup path, a PostgreSQL build is
// fetched (once; then taken from the cache) and runs, as an unprivileged user when root, with
// prepared transactions enabled.
func TestPostgresFetched(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	pg, err := StartPostgres(ctx, PostgresOptions{Path: t.TempDir(), Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })

	conn, err := pgx.Connect(ctx, pg.DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var version, mpt string
	require.NoError(t, conn.QueryRow(ctx, "SHOW server_version").Scan(&version))
	assert.True(t, strings.HasPrefix(PostgresVersion, version+"."), "server %s, fetched %s", version, PostgresVersion)
	require.NoError(t, conn.QueryRow(ctx, "SHOW max_prepared_transactions").Scan(&mpt))
	require.Equal(t, "100", mpt)
	_, err = conn.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "PREPARE TRANSACTION 'fetched'")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "COMMIT PREPARED 'fetched'")
	require.NoError(t, err)
	assertResetInPipeline(t, ctx, pg.DSN(), conn)
	require.NoError(t, pg.Stop(ctx))
}

// assertResetInPipeline: the participant's reset (DISCARD ALL) rides in the pipeline right after
// PREPARE TRANSACTION or COMMIT, which newer servers allow only as the first statement of a new
// implicit transaction; were it refused, the participant would close its connection after every
// request, so the session must stay the same one across requests.
func assertResetInPipeline(t *testing.T, ctx context.Context, dsn string, admin *pgx.Conn) {
	t.Helper()
	_, err := admin.Exec(ctx, "CREATE TABLE reset_probe (id text PRIMARY KEY)")
	require.NoError(t, err)
	d, err := sqltxn.Open(ctx, map[string]string{"default": dsn}, sqltxn.Options{MaxConns: 1, Logger: testLogger(t)})
	require.NoError(t, err)
	defer d.Close()
	pid := func() uint32 {
		pool, err := d.Pool("default")
		require.NoError(t, err)
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		return c.Conn().PgConn().PID()
	}
	before := pid()
	for i, onePhase := range []bool{false, true, false} {
		gid := fmt.Sprintf("reset_probe_%d@default", i)
		stmt := txntype.Statement{Database: "default", Statement: "INSERT INTO reset_probe VALUES ($1)", Args: []any{gid}}
		_, err := d.Run(ctx, "default", []txntype.Statement{stmt}, gid, onePhase, nil)
		require.NoError(t, err)
		if !onePhase {
			require.NoError(t, d.CommitPrepared(ctx, "default", gid))
		}
	}
	assert.Equal(t, before, pid(), "the session was reset in the pipeline, not closed")
}

// TestLookIn: a lookup path finds binaries only in its directories.
func TestLookIn(t *testing.T) {
	t.Parallel()
	empty, full := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(full, "initdb"), []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(full, "postgres"), []byte("#!/bin/sh\n"), 0o755))
	_, err := findPostgresBinDir(lookIn(empty), "")
	require.ErrorIs(t, err, errNoServer)
	dir, err := findPostgresBinDir(lookIn(empty+string(filepath.ListSeparator)+full), "")
	require.NoError(t, err)
	require.Equal(t, full, dir)
}

// TestKafkaOnPort: the in-process Kafka listens on the port asked for, a taken port is
// ErrPortInUse, and topics are created on request (CreateTopics), never on first use.
func TestKafkaOnPort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A free port may be taken by a parallel test between its release and the start (a clean CI
	// run lost that race): another free port is tried then.
	var port int
	var k *Kafka
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port = ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		k, err = StartKafkaOn(ctx, port, "seeded")
		if errors.Is(err, ErrPortInUse) && attempt < 5 {
			continue
		}
		require.NoError(t, err)
		break
	}
	t.Cleanup(k.Stop)
	require.Equal(t, []string{fmt.Sprintf("127.0.0.1:%d", port)}, k.Brokers())

	_, err := StartKafkaOn(ctx, port)
	require.ErrorIs(t, err, ErrPortInUse)

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	created, err := adm.CreateTopic(ctx, 1, 1, nil, "made-on-request")
	require.NoError(t, err)
	require.NoError(t, created.Err)
	topics, err := adm.ListTopics(ctx)
	require.NoError(t, err)
	assert.True(t, topics.Has("seeded"))
	assert.True(t, topics.Has("made-on-request"))

	// Producing to a topic nobody created fails: no auto-creation.
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	err = cl.ProduceSync(pctx, &kgo.Record{Topic: "never-created", Value: []byte("x")}).FirstErr()
	require.Error(t, err)
}
