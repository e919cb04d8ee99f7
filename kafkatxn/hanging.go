package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Hanging transactions (upstream KAFKA-20734). A broker can complete a transaction in its
// transaction log without writing the transaction's marker to a partition that has no leader
// at that moment (seen with Kafka 4.3 and 4.4 when a single broker restarts). The records on that
// partition then stay open: they block read_committed consumers at the partition's last stable
// offset, and the producer's next transaction that writes to the partition decides them with its
// own marker, whatever the log says about them. So, after every sign that a broker restarted
// (a connection to a broker failed or was lost, a partition's leader or leader epoch changed),
// and periodically:
//
//   - no id is leased until a scan has checked it: DescribeTransactions on the pool's ids
//     (Kafka's view of each id's last transaction), DescribeProducers on every partition of
//     the topics this pool writes to (the open transactions the partitions hold), and the
//     partitions again to confirm; a producer of ours with a transaction open on a partition
//     while Kafka's transaction coordinator has no such transaction open is hanging;
//   - an id with a hanging transaction is held out of the pool (Hanging lists them) until it is
//     repaired: Repair writes the marker that the broker skipped (WriteTxnMarkers, the request
//     kafka-transactions.sh abort sends), following the decision the coordinator log holds for
//     the records (recovery/hanging.go decides).
//
// Invariant (I1, extended): an id is leased only after a scan that began after the last sign of
// a restart found nothing hanging on it.

// ErrRestartCheck: a broker may have restarted and the transactional ids could not yet be checked
// for hanging transactions (Kafka does not answer yet). Retriable: nothing was started.
var ErrRestartCheck = errors.New("kafka may have restarted: transactional ids are withheld until they are checked for hanging transactions")

// Hanging is one partition on which a transaction of one of the pool's ids is left open while
// Kafka's transaction coordinator has no such transaction open.
type Hanging struct {
	TransactionalID string
	ProducerID      int64
	// ProducerEpoch is the last epoch the partition saw from the producer; CoordinatorEpoch the
	// last coordinator epoch of its markers there. A repairing marker carries both.
	ProducerEpoch    int16
	CoordinatorEpoch int32
	Topic            string
	Partition        int32
	// StartOffset is the offset of the open transaction's first record on the partition.
	StartOffset int64
	LastWrite   time.Time
	// KafkaState is the transaction coordinator's state of the id when the scan found it.
	KafkaState string
	FoundAt    time.Time
	// Status and Note are set by whoever decides the repair (SetHangingNote): what is being done
	// and why (for example: waiting for the log's decision, or why it cannot be repaired).
	Status string
	Note   string
}

// Hanging statuses.
const (
	HangingFound        = "found"         // just found; the log's decision is being read
	HangingWaiting      = "waiting"       // the log's transaction is not decided yet
	HangingCannotRepair = "cannot_repair" // an operator must look (Note says why)
)

func (h Hanging) key() string {
	return fmt.Sprintf("%s/%s/%d", h.TransactionalID, h.Topic, h.Partition)
}

// restartWatch holds the signs of a broker restart and the scans that answered them.
type restartWatch struct {
	gen      uint64            // bumped at every sign of a restart
	reason   string            // the last sign
	checked  map[string]uint64 // id → the gen of the last scan that found it clean
	scanning chan struct{}     // closed when the running scan ends; nil: none runs
	lastErr  error
	leaders  map[string]int32 // "topic/partition" → leader epoch, from the last metadata poll
	hanging  map[string]*Hanging
	repaired int64
	recent   []Repaired           // the last repairs, oldest first (at most keepRepaired)
	parked   map[string]*producer // held ids' producers, out of the free list
}

// Repaired is a hanging transaction that Repair closed, and the marker it wrote.
type Repaired struct {
	Hanging
	Commit bool
	At     time.Time
}

// keepRepaired bounds the repairs RecentRepairs remembers.
const keepRepaired = 50

// RecentRepairs lists the last repairs since start (at most 50), oldest first.
func (p *Pool) RecentRepairs() []Repaired {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Repaired(nil), p.watch.recent...)
}

// suspect records a sign that a broker restarted: every id must be checked again before it is
// leased.
func (p *Pool) suspect(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watch.gen++
	p.watch.reason = reason
}

// restartHook raises suspicion on broker connection failures (all clients) and on lost
// connections (the admin client, which keeps its connections busy with the metadata poll).
type restartHook struct {
	p          *Pool
	disconnect bool
}

func (h restartHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.p.suspect(fmt.Sprintf("connecting to broker %d failed: %v", meta.NodeID, err))
	}
}

func (h restartHook) OnBrokerDisconnect(meta kgo.BrokerMetadata, _ net.Conn) {
	if h.disconnect {
		h.p.suspect(fmt.Sprintf("the connection to broker %d was lost", meta.NodeID))
	}
}

type connectHook struct{ p *Pool }

func (h connectHook) OnBrokerConnect(meta kgo.BrokerMetadata, d time.Duration, c net.Conn, err error) {
	restartHook{p: h.p}.OnBrokerConnect(meta, d, c, err)
}

// RememberTopics adds topics to those the scans check (the topics recorded within the last day,
// at startup: the pool itself learns the topics it writes to). They count as not recorded by
// this process: the first record of each records it again (recordTopics).
func (p *Pool) RememberTopics(topics ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range topics {
		if _, ok := p.touched[t]; !ok {
			p.touched[t] = time.Time{}
		}
	}
}

// HangingScanEvery is the longest time between two hanging-transaction scans: one runs at every
// sign of a broker restart, and at least this often.
const HangingScanEvery = time.Minute

// topicRecordEvery is how often a topic in use is recorded again: a restart looks at the topics
// recorded within the last day, so a topic written to all along must not look older than that.
const topicRecordEvery = time.Hour

// recordTopics remembers the topics of recs for the hanging scans and, with Config.RecordTopics,
// records those this process has not recorded within topicRecordEvery before any of their
// records is produced (H1 in docs/design.md): a restart must find every topic a transaction of
// the last day may have left open (txlog.Log.RecentTopics). One caller records a topic at a
// time; the others wait for it only when this process never recorded the topic (a refresh
// finds it durable already), so a burst of requests on a topic makes one write, not one each.
// A failure is the log's: nothing is produced, and the next call tries again.
func (p *Pool) recordTopics(ctx context.Context, recs []txntype.Record) error {
	for {
		due, waitFor, wait := p.dueTopics(recs)
		switch {
		case len(due) > 0:
			err := p.cfg.RecordTopics(ctx, due)
			p.topicsRecorded(due, err)
			if err != nil {
				return topicsUnrecorded(due, err)
			}
		case wait != nil:
			select {
			case <-wait:
			case <-ctx.Done():
				return topicsUnrecorded([]string{waitFor}, ctx.Err())
			}
		default:
			return nil
		}
	}
}

// dueTopics remembers the topics of recs and claims those this caller must record (due); wait
// is closed when another caller's recording of waitFor, a topic this process never recorded,
// ends.
func (p *Pool) dueTopics(recs []txntype.Record) (due []string, waitFor string, wait chan struct{}) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range recs {
		at, ok := p.touched[r.Topic]
		if !ok {
			p.touched[r.Topic] = time.Time{}
		}
		if p.cfg.RecordTopics == nil || now.Sub(at) < topicRecordEvery || slices.Contains(due, r.Topic) {
			continue
		}
		if busy, ok := p.recording[r.Topic]; ok {
			if at.IsZero() && wait == nil {
				waitFor, wait = r.Topic, busy
			}
			continue
		}
		p.recording[r.Topic] = make(chan struct{})
		due = append(due, r.Topic)
	}
	return due, waitFor, wait
}

// topicsRecorded ends the recording of topics (err: it failed) and wakes its waiters.
func (p *Pool) topicsRecorded(topics []string, err error) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range topics {
		close(p.recording[t])
		delete(p.recording, t)
		if err == nil {
			p.touched[t] = now
		}
	}
}

func (p *Pool) touchedTopics() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.touched))
	for t := range p.touched {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// ensureChecked returns once the id has been checked by a scan that began after the last sign
// of a restart, running that scan if none runs (one at a time; the others wait for it).
func (p *Pool) ensureChecked(ctx context.Context, id string) error {
	for {
		p.mu.Lock()
		if p.watch.checked[id] >= p.watch.gen {
			p.mu.Unlock()
			return nil
		}
		if ch := p.watch.scanning; ch != nil {
			p.mu.Unlock()
			select {
			case <-ch:
				p.mu.Lock()
				err := p.watch.lastErr
				p.mu.Unlock()
				if err != nil {
					return err
				}
				continue
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", ErrRestartCheck, context.Cause(ctx))
			}
		}
		ch := make(chan struct{})
		p.watch.scanning = ch
		p.mu.Unlock()
		err := p.Scan(ctx)
		p.mu.Lock()
		p.watch.scanning, p.watch.lastErr = nil, err
		again := err == nil && p.watch.checked[id] < p.watch.gen
		p.mu.Unlock()
		close(ch)
		if err != nil {
			return err
		}
		if again {
			// Kafka was writing the id's markers (or a new sign came): look again shortly.
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", ErrRestartCheck, context.Cause(ctx))
			}
		}
	}
}

// Scan looks for hanging transactions of the pool's ids (see the top of this file), holds the
// ids it finds, and marks every id it checked (not leased while it ran) as checked for the
// restart signs seen before it began. An incomplete answer (a partition without a leader, a
// broker that does not answer) fails the scan: nothing is marked.
func (p *Pool) Scan(ctx context.Context) error {
	start := time.Now()
	p.mu.Lock()
	gen, reason := p.watch.gen, p.watch.reason
	p.mu.Unlock()
	ids := make([]string, p.cfg.PoolSize)
	for n := range ids {
		ids[n] = p.TransactionalID(n)
	}
	found, pending, err := p.findHanging(ctx, ids, start)
	if err != nil {
		return fmt.Errorf("%w (%s): %w", ErrRestartCheck, reason, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range found {
		if p.leases.inUseSince(h.TransactionalID, start) {
			continue // leased meanwhile (under p.mu, as Acquire leases): its request decides it
		}
		if _, ok := p.watch.hanging[h.key()]; !ok {
			h := h
			p.watch.hanging[h.key()] = &h
			p.cfg.Logger.Error("hanging Kafka transaction: the broker completed it without writing its marker to this partition; the id is held out of the pool until it is repaired",
				"transactional_id", h.TransactionalID, "producer_id", h.ProducerID, "topic", h.Topic,
				"partition", h.Partition, "start_offset", h.StartOffset, "kafka_state", h.KafkaState)
		}
	}
	for _, id := range ids {
		if !pending[id] && !p.leases.inUseSince(id, start) && p.watch.checked[id] < gen {
			p.watch.checked[id] = gen
		}
	}
	return nil
}

// txnView is Kafka's transaction coordinator's view of one id.
type txnView struct {
	id         string
	state      string
	epoch      int16
	partitions map[string]map[int32]bool
}

// findHanging is one scan over the given ids (see Scan). pending names the ids whose markers
// Kafka is writing right now: they are not checked yet.
func (p *Pool) findHanging(ctx context.Context, ids []string, start time.Time) (found []Hanging, pending map[string]bool, err error) {
	pending = map[string]bool{}
	topics := p.touchedTopics()
	if len(topics) == 0 {
		return nil, pending, nil
	}
	described, err := p.adm.DescribeTransactions(ctx, ids...)
	if err != nil && len(described) == 0 {
		return nil, nil, fmt.Errorf("describe transactions: %w", err)
	}
	byPID := map[int64]txnView{}
	for _, id := range ids {
		d, ok := described[id]
		if !ok {
			return nil, nil, fmt.Errorf("describe transactions: no answer for %s: %w", id, err)
		}
		if d.Err != nil {
			continue // not found: the id never ran a transaction (or expired)
		}
		v := txnView{id: id, state: d.State, epoch: d.ProducerEpoch, partitions: map[string]map[int32]bool{}}
		for t, ps := range d.Topics {
			v.partitions[t] = map[int32]bool{}
			for part := range ps {
				v.partitions[t][part] = true
			}
		}
		byPID[d.ProducerID] = v
	}
	if len(byPID) == 0 {
		return nil, pending, nil
	}
	open, err := p.openOnPartitions(ctx, topics, byPID)
	if err != nil {
		return nil, nil, err
	}
	var candidates []Hanging
	for _, h := range open {
		v := byPID[h.ProducerID]
		if p.leases.inUseSince(v.id, start) {
			continue // a request runs it
		}
		switch {
		case v.state == stateOngoing && v.partitions[h.Topic][h.Partition]:
			continue // Kafka's coordinator has it open: it ends by EndTxn or its timeout
		case v.state == statePrepareCommit || v.state == statePrepareAbort:
			pending[v.id] = true // markers are being written right now: look again
			continue
		}
		h.TransactionalID, h.KafkaState = v.id, v.state
		candidates = append(candidates, h)
	}
	if len(candidates) == 0 {
		return nil, pending, nil
	}
	// Confirm: still open at the same offset after Kafka's coordinator said it has no such
	// transaction open (markers written in between would have closed it).
	again, err := p.openOnPartitions(ctx, topics, byPID)
	if err != nil {
		return nil, nil, err
	}
	still := map[string]bool{}
	for _, h := range again {
		still[fmt.Sprintf("%d/%s/%d/%d", h.ProducerID, h.Topic, h.Partition, h.StartOffset)] = true
	}
	var out []Hanging
	for _, h := range candidates {
		if still[fmt.Sprintf("%d/%s/%d/%d", h.ProducerID, h.Topic, h.Partition, h.StartOffset)] && !p.leases.inUseSince(h.TransactionalID, start) {
			h.FoundAt = time.Now()
			h.Status = HangingFound
			out = append(out, h)
		}
	}
	return out, pending, nil
}

// openOnPartitions lists the open transactions (DescribeProducers: a current transaction start
// offset) of the given producer ids on every partition of the topics. Every partition must
// answer.
func (p *Pool) openOnPartitions(ctx context.Context, topics []string, pids map[int64]txnView) ([]Hanging, error) {
	set := kadm.TopicsSet{}
	for _, t := range topics {
		set[t] = nil // every partition (kadm reads the metadata)
	}
	described, err := p.adm.DescribeProducers(ctx, set)
	if err != nil {
		return nil, fmt.Errorf("describe producers: %w", err)
	}
	var out []Hanging
	for _, t := range topics {
		dt, ok := described[t]
		if !ok {
			continue // the topic is gone
		}
		for _, dp := range dt.Partitions {
			if dp.Err != nil {
				return nil, fmt.Errorf("describe producers of %s/%d: %w", t, dp.Partition, dp.Err)
			}
			for _, pr := range dp.ActiveProducers {
				if _, ours := pids[pr.ProducerID]; !ours || pr.CurrentTxnStartOffset < 0 {
					continue
				}
				out = append(out, Hanging{ProducerID: pr.ProducerID, ProducerEpoch: pr.ProducerEpoch,
					CoordinatorEpoch: pr.CoordinatorEpoch, Topic: t, Partition: dp.Partition,
					StartOffset: pr.CurrentTxnStartOffset, LastWrite: time.UnixMilli(pr.LastTimestamp)})
			}
		}
	}
	return out, nil
}

// HangingTransactions lists the hanging transactions found and not yet repaired, oldest first.
func (p *Pool) HangingTransactions() []Hanging {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Hanging, 0, len(p.watch.hanging))
	for _, h := range p.watch.hanging {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FoundAt.Before(out[j].FoundAt) })
	return out
}

// RepairedTotal counts the hanging transactions repaired since start.
func (p *Pool) RepairedTotal() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watch.repaired
}

// SetHangingNote records what is being done about a hanging transaction, for the in-doubt view.
func (p *Pool) SetHangingNote(h Hanging, status, note string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.watch.hanging[h.key()]; ok {
		cur.Status, cur.Note = status, note
	}
}

// held reports whether the id has a hanging transaction (caller holds p.mu).
func (p *Pool) heldLocked(id string) bool {
	for _, h := range p.watch.hanging {
		if h.TransactionalID == id {
			return true
		}
	}
	return false
}

// Repair writes the marker that the broker skipped: commit or abort, as the coordinator log
// decided the records (recovery decides). It is the request Kafka's transaction coordinator
// itself sends to a partition, and the one kafka-transactions.sh abort sends (Admin
// abortTransaction, KIP-664), with the producer and coordinator epochs the partition last saw.
// Kafka's Admin API offers only the abort; the request itself carries the result, and a commit
// marker is what the broker failed to write for a transaction its coordinator completed as
// committed. It needs the ClusterAction permission. Once the partition reports the transaction
// closed, the id returns to the pool when nothing else of it hangs.
func (p *Pool) Repair(ctx context.Context, h Hanging, commit bool) error {
	resp, err := p.adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
		Commit: commit, CoordinatorEpoch: h.CoordinatorEpoch, Topics: kadm.TopicsSet{h.Topic: {h.Partition: struct{}{}}}})
	if err != nil {
		return fmt.Errorf("kafka: write the %s marker of producer %d to %s/%d: %w", markerName(commit), h.ProducerID, h.Topic, h.Partition, err)
	}
	var perr error
	resp.EachPartition(func(r kadm.TxnMarkersPartitionResponse) {
		if r.Err != nil {
			perr = errors.Join(perr, fmt.Errorf("%s/%d: %w", r.Topic, r.Partition, r.Err))
		}
	})
	if perr != nil {
		return fmt.Errorf("kafka: write the %s marker of producer %d: %w", markerName(commit), h.ProducerID, perr)
	}
	closed, err := p.stillOpen(ctx, h)
	if err != nil {
		return fmt.Errorf("kafka: check the repair of %s/%d: %w", h.Topic, h.Partition, err)
	}
	if !closed {
		return fmt.Errorf("kafka: %s/%d still has the transaction of producer %d open at %d after the %s marker",
			h.Topic, h.Partition, h.ProducerID, h.StartOffset, markerName(commit))
	}
	p.settle(h, &commit)
	return nil
}

// Recheck asks the partition again whether a hanging transaction found by a scan is still
// open. When it is not (its marker arrived after the scan: the broker was late, not skipping
// it), the entry is dropped and the id returns to the pool as after a repair, and closed is
// true: nothing is left to repair or to show an operator.
func (p *Pool) Recheck(ctx context.Context, h Hanging) (closed bool, err error) {
	closed, err = p.stillOpen(ctx, h)
	if err != nil || !closed {
		return false, err
	}
	p.settle(h, nil)
	return true, nil
}

// stillOpen reports whether the partition no longer holds h's transaction open (closed).
func (p *Pool) stillOpen(ctx context.Context, h Hanging) (closed bool, err error) {
	view := map[int64]txnView{h.ProducerID: {id: h.TransactionalID}}
	open, err := p.openOnPartitions(ctx, []string{h.Topic}, view)
	if err != nil {
		return false, err
	}
	for _, o := range open {
		if o.Partition == h.Partition && o.StartOffset == h.StartOffset {
			return false, nil
		}
	}
	return true, nil
}

// settle drops a closed hanging transaction and gives its id back once nothing of it hangs;
// commit names the marker Repair wrote (nil: it closed without one).
func (p *Pool) settle(h Hanging, commit *bool) {
	p.mu.Lock()
	delete(p.watch.hanging, h.key())
	if commit != nil {
		p.watch.repaired++
		p.watch.recent = append(p.watch.recent, Repaired{Hanging: h, Commit: *commit, At: time.Now()})
		if len(p.watch.recent) > keepRepaired {
			p.watch.recent = append([]Repaired(nil), p.watch.recent[len(p.watch.recent)-keepRepaired:]...)
		}
	}
	var back *producer
	if !p.heldLocked(h.TransactionalID) {
		back = p.watch.parked[h.TransactionalID]
		delete(p.watch.parked, h.TransactionalID)
	}
	p.mu.Unlock()
	if commit != nil {
		p.cfg.Logger.Warn("hanging Kafka transaction repaired", "transactional_id", h.TransactionalID,
			"producer_id", h.ProducerID, "topic", h.Topic, "partition", h.Partition, "start_offset", h.StartOffset,
			"marker", markerName(*commit))
	} else {
		p.cfg.Logger.Info("hanging Kafka transaction closed without a repair: its marker arrived after the scan",
			"transactional_id", h.TransactionalID, "producer_id", h.ProducerID, "topic", h.Topic,
			"partition", h.Partition, "start_offset", h.StartOffset)
	}
	if back != nil {
		p.free <- back
	}
}

func markerName(commit bool) string {
	if commit {
		return "COMMIT"
	}
	return "ABORT"
}

// watchLeaders polls the metadata of the pool's topics and of the transaction state log every
// interval; a changed leader or leader epoch is a sign of a restart. The poll also keeps the
// admin client's connections open, so that a broker that dies is noticed at once
// (restartHook). Every scanEvery a scan runs anyway, without holding requests back.
func (p *Pool) watchLeaders(ctx context.Context, interval, scanEvery time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	lastScan := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.pollLeaders(ctx)
		if time.Since(lastScan) >= scanEvery {
			lastScan = time.Now()
			sctx, cancel := context.WithTimeout(ctx, interval*5)
			if err := p.Scan(sctx); err != nil && ctx.Err() == nil {
				p.cfg.Logger.Warn("periodic scan for hanging Kafka transactions failed", "error", err)
			}
			cancel()
		}
	}
}

func (p *Pool) pollLeaders(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	topics := append(p.touchedTopics(), "__transaction_state")
	meta, err := p.adm.Metadata(pctx, topics...)
	if err != nil {
		if ctx.Err() == nil {
			p.suspect(fmt.Sprintf("metadata: %v", err))
		}
		return
	}
	var changed []string
	p.mu.Lock()
	for _, td := range meta.Topics {
		for _, pd := range td.Partitions {
			k := fmt.Sprintf("%s/%d", td.Topic, pd.Partition)
			epoch := pd.LeaderEpoch
			if pd.Leader < 0 || pd.Err != nil {
				epoch = -1
			}
			if old, ok := p.watch.leaders[k]; ok && old != epoch {
				changed = append(changed, k)
			}
			p.watch.leaders[k] = epoch
		}
	}
	p.mu.Unlock()
	if len(changed) > 0 {
		sort.Strings(changed)
		p.suspect(fmt.Sprintf("partition leadership changed: %v", changed))
	}
}

// Start runs the restart watch until ctx is done: the metadata poll every second and a scan for
// hanging transactions every minute.
func (p *Pool) Start(ctx context.Context) {
	go p.watchLeaders(ctx, time.Second, HangingScanEvery)
}
