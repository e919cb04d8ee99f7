package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Offsets in a transaction (consume-transform-produce, KIP-447). The producer clients of the
// pool belong to no consumer group, so kgo's own GroupTransactSession cannot commit offsets for
// a request: the coordinator sends the protocol's requests itself, with the transaction's
// producer id and epoch and the member's generation, member id and instance id:
//
//   - before transactions v2 (KIP-890 part 2), AddOffsetsToTxn first: it puts the group's
//     __consumer_offsets partition into the transaction; TxnOffsetCommit is sent at version 4
//     at most (v5 is only for transactions v2);
//   - under transactions v2, TxnOffsetCommit v5 adds the partition itself; it is pinned to v5,
//     which names topics (v6 names them by topic id only, KIP-1319).
//
// The group coordinator keeps the offsets pending until the transaction's marker: a commit
// makes them the group's, an abort drops them. kgo's EndTransaction sends no EndTxn for a
// transaction in which this client produced nothing (it cannot see the offsets), so a
// transaction with offsets and no records is ended by a raw EndTxn by its ids (Commit, Abort),
// and the client, whose epoch is then behind the broker's, is recreated before its next use.

// offsetCommitRetry bounds the backoff between resends of a TxnOffsetCommit or AddOffsetsToTxn
// whose answer asks for a retry (the coordinator moving or loading, the previous transaction on
// the id still completing).
const offsetCommitRetry = 500 * time.Millisecond

// txnVersionTTL bounds how long a probed transaction.version is trusted.
const txnVersionTTL = time.Minute

// CommitOffsets commits oc's offsets in the open transaction. The first refused partition's
// error is the answer (groupError). Nothing is committed until the transaction is.
func (t *Txn) CommitOffsets(ctx context.Context, oc *txntype.OffsetCommit) error {
	if !t.began {
		return errors.New("kafka: CommitOffsets before Begin")
	}
	// From here an abort must end the transaction by its ids: the offsets' partition may be in
	// it even when the commit fails (transactions v2 adds it before the group checks).
	t.withOffsets = true
	pid, epoch, err := t.p.cl.ProducerID(ctx)
	if err != nil {
		t.p.broken = true
		return classify(fmt.Errorf("producer id: %w", err))
	}
	v2, err := t.pool.transactionsV2(ctx)
	if err != nil {
		return classify(err)
	}
	if !v2 {
		if err := t.pool.addOffsetsToTxn(ctx, t.p.id, pid, epoch, oc.GroupID); err != nil {
			return err
		}
	}
	cl, err := t.pool.groupClient(v2)
	if err != nil {
		return classify(err)
	}
	req := txnOffsetCommitRequest(t.p.id, pid, epoch, oc)
	for backoff := 20 * time.Millisecond; ; backoff = min(backoff*2, offsetCommitRetry) {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = firstPartitionError(resp)
		}
		if err == nil {
			return nil
		}
		if !groupRetriable(err) {
			return groupError(oc, err)
		}
		t.pool.cfg.Logger.Debug("offset commit answered retriable; sending it again", "group_id", oc.GroupID,
			"transactional_id", t.p.id, "error", err)
		select {
		case <-ctx.Done():
			return groupError(oc, fmt.Errorf("%w (last answer: %w)", context.Cause(ctx), err))
		case <-time.After(backoff):
		}
	}
}

func txnOffsetCommitRequest(tid string, pid int64, epoch int16, oc *txntype.OffsetCommit) *kmsg.TxnOffsetCommitRequest {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID = tid
	req.Group = oc.GroupID
	req.ProducerID, req.ProducerEpoch = pid, epoch
	req.Generation = oc.Generation()
	req.MemberID = oc.MemberID
	req.InstanceID = oc.GroupInstanceID
	idx := map[string]int{}
	for _, po := range oc.Offsets {
		i, ok := idx[po.Topic]
		if !ok {
			i = len(req.Topics)
			idx[po.Topic] = i
			rt := kmsg.NewTxnOffsetCommitRequestTopic()
			rt.Topic = po.Topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition = po.Partition
		rp.Offset = po.Offset
		rp.LeaderEpoch = -1
		rp.Metadata = po.Metadata
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	return req
}

// firstPartitionError is the first partition's error of a TxnOffsetCommit answer, naming it.
func firstPartitionError(resp *kmsg.TxnOffsetCommitResponse) error {
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return fmt.Errorf("%s partition %d: %w", rt.Topic, rp.Partition, err)
			}
		}
	}
	return nil
}

// addOffsetsToTxn puts the group's offsets partition into the transaction (before transactions
// v2), resending while the answer asks for it.
func (p *Pool) addOffsetsToTxn(ctx context.Context, tid string, pid int64, epoch int16, group string) error {
	req := kmsg.NewPtrAddOffsetsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = tid, pid, epoch, group
	for backoff := 20 * time.Millisecond; ; backoff = min(backoff*2, offsetCommitRetry) {
		resp, err := req.RequestWith(ctx, p.admin)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err == nil {
			return nil
		}
		if !groupRetriable(err) {
			if errors.Is(err, kerr.GroupAuthorizationFailed) {
				return groupError(&txntype.OffsetCommit{GroupID: group}, err)
			}
			return classify(fmt.Errorf("add offsets of group %q to the transaction: %w", group, err))
		}
		select {
		case <-ctx.Done():
			return classify(fmt.Errorf("add offsets of group %q to the transaction: %w (last answer: %w)", group, context.Cause(ctx), err))
		case <-time.After(backoff):
		}
	}
}

// transactionsV2 reports whether the cluster runs transactions v2 (transaction.version ≥ 2),
// probed at most once per txnVersionTTL.
func (p *Pool) transactionsV2(ctx context.Context) (bool, error) {
	p.tv.mu.Lock()
	defer p.tv.mu.Unlock()
	if !p.tv.at.IsZero() && time.Since(p.tv.at) < txnVersionTTL {
		return p.tv.v2, nil
	}
	cp, err := p.Probe(ctx)
	if err != nil {
		return false, fmt.Errorf("transaction version: %w", err)
	}
	p.tv.v2, p.tv.at = cp.TransactionVersion >= 2, time.Now()
	return p.tv.v2, nil
}

// groupClient is the client that sends TxnOffsetCommit, pinned to the version the cluster's
// transaction version asks for (v5 under transactions v2, v4 before).
func (p *Pool) groupClient(v2 bool) (*kgo.Client, error) {
	p.tv.mu.Lock()
	defer p.tv.mu.Unlock()
	max, slot := int16(4), &p.tv.v1Client
	if v2 {
		max, slot = 5, &p.tv.v2Client
	}
	if *slot != nil {
		return *slot, nil
	}
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), max)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.cfg.Brokers...), kgo.MaxVersions(vs)}, p.cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: group client: %w", err)
	}
	*slot = cl
	return cl, nil
}

// txnVersion is what the pool knows of the cluster's transaction version, and its group
// clients.
type txnVersion struct {
	mu                 sync.Mutex
	v2                 bool
	at                 time.Time
	v1Client, v2Client *kgo.Client
}

func (tv *txnVersion) close() {
	tv.mu.Lock()
	defer tv.mu.Unlock()
	for _, cl := range []*kgo.Client{tv.v1Client, tv.v2Client} {
		if cl != nil {
			cl.Close()
		}
	}
}

// endWithOffsets ends a transaction that carries offsets and no records by a raw EndTxn by its
// ids (kgo would send none), and marks the client for recreation: its epoch is behind the
// broker's after the EndTxn. Answers as Pool.EndTxn.
func (t *Txn) endWithOffsets(ctx context.Context, commit bool) error {
	t.p.broken = true
	ids := t.ids
	if ids == nil {
		pid, epoch, err := t.p.cl.ProducerID(ctx)
		if err != nil {
			return classify(fmt.Errorf("producer id: %w", err))
		}
		ids = &txntype.KafkaIDs{TransactionalID: t.p.id, ProducerID: pid, ProducerEpoch: epoch}
	}
	return t.pool.EndTxn(ctx, *ids, commit)
}

// offsetsOnly reports a transaction with offsets in which nothing was produced.
func (t *Txn) offsetsOnly() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.withOffsets && len(t.offsets) == 0
}
