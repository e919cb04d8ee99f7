package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures the Kafka participant.
type Config struct {
	Brokers []string
	// IDPrefix and Instance make the pool's transactional ids: <IDPrefix>-<Instance>-<n>. They are
	// stable per instance, so a restarted instance finds its own ids again (I8).
	IDPrefix string
	Instance string
	PoolSize int
	// TransactionTimeout is the producer's transaction.timeout.ms: Kafka aborts a transaction
	// left open longer. It must not exceed the broker's transaction.max.timeout.ms.
	TransactionTimeout time.Duration
	// ClientOpts are added to every client (TLS, SASL, …).
	ClientOpts []kgo.Opt
	// EndTxnConns is how many clients carry raw EndTxn requests (enders.go); 0: 8, 1: the
	// admin client's connection alone.
	EndTxnConns int
	// RecordTopics, when set, makes topics durable as written to (txlog.Log.RecordTopics), so
	// that a restart's hanging scans find them (RememberTopics) without reading the log's rows.
	// CheckRecords calls it before the first record of a topic is produced, and again when the
	// topic was last recorded over topicRecordEvery ago; its error fails CheckRecords.
	RecordTopics func(ctx context.Context, topics []string) error
	Logger       *slog.Logger
}

// Pool leases transactional producers, one kgo client per transactional.id.
//
// Invariant I1 is enforced here: an id is in the free list only while no global transaction
// uses it; an id whose transaction is in doubt is quarantined and never handed out again by
// this pool.
type Pool struct {
	cfg   Config
	admin *kgo.Client // non-transactional: raw EndTxn, metadata, broker configs
	adm   *kadm.Client
	free  chan *producer

	mu          sync.Mutex
	quarantined map[string]bool
	releasing   map[string]bool      // quarantined ids being returned (Unquarantine)
	since       map[string]time.Time // when each quarantined id was quarantined
	topics      map[string]topicInfo
	// touched: the topics this pool writes to (the hanging scans check them), each with when
	// this process last recorded it (zero: not yet).
	touched   map[string]time.Time
	recording map[string]chan struct{} // topics being recorded (recordTopics), closed when done
	leases    leaseBook                // which ids requests hold (list.go)
	waiting   map[string]*parked       // producers of transactions waiting for their caller (waiting.go)
	watch     restartWatch             // signs of a broker restart, hanging transactions (hanging.go)
	tv        txnVersion               // the cluster's transaction version and the group clients (offsets.go)
	enders    enders                   // the clients raw EndTxn requests go out on (enders.go)
}

type producer struct {
	id     string
	cl     *kgo.Client
	broken bool // the client must be recreated before the id serves another transaction
}

type topicInfo struct {
	partitions int
	maxBytes   int // the topic's max.message.bytes; 0: not known
	checked    time.Time
}

// producerBatchMaxBytes bounds a record batch the producers build (kgo's default, set
// explicitly so that CheckSizes and the producers agree): a record larger than it, or than its
// topic's max.message.bytes, can never be written.
const producerBatchMaxBytes = 1000012

// sizeLookupBound bounds CheckSizes' metadata look-up of a topic it has not seen: the check
// runs before the request is logged, within the caller's budget, and a broker that does not
// answer is left to the produce path to report.
const sizeLookupBound = 500 * time.Millisecond

// topicCacheTTL bounds how long a known topic's partition count is trusted.
const topicCacheTTL = 30 * time.Second

// NewPool connects to Kafka, checks the broker's limits and initialises the pool's producers.
// Ids listed in quarantined belong to in-doubt transactions and are left alone: initialising
// them would abort their open transaction (I1, I6).
func NewPool(ctx context.Context, cfg Config, quarantined []string) (*Pool, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("kafka: no brokers configured")
	}
	if cfg.PoolSize <= 0 {
		cfg.PoolSize = 32
	}
	if cfg.TransactionTimeout <= 0 {
		cfg.TransactionTimeout = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Pool{
		cfg:         cfg,
		free:        make(chan *producer, cfg.PoolSize),
		quarantined: map[string]bool{},
		releasing:   map[string]bool{},
		since:       map[string]time.Time{},
		topics:      map[string]topicInfo{},
		touched:     map[string]time.Time{},
		recording:   map[string]chan struct{}{},
		waiting:     map[string]*parked{},
		// Generation 1: transactions of a previous run may hang; every id is checked before
		// its first lease.
		watch: restartWatch{gen: 1, reason: "startup", checked: map[string]uint64{}, leaders: map[string]int32{},
			hanging: map[string]*Hanging{}, parked: map[string]*producer{}},
	}
	// The admin client keeps its connections (the metadata poll uses them every second), so a
	// lost one is a sign that a broker went away.
	admin, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ConnIdleTimeout(15 * time.Minute),
		kgo.WithHooks(restartHook{p: p, disconnect: true})}, cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	p.admin, p.adm = admin, kadm.NewClient(admin)
	now := time.Now()
	for _, id := range quarantined {
		p.quarantined[id] = true
		p.since[id] = now
	}
	if err := p.checkBroker(ctx); err != nil {
		admin.Close()
		return nil, err
	}
	if err := p.fill(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// TransactionalID returns the n-th id of this instance's pool.
func (p *Pool) TransactionalID(n int) string {
	return p.cfg.IDPrefix + "-" + p.cfg.Instance + "-" + strconv.Itoa(n)
}

// checkBroker refuses a transaction timeout the broker would refuse on every InitProducerId.
func (p *Pool) checkBroker(ctx context.Context) error {
	meta, err := p.adm.BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("kafka: cannot reach brokers %v: %w", p.cfg.Brokers, err)
	}
	// Without broker ids only cluster-wide dynamic defaults come back, not static settings.
	rcs, err := p.adm.DescribeBrokerConfigs(ctx, meta.Brokers.NodeIDs()...)
	if err != nil {
		return fmt.Errorf("kafka: describe broker configs at %v: %w", p.cfg.Brokers, err)
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key != "transaction.max.timeout.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				continue
			}
			if max := time.Duration(ms) * time.Millisecond; p.cfg.TransactionTimeout > max {
				return fmt.Errorf("%w: KAFKA_TRANSACTION_TIMEOUT=%s but broker %s has transaction.max.timeout.ms=%d (%s); lower the setting or raise the broker's",
					ErrTimeoutTooLarge, p.cfg.TransactionTimeout, rc.Name, ms, max)
			}
			return nil
		}
	}
	p.cfg.Logger.Warn("broker does not report transaction.max.timeout.ms; not checked")
	return nil
}

// fill creates one client per non-quarantined id and initialises its producer id concurrently.
// InitProducerId aborts whatever a previous run left open on the id, which I6 allows because
// the id is not quarantined.
func (p *Pool) fill(ctx context.Context) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for n := 0; n < p.cfg.PoolSize; n++ {
		id := p.TransactionalID(n)
		if p.quarantined[id] {
			p.cfg.Logger.Warn("transactional id quarantined: its transaction is in doubt", "transactional_id", id)
			continue
		}
		pr, err := p.newProducer(id)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := pr.cl.ProducerID(ctx); err != nil {
				mu.Lock()
				first = errors.Join(first, fmt.Errorf("kafka: init producer id %s: %w", id, err))
				mu.Unlock()
			}
			p.free <- pr
		}()
	}
	wg.Wait()
	return first
}

func (p *Pool) newProducer(id string) (*producer, error) {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(p.cfg.Brokers...),
		kgo.TransactionalID(id),
		kgo.TransactionTimeout(p.cfg.TransactionTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(producerBatchMaxBytes),
		kgo.RecordPartitioner(newPartitioner()),
		// Topics are checked before a transaction begins (Txn.Begin); a topic deleted since
		// fails the record after one metadata refresh instead of four.
		kgo.UnknownTopicRetries(1),
		kgo.WithHooks(connectHook{p: p}),
	}, p.cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: client for %s: %w", id, err)
	}
	return &producer{id: id, cl: cl}, nil
}

// Acquire leases a free transactional id, waiting within ctx's budget. An id is leased only
// once a scan that began after the last sign of a broker restart has checked it (hanging.go); an
// id with a hanging transaction is held back until it is repaired.
func (p *Pool) Acquire(ctx context.Context) (txntype.KafkaTxn, error) {
	for {
		select {
		case pr := <-p.free:
			p.mu.Lock()
			held := p.heldLocked(pr.id)
			if held {
				p.watch.parked[pr.id] = pr
			}
			p.mu.Unlock()
			if held {
				continue
			}
			if err := p.ensureChecked(ctx, pr.id); err != nil {
				p.free <- pr
				return nil, classify(err)
			}
			// The hold check and the lease together: a scan records a hanging id only if it was
			// not leased meanwhile (hanging.go: Scan).
			p.mu.Lock()
			held = p.heldLocked(pr.id)
			if held {
				p.watch.parked[pr.id] = pr
			} else {
				p.leases.take(pr.id)
			}
			p.mu.Unlock()
			if held {
				continue
			}
			return &Txn{pool: p, p: pr}, nil
		case <-ctx.Done():
			return nil, classify(fmt.Errorf("%w: %w", ErrPoolExhausted, context.Cause(ctx)))
		}
	}
}

// release returns a producer to the free list, recreating a broken client first: the new
// client's first transaction re-initialises the id, aborting anything left open on it. keep
// false quarantines the id instead (I1).
func (p *Pool) release(pr *producer, keep bool) {
	p.leases.give(pr.id)
	if !keep {
		pr.cl.Close()
		p.quarantine(pr.id)
		p.cfg.Logger.Warn("transactional id quarantined until its transaction is resolved", "transactional_id", pr.id)
		return
	}
	if pr.broken {
		pr.cl.Close()
		npr, err := p.newProducer(pr.id)
		if err != nil {
			p.cfg.Logger.Error("recreate kafka client failed; id quarantined until recovery heals it", "transactional_id", pr.id, "error", err)
			p.quarantine(pr.id)
			return
		}
		// Initialise the new client now rather than at its first transaction: its
		// InitProducerId aborts what the broken client left open (an abort that did not get
		// through), which otherwise holds read_committed consumers of those partitions back
		// until the Kafka transaction timeout. Off the caller's path; the id is free again
		// once done (a failed init is retried by the client's first transaction).
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), reinitTimeout)
			defer cancel()
			if _, _, err := npr.cl.ProducerID(ctx); err != nil {
				p.cfg.Logger.Warn("re-initialising a transactional id failed; its first transaction retries", "transactional_id", npr.id, "error", err)
			}
			p.free <- npr
		}()
		return
	}
	p.free <- pr
}

// reinitTimeout bounds the eager InitProducerId of a recreated client.
const reinitTimeout = 10 * time.Second

func (p *Pool) quarantine(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.quarantined[id] = true
	p.since[id] = time.Now()
}

// QuarantinedSince lists the quarantined ids with the moment each was quarantined.
func (p *Pool) QuarantinedSince() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]time.Time, len(p.quarantined))
	for id := range p.quarantined {
		out[id] = p.since[id]
	}
	return out
}

// Quarantined lists the ids withheld from use.
func (p *Pool) Quarantined() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.quarantined))
	for id := range p.quarantined {
		ids = append(ids, id)
	}
	return ids
}

// checkTopics fails fast, before a transaction begins, on a record whose topic or partition does
// not exist, instead of after the producer's metadata retries.
// CheckRecords checks that every record's topic (and partition) exists, and remembers the
// topics for the hanging-transaction scans. Its error is classified.
func (p *Pool) CheckRecords(ctx context.Context, recs []txntype.Record) error {
	if err := p.checkTopics(ctx, recs); err != nil {
		return classify(err)
	}
	return p.recordTopics(ctx, recs)
}

func (p *Pool) checkTopics(ctx context.Context, recs []txntype.Record) error {
	var missing []string
	now := time.Now()
	p.mu.Lock()
	for _, r := range recs {
		if ti, ok := p.topics[r.Topic]; !ok || now.Sub(ti.checked) > topicCacheTTL ||
			(r.Partition != nil && int(*r.Partition) >= ti.partitions) {
			missing = append(missing, r.Topic)
		}
	}
	p.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	details, err := p.adm.ListTopics(ctx, missing...)
	if err != nil {
		return fmt.Errorf("metadata for topics %v: %w", missing, err)
	}
	limits := p.topicLimits(ctx, details)
	p.mu.Lock()
	for _, d := range details {
		if d.Err == nil {
			p.topics[d.Topic] = topicInfo{partitions: len(d.Partitions), maxBytes: limits[d.Topic], checked: now}
		}
	}
	p.mu.Unlock()
	for i, r := range recs {
		d, ok := details[r.Topic]
		if !ok && !p.known(r.Topic) {
			return fmt.Errorf("kafka[%d]: topic %q: %w", i, r.Topic, errUnknownTopic)
		}
		if ok && d.Err != nil {
			return fmt.Errorf("kafka[%d]: topic %q: %w", i, r.Topic, d.Err)
		}
		if r.Partition != nil && ok && int(*r.Partition) >= len(d.Partitions) {
			return fmt.Errorf("kafka[%d]: topic %q has %d partitions, no partition %d: %w",
				i, r.Topic, len(d.Partitions), *r.Partition, errUnknownTopic)
		}
	}
	return nil
}

// topicLimits reads the max.message.bytes of the topics found; a topic whose configuration
// cannot be read is left out (only the producer's bound then applies).
func (p *Pool) topicLimits(ctx context.Context, details kadm.TopicDetails) map[string]int {
	var names []string
	for _, d := range details {
		if d.Err == nil {
			names = append(names, d.Topic)
		}
	}
	limits := map[string]int{}
	if len(names) == 0 {
		return limits
	}
	rcs, err := p.adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		p.cfg.Logger.Warn("kafka: cannot read the topics' max.message.bytes; only the producer's bound is checked",
			"topics", names, "error", err)
		return limits
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" && c.Value != nil {
				if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 {
					limits[rc.Name] = n
				}
			}
		}
	}
	return limits
}

// CheckSizes refuses a resolved record that its topic cannot take (max.message.bytes, read
// with the topic's metadata and refreshed with it, and the producer's batch bound), naming it.
func (p *Pool) CheckSizes(ctx context.Context, recs []txntype.Record) error {
	lctx, cancel := context.WithTimeout(ctx, sizeLookupBound)
	_ = p.checkTopics(lctx, recs) // fills the cache; what it finds wrong, CheckRecords reports
	cancel()
	for i := range recs {
		r := &recs[i]
		n, ok := r.WireSize()
		if !ok {
			continue
		}
		limit, what := producerBatchMaxBytes, "the producer's record batch bound"
		p.mu.Lock()
		ti, known := p.topics[r.Topic]
		p.mu.Unlock()
		if known && ti.maxBytes > 0 && ti.maxBytes < limit {
			limit, what = ti.maxBytes, "its max.message.bytes"
		}
		if n > limit {
			return &txntype.InvalidError{Field: "kafka[" + strconv.Itoa(i) + "]",
				Reason: fmt.Sprintf("the record takes %d bytes in a record batch; topic %q takes at most %d (%s)", n, r.Topic, limit, what)}
		}
	}
	return nil
}

func (p *Pool) known(topic string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.topics[topic]
	return ok
}

// Usage counts the pool's transactional ids at this moment: free (ready to lease), leased (a
// request holds it) and quarantined (its transaction is in doubt, I1, or hanging). For metrics.
func (p *Pool) Usage() (free, leased, quarantined int) {
	u := p.Detail()
	return u.Free, u.Leased, u.Quarantined + u.Hanging
}

// PoolUsage is the pool's state in detail (metrics, /readyz).
type PoolUsage struct {
	Size, Free, Leased int
	Quarantined        int // in doubt (I1)
	Hanging            int // held: a transaction of theirs hangs on a partition (hanging.go)
	// Low: fewer than a quarter of the ids can serve (free or leased); the pool heals as
	// recovery resolves the in-doubt transactions and repairs the hanging ones.
	Low bool
	// Checking: a sign of a broker restart has not been answered by a scan yet.
	Checking bool
}

// Detail reports the pool's state.
func (p *Pool) Detail() PoolUsage {
	p.mu.Lock()
	u := PoolUsage{Size: p.cfg.PoolSize, Quarantined: len(p.quarantined)}
	held, inFree := map[string]bool{}, 0
	for _, h := range p.watch.hanging {
		if !p.quarantined[h.TransactionalID] && !held[h.TransactionalID] {
			held[h.TransactionalID] = true
			if p.watch.parked[h.TransactionalID] == nil {
				inFree++ // still in the free list until Acquire draws and parks it
			}
		}
	}
	u.Hanging = len(held)
	u.Checking = p.watch.scanning != nil
	p.mu.Unlock()
	p.leases.mu.Lock()
	u.Leased = len(p.leases.leased)
	p.leases.mu.Unlock()
	u.Free = max(0, len(p.free)-inFree)
	u.Low = 4*(u.Free+u.Leased) < u.Size
	return u
}

// ClusterProbe is what Probe found.
type ClusterProbe struct {
	Brokers   int // brokers in the metadata
	Reachable int // of which answered ApiVersions
	// TransactionVersion is the cluster's finalized transaction.version feature (2:
	// transactions v2, the epoch is bumped at every EndTxn); -1 when the brokers do not
	// report it (before Kafka 4.0: transactions v1).
	TransactionVersion int16
}

// Probe checks that the cluster answers, within ctx: a metadata request, then ApiVersions to
// every broker listed. It fails when no broker answers. For readiness.
func (p *Pool) Probe(ctx context.Context) (ClusterProbe, error) {
	vs, err := p.adm.ApiVersions(ctx)
	if err != nil {
		return ClusterProbe{}, fmt.Errorf("kafka: metadata from %v: %w", p.cfg.Brokers, err)
	}
	cp := ClusterProbe{Brokers: len(vs), TransactionVersion: -1}
	var errs error
	for _, v := range vs.Sorted() {
		if v.Err != nil {
			errs = errors.Join(errs, fmt.Errorf("broker %d: %w", v.NodeID, v.Err))
			continue
		}
		cp.Reachable++
		for _, f := range v.Raw().FinalizedFeatures {
			if f.Name == "transaction.version" && f.MaxVersionLevel > cp.TransactionVersion {
				cp.TransactionVersion = f.MaxVersionLevel
			}
		}
	}
	switch {
	case cp.Brokers == 0:
		return cp, fmt.Errorf("kafka: the metadata from %v lists no brokers", p.cfg.Brokers)
	case cp.Reachable == 0:
		return cp, fmt.Errorf("kafka: no broker answered ApiVersions: %w", errs)
	}
	return cp, nil
}

// Close closes every client. Open transactions are not aborted (kgo's Close does not abort).
func (p *Pool) Close() {
	for {
		select {
		case pr := <-p.free:
			pr.cl.Close()
		default:
			p.closeParked()
			p.tv.close()
			p.enders.close()
			p.admin.Close()
			return
		}
	}
}
