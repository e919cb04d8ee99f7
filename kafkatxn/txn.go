package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Txn is one Kafka transaction on a leased transactional.id.
type Txn struct {
	pool  *Pool
	p     *producer
	began bool

	wg       sync.WaitGroup
	mu       sync.Mutex
	offsets  []txntype.RecordOffset
	writers  []writer // who wrote each record (from its promise)
	firstErr error
	released bool
	ids      *txntype.KafkaIDs // set once Prepare has checked the writers

	// withOffsets: CommitOffsets was sent (offsets.go); an abort then ends the transaction by
	// its ids, and a commit without records too.
	withOffsets bool
}

var _ txntype.KafkaTxn = (*Txn)(nil)

// TransactionalID is the leased id.
func (t *Txn) TransactionalID() string { return t.p.id }

// Begin checks the topics, begins the transaction and hands the records to the producer.
func (t *Txn) Begin(ctx context.Context, recs []txntype.Record) error {
	if err := t.pool.CheckRecords(ctx, recs); err != nil {
		return err
	}
	if err := t.p.cl.BeginTransaction(); err != nil {
		t.p.broken = true
		return classify(fmt.Errorf("begin transaction: %w", err))
	}
	t.began = true
	t.produce(ctx, recs)
	return nil
}

// Add hands more records to the open transaction (the records of another request sharing it).
// Their offsets follow the earlier ones in Prepare's answer. ctx carries the request's trace,
// which the records' headers continue.
func (t *Txn) Add(ctx context.Context, recs []txntype.Record) error {
	if !t.began {
		return errors.New("kafka: Add before Begin")
	}
	if err := t.pool.CheckRecords(ctx, recs); err != nil {
		return err
	}
	t.produce(ctx, recs)
	return nil
}

// produce hands recs to the producer; each promise stores its offset and writer at its index.
func (t *Txn) produce(ctx context.Context, recs []txntype.Record) {
	t.mu.Lock()
	base := len(t.offsets)
	t.offsets = append(t.offsets, make([]txntype.RecordOffset, len(recs))...)
	t.writers = append(t.writers, make([]writer, len(recs))...)
	t.mu.Unlock()
	traced := traceHeaders(ctx)
	for j, r := range recs {
		i := base + j
		t.wg.Add(1)
		kr := toKgo(r)
		if traced != nil && !hasTraceParent(r) {
			kr.Headers = append(kr.Headers, traced...)
		}
		t.p.cl.Produce(ctx, kr, func(kr *kgo.Record, err error) {
			defer t.wg.Done()
			t.mu.Lock()
			defer t.mu.Unlock()
			if err != nil {
				if t.firstErr == nil {
					t.firstErr = fmt.Errorf("kafka[%d] to %s: %w", j, kr.Topic, err)
				}
				return
			}
			t.offsets[i] = txntype.RecordOffset{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset,
				Timestamp: kr.Timestamp.UTC()}
			t.writers[i] = writer{producerID: kr.ProducerID, epoch: kr.ProducerEpoch, written: true}
		})
	}
}

// toKgo is the record as Kafka carries it; every part is resolved by now (coord: P1, P2).
func toKgo(r txntype.Record) *kgo.Record {
	kr := &kgo.Record{Topic: r.Topic}
	if r.Key != nil {
		kr.Key, _ = r.Key.Resolved()
		if kr.Key == nil {
			kr.Key = []byte{} // an empty key, not a null one
		}
	}
	if r.Value != nil {
		kr.Value, _ = r.Value.Resolved()
		if kr.Value == nil {
			kr.Value = []byte{}
		}
	}
	if r.Partition != nil {
		kr.Partition = *r.Partition
		withExplicitPartition(kr)
	}
	if r.Timestamp != nil {
		kr.Timestamp = r.Timestamp.Time()
	}
	if len(r.Headers) > 0 {
		kr.Headers = make([]kgo.RecordHeader, len(r.Headers))
		for i, h := range r.Headers {
			kr.Headers[i] = kgo.RecordHeader{Key: h.Name, Value: h.Value}
		}
	}
	return kr
}

// Prepare flushes and checks every record's result. kgo's Flush answers nil even when records
// failed, and a commit would then commit the transaction without them: so every promise's
// error is checked here, and any error fails phase 1.
func (t *Txn) Prepare(ctx context.Context) (txntype.KafkaState, error) {
	if err := t.p.cl.Flush(ctx); err != nil {
		return txntype.KafkaState{}, unacknowledged(fmt.Errorf("flush: %w", err))
	}
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return txntype.KafkaState{}, unacknowledged(fmt.Errorf("waiting for record results: %w", context.Cause(ctx)))
	}
	t.mu.Lock()
	err := t.firstErr
	t.mu.Unlock()
	if err != nil {
		return txntype.KafkaState{}, classify(err)
	}
	// With transactions v2 the epoch read after the flush is the one EndTxn commits.
	pid, epoch, err := t.p.cl.ProducerID(ctx)
	if err != nil {
		t.p.broken = true
		return txntype.KafkaState{}, classify(fmt.Errorf("producer id: %w", err))
	}
	ids := txntype.KafkaIDs{TransactionalID: t.p.id, ProducerID: pid, ProducerEpoch: epoch}
	// The ids about to be logged must be the ones that wrote every record: a producer
	// re-initialised mid-transaction (a new epoch, or a new producer id) would commit only the
	// records written since, and the log would name a transaction that does not hold them all.
	if err := checkWriters(ids, t.writers); err != nil {
		t.p.broken = true
		return txntype.KafkaState{}, classify(err)
	}
	t.ids = &ids
	return txntype.KafkaState{KafkaIDs: ids, Records: t.offsets}, nil
}

// Commit sends EndTxn(commit) through the producer. When the answer is not a clear success the
// client is marked for recreation: kgo refuses to retry a commit whose outcome is unknown, so the
// coordinator continues with a raw EndTxn by ids (Pool.EndTxn).
func (t *Txn) Commit(ctx context.Context) error {
	if t.offsetsOnly() {
		return t.endWithOffsets(ctx, true)
	}
	err := t.p.cl.EndTransaction(ctx, kgo.TryCommit)
	if err == nil {
		return nil
	}
	t.p.broken = true
	if endTxnAbortAsked(err) && t.ids != nil {
		// An instruction to abort, not an outcome: ask Kafka what became of it (I3).
		return t.pool.confirmAbort(ctx, *t.ids, err)
	}
	return classify(fmt.Errorf("end transaction (commit): %w", err))
}

// Abort aborts the transaction: buffered records are failed, then EndTxn(abort). Allowed only
// before the decision (I3); the coordinator never calls it after logging prepared.
func (t *Txn) Abort(ctx context.Context) error {
	if !t.began {
		return nil
	}
	if t.offsetsOnly() {
		return t.endWithOffsets(ctx, false)
	}
	if t.withOffsets {
		// Should kgo end nothing (no record was acknowledged), the recreated client's
		// InitProducerId aborts what the offsets left open.
		defer func() { t.p.broken = true }()
	}
	if err := t.p.cl.AbortBufferedRecords(ctx); err != nil {
		t.p.broken = true
		return classify(fmt.Errorf("abort buffered records: %w", err))
	}
	if err := t.p.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.p.broken = true
		return classify(fmt.Errorf("end transaction (abort): %w", err))
	}
	return nil
}

// Release returns the id to the pool, or quarantines it (keep=false) while its transaction is
// in doubt (I1). Only the first call counts.
func (t *Txn) Release(keep bool) {
	t.mu.Lock()
	if t.released {
		t.mu.Unlock()
		return
	}
	t.released = true
	t.mu.Unlock()
	if keep && t.began {
		// The promises must all have run before the client serves another transaction.
		t.wg.Wait()
	}
	t.pool.release(t.p, keep)
}

// writer is the producer id and epoch that wrote one record, as its promise reported them.
type writer struct {
	producerID int64
	epoch      int16
	written    bool
}

// errMixedWriters: the records of one transaction were not all written by the producer id and
// epoch that would be logged as prepared. Such a transaction must not be prepared (it is
// aborted): committing it would commit only part of it.
var errMixedWriters = errors.New("records of the transaction were written by another producer id or epoch")

// checkWriters refuses a transaction unless every record was written by exactly ids' producer id
// and epoch (I2: the logged ids are those of the whole transaction).
func checkWriters(ids txntype.KafkaIDs, ws []writer) error {
	for i, w := range ws {
		switch {
		case !w.written:
			return fmt.Errorf("%w: kafka[%d] has no result", errMixedWriters, i)
		case w.producerID != ids.ProducerID || w.epoch != ids.ProducerEpoch:
			return fmt.Errorf("%w: kafka[%d] was written by producer %d epoch %d, the transaction is %s",
				errMixedWriters, i, w.producerID, w.epoch, ids.PreparedState())
		}
	}
	return nil
}
