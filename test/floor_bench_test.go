package test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/txntype"
)

// The floors of BenchmarkThroughput at c=1: what a request would cost with nothing of the
// coordinator but the steps its promise needs, so that a latency goal can be told reachable or
// not before anything is built.

// inline2PCLogged is inline2PC with the Kafka ids made durable before EndTxn(commit), as I2
// requires of every variant of the protocol: one autocommit insert (one WAL flush) after both
// sides are prepared. No Begin row, no final write, no HTTP.
func inline2PCLogged(db *pgxpool.Pool, cl *kgo.Client, topic, id, value string) error {
	return inline2PCWith(db, cl, topic, id, value, 1, logPrepared(db))
}

// inline2PCLoggedMany is inline2PCLogged with manyPerRequest inserts and as many records: the
// floor of the "-100x" rows, what the promise alone costs a pipeline batch's work.
func inline2PCLoggedMany(db *pgxpool.Pool, cl *kgo.Client, topic, id, value string) error {
	return inline2PCWith(db, cl, topic, id, value, manyPerRequest, logPrepared(db))
}

// inline2PCBegun is inline2PCLogged with the two other log writes the coordinator makes: the
// request's row durable before its work (docs/decisions.md, "The active row stays durable": a
// 202 is settled from it, and its transactional id released), one autocommit insert (one WAL
// flush) more on the request's path; and its final write behind the answer (I1: the id is not
// reused before it is durable), which the next request's writes meet under way.
func inline2PCBegun(db *pgxpool.Pool, cl *kgo.Client, topic, id, value string) error {
	ctx := context.Background()
	row := "begun_" + id
	if _, err := db.Exec(ctx, "INSERT INTO bench_log (gid, kafka) VALUES ($1, '')", row); err != nil {
		return err
	}
	if err := inline2PCLogged(db, cl, topic, id, value); err != nil {
		return err
	}
	go func() { _, _ = db.Exec(ctx, "UPDATE bench_log SET kafka = 'committed' WHERE gid = $1", row) }()
	return nil
}

// logPrepared is the floors' prepared write: the Kafka ids, one autocommit insert.
func logPrepared(db *pgxpool.Pool) func(ctx context.Context, gid, ids string) error {
	return func(ctx context.Context, gid, ids string) error {
		_, err := db.Exec(ctx, "INSERT INTO bench_log (gid, kafka) VALUES ($1, $2)", gid, ids)
		return err
	}
}

// inline2PCWith runs inline2PC's steps for n inserts and n records, with logPrepared (unless
// nil) between the prepares and EndTxn.
func inline2PCWith(db *pgxpool.Pool, cl *kgo.Client, topic, id, value string, n int, logPrepared func(ctx context.Context, gid, ids string) error) error {
	ctx := context.Background()
	gid := "bench_" + id
	errc := make(chan error, 1)
	go func() {
		b := benchWork(id, gid, n)
		b.Queue("PREPARE TRANSACTION '" + gid + "'")
		errc <- db.SendBatch(ctx, b).Close()
	}()
	ids, err := produce(ctx, cl, topic, id, value, n, logPrepared != nil)
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
	go func() { errc <- conn.SendBatch(ctx, benchWork(id, "bench_"+id, 1)).Close() }()
	ids, err := produce(ctx, cl, topic, id, value, 1, true)
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

// benchWork is the SQL side of a benchmark request, up to its PREPARE: BEGIN, the n inserts
// (keys as manyKey names them), the marker row.
func benchWork(id, gid string, n int) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for i := range n {
		b.Queue("INSERT INTO orders (id, total) VALUES ($1, $2)", manyKey(id, i, n), 1)
	}
	b.Queue("INSERT INTO bench_markers (gid) VALUES ($1)", gid)
	return b
}

// manyKey is the key of a request's i-th insert and record of n: the request id alone when
// there is one.
func manyKey(id string, i, n int) string {
	if n == 1 {
		return id
	}
	return fmt.Sprintf("%s-%03d", id, i)
}

// produce begins a Kafka transaction, produces n records and waits for their acknowledgement,
// and with named names the transaction as the log would: "transactionalId/producerId:epoch".
func produce(ctx context.Context, cl *kgo.Client, topic, id, value string, n int, named bool) (string, error) {
	if _, err := produceRecords(ctx, cl, topic, id, value, n); err != nil || !named {
		return "", err
	}
	ids, err := kafkaIDs(ctx, cl)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/%d:%d", ids.TransactionalID, ids.ProducerID, ids.ProducerEpoch), nil
}

// produceRecords begins a Kafka transaction, produces n records (keys as manyKey names them)
// and waits for their acknowledgement.
func produceRecords(ctx context.Context, cl *kgo.Client, topic, id, value string, n int) (kgo.ProduceResults, error) {
	if err := cl.BeginTransaction(); err != nil {
		return nil, err
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(manyKey(id, i, n)), Value: []byte(value)}
	}
	res := cl.ProduceSync(ctx, recs...)
	return res, res.FirstErr()
}

// kafkaIDs are the transactional id, producer id and epoch of cl's transaction.
func kafkaIDs(ctx context.Context, cl *kgo.Client) (txntype.KafkaIDs, error) {
	txnID, _ := cl.OptValue(kgo.TransactionalID).(string)
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return txntype.KafkaIDs{}, fmt.Errorf("producer id: %w", err)
	}
	return txntype.KafkaIDs{TransactionalID: txnID, ProducerID: pid, ProducerEpoch: epoch}, nil
}
