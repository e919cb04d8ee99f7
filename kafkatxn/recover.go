package kafkatxn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrUndecidable: the outcome oracle cannot tell from the log's offsets whether the transaction
// committed (the records are gone: topic deleted, offsets truncated). An operator must look.
var ErrUndecidable = errors.New("kafka outcome cannot be read back")

// errStillOpen: the transaction's records are not yet decided (the last stable offset has not
// passed them); ask again later.
var errStillOpen = errors.New("kafka transaction still open")

// Unquarantine returns an id to the pool once its transaction's final state is durable (I1).
// The new client's InitProducerId aborts whatever may still be open on the id (I6).
//
// Concurrent calls for one id (the members of a shared Kafka transaction resolved in parallel)
// release it once: the first claims the release, the others return at once. Two clients of one
// id in the pool would fence each other, and the free list would overflow.
func (p *Pool) Unquarantine(ctx context.Context, id string) error {
	p.mu.Lock()
	if !p.quarantined[id] || p.releasing[id] {
		p.mu.Unlock()
		return nil
	}
	p.releasing[id] = true
	p.mu.Unlock()
	if pr := p.unpark(id); pr != nil {
		// Its transaction was ended through it (waiting.go): it serves the next one as is.
		p.mu.Lock()
		delete(p.releasing, id)
		delete(p.quarantined, id)
		delete(p.since, id)
		p.mu.Unlock()
		p.free <- pr
		return nil
	}
	pr, err := p.newProducer(id)
	if err == nil {
		if _, _, err = pr.cl.ProducerID(ctx); err != nil {
			pr.cl.Close()
			err = fmt.Errorf("kafka: re-initialise %s: %w", id, err)
		}
	}
	p.mu.Lock()
	delete(p.releasing, id)
	if err == nil {
		delete(p.quarantined, id)
		delete(p.since, id)
	}
	p.mu.Unlock()
	if err != nil {
		return err
	}
	p.cfg.Logger.Info("transactional id back in the pool", "transactional_id", id)
	p.free <- pr
	return nil
}

// Owns reports whether the id belongs to this pool.
func (p *Pool) Owns(id string) bool {
	for n := 0; n < p.cfg.PoolSize; n++ {
		if p.TransactionalID(n) == id {
			return true
		}
	}
	return false
}

// Reinit initialises the given transactional ids once, aborting anything left open on them:
// used when taking over a dead instance's ids (I6, I8). The caller must own them (the dead
// instance's lock is held).
func (p *Pool) Reinit(ctx context.Context, ids []string) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs error
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			pr, err := p.newProducer(id)
			if err == nil {
				_, _, err = pr.cl.ProducerID(ctx)
				pr.cl.Close()
			}
			if err != nil {
				mu.Lock()
				errs = errors.Join(errs, fmt.Errorf("re-initialise %s: %w", id, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// Outcome is the outcome oracle (I7): when EndTxn's answer is ambiguous, the logged offsets are
// read back the way a read_committed consumer sees them. It fetches, with isolation
// read_committed, from the first logged record's offset on that partition's leader: once the
// last stable offset is past the record, the transaction is decided, and the broker lists the
// aborted transactions of the fetched range. The batch at the offset must be ours (same producer
// id, transactional); it was aborted if our producer id is listed as aborted from at or before
// it, and committed otherwise. Answers: true committed, false aborted; errStillOpen while
// undecided; ErrUndecidable when the records are gone or not ours.
func (p *Pool) Outcome(ctx context.Context, ids txntype.KafkaIDs, recs []txntype.RecordOffset) (bool, error) {
	if len(recs) == 0 {
		// Also a transaction that carried only a consumer group's offsets (O3, docs/design.md):
		// the group's committed offsets do not name the transaction that wrote them.
		return false, fmt.Errorf("%w: no offsets logged", ErrUndecidable)
	}
	rec := recs[0]
	details, err := p.adm.ListTopics(ctx, rec.Topic)
	if err != nil {
		return false, fmt.Errorf("kafka: metadata of %s: %w", rec.Topic, err)
	}
	d, ok := details[rec.Topic]
	if !ok || d.Err != nil {
		return false, fmt.Errorf("%w: topic %s: %v", ErrUndecidable, rec.Topic, d.Err)
	}
	part, ok := d.Partitions[rec.Partition]
	if !ok {
		return false, fmt.Errorf("%w: %s has no partition %d", ErrUndecidable, rec.Topic, rec.Partition)
	}

	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.IsolationLevel = 1 // read_committed
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = 1 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = rec.Topic
	rt.TopicID = d.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = rec.Partition
	rp.FetchOffset = rec.Offset
	rp.CurrentLeaderEpoch = -1
	rp.LastFetchedEpoch = -1
	rp.LogStartOffset = -1
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, p.admin.Broker(int(part.Leader)))
	if err != nil {
		return false, fmt.Errorf("kafka: fetch %s/%d@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return false, fmt.Errorf("kafka: fetch %s/%d: unexpected response shape", rec.Topic, rec.Partition)
	}
	fp := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(fp.ErrorCode); err != nil {
		if errors.Is(err, kerr.OffsetOutOfRange) {
			return false, fmt.Errorf("%w: offset %d of %s/%d: %w", ErrUndecidable, rec.Offset, rec.Topic, rec.Partition, err)
		}
		return false, fmt.Errorf("kafka: fetch %s/%d: %w", rec.Topic, rec.Partition, err)
	}
	if fp.LastStableOffset <= rec.Offset {
		return false, fmt.Errorf("%w: last stable offset %d not past %d", errStillOpen, fp.LastStableOffset, rec.Offset)
	}
	batch, err := batchAt(fp.RecordBatches, rec.Offset)
	if err != nil {
		return false, fmt.Errorf("%w: %s/%d@%d: %w", ErrUndecidable, rec.Topic, rec.Partition, rec.Offset, err)
	}
	if batch.ProducerID != ids.ProducerID || batch.Attributes&0x10 == 0 {
		return false, fmt.Errorf("%w: the batch at %s/%d@%d belongs to producer %d, not to %s",
			ErrUndecidable, rec.Topic, rec.Partition, rec.Offset, batch.ProducerID, ids.PreparedState())
	}
	for _, a := range fp.AbortedTransactions {
		if a.ProducerID == ids.ProducerID && a.FirstOffset <= rec.Offset {
			return false, nil
		}
	}
	return true, nil
}

// batchAt finds the record batch holding offset in a fetch response's raw batches.
func batchAt(raw []byte, offset int64) (kmsg.RecordBatch, error) {
	for len(raw) >= 12 {
		length := int(binary.BigEndian.Uint32(raw[8:12]))
		size := 12 + length
		if size > len(raw) {
			break // a partial batch at the end of the response
		}
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw[:size]); err != nil {
			return b, fmt.Errorf("decode record batch: %w", err)
		}
		if b.FirstOffset <= offset && offset <= b.FirstOffset+int64(b.LastOffsetDelta) {
			return b, nil
		}
		raw = raw[size:]
	}
	return kmsg.RecordBatch{}, errors.New("no batch holds the offset")
}
