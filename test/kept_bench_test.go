package test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// keptInstance owns the rows of the inline-kept rows, on a log of their own.
const keptInstance = "bench-kept"

// keptMaxConns bounds the log's pool and the participant's, as COORDINATOR_DB_MAX_CONNS bounds
// the coordinator's in this benchmark.
const keptMaxConns = 96

// kept is a request made with every statement and log write the coordinator's guarantees keep,
// by the coordinator's own packages, inline (the rows inline-kept and inline-kept-100x):
//
//   - the request's row, durable before its work (txlog.Log.Begin, group commit on, as the
//     coordinator runs it): a 202 is settled from it (docs/decisions.md, "The active row stays
//     durable"), and I6 needs it before any PREPARE;
//   - the SQL side as sqltxn.Databases.Run sends it: the enter statement, a guard after every
//     statement, RESET ALL, the marker row, PREPARE TRANSACTION and DISCARD ALL (I13, I4), in
//     one round trip, beside the Kafka side;
//   - the prepared write with the Kafka ids, the record offsets and the statements' results
//     (txlog.Log.Prepared: I2, I7 and a retry's answer), before EndTxn(commit);
//   - COMMIT PREPARED, then the final write behind the answer (I1).
//
// No HTTP, no JSON body, no statement policy, no request engine (coord): the coordinator's
// p50 over this row is what those add; this row's over inline-2pc-logged is what the
// guarantees cost any implementation that makes the same writes the same way. Not atomic
// under crashes (no recovery runs on its log): it only measures the steps.
type kept struct {
	log    *txlog.Log
	sql    *sqltxn.Databases
	topic  string
	prefix string
	value  string
	finals sync.WaitGroup // the final writes behind the answers
	// finalErr is the first final write that failed: the benchmark fails with it, since a
	// row whose final write did not happen would have cost less than the coordinator's.
	mu       sync.Mutex
	finalErr error
}

// newKept prepares a log and a participant of their own (a schema, the log's migrations, an
// instance row that owns every row at epoch 1) and stops them when b ends.
func newKept(b *testing.B, value string) *kept {
	b.Helper()
	ctx := context.Background()
	e := newStore(b, envOpts{poolSize: 64})
	cfg, err := pgxpool.ParseConfig(e.cfg.DatabaseURL)
	require.NoError(b, err)
	cfg.MaxConns = keptMaxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	l := txlog.New(pool, txlog.Options{GroupCommit: true})
	require.NoError(b, txlog.Migrate(ctx, l, "up"))
	_, err = pool.Exec(ctx, `INSERT INTO coordinator_instances (instance_id, txn_id_prefix, pool_size, epoch)
		VALUES ($1, $2, 64, 1)`, keptInstance, e.prefix)
	require.NoError(b, err)
	dbs, err := sqltxn.Open(ctx, map[string]string{"default": e.cfg.DatabaseURL}, sqltxn.Options{MaxConns: keptMaxConns})
	require.NoError(b, err)
	k := &kept{log: l, sql: dbs, topic: e.topic, prefix: e.prefix, value: value}
	b.Cleanup(func() {
		k.finals.Wait()
		dbs.Close()
		l.Close()
		if k.finalErr != nil {
			b.Errorf("inline-kept: a final write failed: %v", k.finalErr)
		}
	})
	return k
}

// do makes one request of n inserts and n records with the producer cl.
func (k *kept) do(cl *kgo.Client, id string, n int) error {
	ctx := context.Background()
	gid := k.prefix + "_" + id
	sqlGID := gid + "@default"
	digest := sha256.Sum256([]byte(id))
	t := &txntype.Transaction{ID: id, GID: gid, Instance: keptInstance, Owner: keptInstance, OwnerEpoch: 1,
		SQLGIDs: []txntype.SQLGID{{Database: "default", GID: sqlGID}}, Digest: digest[:]}
	t, created, err := k.log.Begin(ctx, t)
	if err != nil {
		return err
	}
	if !created {
		return fmt.Errorf("inline-kept: the request id %s was used before", id)
	}
	stmts := make([]txntype.Statement, n)
	for i := range stmts {
		stmts[i] = txntype.Statement{Database: "default",
			Statement: "INSERT INTO orders (id, total) VALUES ($1, $2)", Args: []any{manyKey(id, i, n), 1}}
	}
	var results []txntype.SQLResult
	errc := make(chan error, 1)
	go func() {
		var err error
		results, err = k.sql.Run(ctx, "default", stmts, sqlGID, false, nil)
		errc <- err
	}()
	offsets, ids, err := produceOffsets(ctx, cl, k.topic, id, k.value, n)
	if sqlErr := <-errc; sqlErr != nil || err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		if sqlErr == nil {
			_ = k.sql.RollbackPrepared(ctx, "default", sqlGID)
		}
		return errors.Join(sqlErr, err)
	}
	t.SQL = results
	t.Kafka = &txntype.KafkaState{KafkaIDs: ids, PreparedState: ids.PreparedState(), Records: offsets}
	if err := k.log.Prepared(ctx, t); err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		_ = k.sql.RollbackPrepared(ctx, "default", sqlGID)
		return err
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return err
	}
	if err := k.sql.CommitPrepared(ctx, "default", sqlGID); err != nil {
		return err
	}
	k.finals.Go(func() {
		if err := k.log.Committed(ctx, t, time.Time{}); err != nil {
			k.mu.Lock()
			k.finalErr = cmp.Or(k.finalErr, err)
			k.mu.Unlock()
		}
	})
	return nil
}

// produceOffsets is produce with the offsets the log stores (I7) and the Kafka ids (I2).
func produceOffsets(ctx context.Context, cl *kgo.Client, topic, id, value string, n int) ([]txntype.RecordOffset, txntype.KafkaIDs, error) {
	res, err := produceRecords(ctx, cl, topic, id, value, n)
	if err != nil {
		return nil, txntype.KafkaIDs{}, err
	}
	offsets := make([]txntype.RecordOffset, len(res))
	for i, r := range res {
		offsets[i] = txntype.RecordOffset{Topic: r.Record.Topic, Partition: r.Record.Partition,
			Offset: r.Record.Offset, Timestamp: r.Record.Timestamp}
	}
	ids, err := kafkaIDs(ctx, cl)
	return offsets, ids, err
}
