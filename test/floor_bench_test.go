package test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The floors of BenchmarkThroughput at c=1: what a request would cost with nothing of the
// coordinator but the steps its promise needs, so that a latency goal can be told reachable or
// not before anything is built.

// inline2PCLogged is inline2PC with the Kafka ids made durable before EndTxn(commit), as I2
// requires of every variant of the protocol: one autocommit insert (one WAL flush) after both
// sides are prepared. No Begin row, no final write, no HTTP.
func inline2PCLogged(db *pgxpool.Pool, cl *kgo.Client, topic, id, value string) error {
	return inline2PCWith(db, cl, topic, id, value, func(ctx context.Context, gid, ids string) error {
		_, err := db.Exec(ctx, "INSERT INTO bench_log (gid, kafka) VALUES ($1, $2)", gid, ids)
		return err
	})
}

// inline2PCWith runs inline2PC's steps, with logPrepared (unless nil) between the prepares and
// EndTxn.
func inline2PCWith(db *pgxpool.Pool, cl *kgo.Client, topic, id, value string, logPrepared func(ctx context.Context, gid, ids string) error) error {
	ctx := context.Background()
	gid := "bench_" + id
	errc := make(chan error, 1)
	go func() {
		b := benchWork(id, gid)
		b.Queue("PREPARE TRANSACTION '" + gid + "'")
		errc <- db.SendBatch(ctx, b).Close()
	}()
	ids, err := produceOne(ctx, cl, topic, id, value, logPrepared != nil)
	if sqlErr := <-errc; sqlErr != nil || err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		if sqlErr == nil {
			_, _ = db.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'")
			return err
		}
		return sqlErr
	}
	if logPrepared != nil {
		if err := logPrepared(ctx, gid, ids); err != nil {
			_ = cl.EndTransaction(ctx, kgo.TryAbort)
			_, _ = db.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'")
			return err
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return err
	}
	_, err = db.Exec(ctx, "COMMIT PREPARED '"+gid+"'")
	return err
}

// inline2PCGIDLog makes the participant's PREPARE the durable record of the Kafka ids: the
// statements and the marker run while the record is produced, and only once Kafka acknowledged
// it is the transaction prepared, under a gid that names the transactional id, producer id and
// epoch. One WAL flush fewer than inline2PCLogged on the request's path; only a request with one
// database can work so (the PREPARE of one database says nothing of another's).
func inline2PCGIDLog(db *pgxpool.Pool, cl *kgo.Client, topic, id, value string) error {
	ctx := context.Background()
	conn, err := db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	errc := make(chan error, 1)
	go func() { errc <- conn.SendBatch(ctx, benchWork(id, "bench_"+id)).Close() }()
	ids, err := produceOne(ctx, cl, topic, id, value, true)
	if sqlErr := <-errc; sqlErr != nil || err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		_, _ = conn.Exec(ctx, "ROLLBACK")
		if sqlErr != nil {
			return sqlErr
		}
		return err
	}
	gid := "bench_" + id + "#" + ids
	if _, err := conn.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'"); err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		return err
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "COMMIT PREPARED '"+gid+"'")
	return err
}

// benchWork is the SQL side of a benchmark request, up to its PREPARE: BEGIN, the insert, the
// marker row.
func benchWork(id, gid string) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("INSERT INTO orders (id, total) VALUES ($1, $2)", id, 1)
	b.Queue("INSERT INTO bench_markers (gid) VALUES ($1)", gid)
	return b
}

// produceOne begins a Kafka transaction, produces one record and waits for its acknowledgement,
// and with named names the transaction as the log would: "transactionalId/producerId:epoch".
func produceOne(ctx context.Context, cl *kgo.Client, topic, id, value string, named bool) (string, error) {
	if err := cl.BeginTransaction(); err != nil {
		return "", err
	}
	rec := &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(value)}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return "", err
	}
	if !named {
		return "", nil
	}
	txnID, _ := cl.OptValue(kgo.TransactionalID).(string)
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/%d:%d", txnID, pid, epoch), nil
}
