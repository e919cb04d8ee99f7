package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Pipeline is an exactly-once consume-transform-write loop: a franz-go consumer group member
// (read_committed, auto-commit off) whose every polled batch becomes one atomic request: the
// rows and records Transform makes of it, and the batch's offsets for the group, fenced by the
// member's generation (KIP-447). The batch's input is consumed exactly when its output commits.
type Pipeline struct {
	// Brokers, Group and Topics say what to consume, as which consumer group.
	Brokers []string
	Group   string
	Topics  []string
	// InstanceID, when set, makes the member static (group.instance.id).
	InstanceID string
	// Transform turns one poll's records into statements and records. It must be a function of
	// the records only: a batch sent again (the coordinator unreachable, an outcome in doubt) is
	// sent with the same id and the same body. Polls made while the window is full go out as one
	// batch, their statements and records in poll order (MaxBatchRecords).
	Transform func(ctx context.Context, batch []*kgo.Record) ([]Statement, []Record, error)
	// MaxPollRecords bounds one poll; 0: 500.
	MaxPollRecords int
	// MaxBatchRecords bounds the input records of one batch gathered from several polls while
	// the window is full (pipeline_merge.go); 0: 16 × MaxPollRecords; at most MaxPollRecords:
	// every poll is a batch of its own.
	MaxBatchRecords int
	// Limits are the coordinator's request limits, which a batch gathered from several polls
	// keeps within; zero fields: the coordinator's defaults.
	Limits RequestLimits
	// InFlight is how many batches the member keeps in flight at once; 0: DefaultInFlight; 1:
	// one at a time. A batch sent while others are in flight names the last of them (rule O4):
	// its offsets go after that one's and it commits only if that one committed, so the
	// group's offsets move forward in batch order and never past a batch that did not commit.
	InFlight int
	// TimeoutMS is each request's time budget; nil: the server's default.
	TimeoutMS *int64
	// Options are more kgo options for the consumer (TLS, SASL, balancers, session timeout).
	Options []kgo.Opt
	// Logger receives the dropped batches; nil: slog.Default().
	Logger *slog.Logger
	// OnCommit, when set, is called after each committed batch (metrics, tests).
	OnCommit func(batch []*kgo.Record, t *Transaction)
	// OnRevoked, when set, is called when partitions are revoked, after the helper's own wait
	// (RunPipeline). The helper sets kgo.OnPartitionsRevoked itself: do not set it in Options.
	OnRevoked func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32)
}

// RunPipeline runs p until ctx ends (then it returns nil, after leaving the group) or a batch
// fails for a reason other than fencing (then it returns that error, with the batch not
// committed: the group's offsets stay before it), or a batch's outcome stays unknown for the
// client's retry window (WithRetryWindow; the error matches ErrRetryWindow, and the batch's
// outcome shows in the group's offsets once it is known).
//
//   - Up to InFlight batches are in flight at once, each chained after the one before it (O4):
//     the next batch runs its phase 1 while the previous one commits. When a batch does not
//     commit, none of the batches after it does: they are dropped with it, and the member
//     polls again from that batch's first offsets.
//   - Rebalances are held while a batch is in flight (kgo.BlockRebalanceOnPoll) and allowed
//     whenever the window is empty, at the latest every rebalanceEvery (the window is drained
//     then), so a member gives its partitions up only with no batch in flight: it stops
//     cleanly.
//   - A batch the group fences (a member that a rebalance moved on, ErrGroupFenced: 409,
//     nothing of it committed) is dropped: its partitions are rewound to the batch's start and
//     the member polls again once it has rejoined; whoever owns them now processes them.
//   - An answer that is no outcome (the coordinator unreachable, 503, 202 still in doubt) is
//     not a failure: the same request (same id, same body) is sent again until its outcome is
//     known, within the client's retry window (which must not exceed the server's
//     COORDINATOR_RETRY_WINDOW).
//   - An abort is sent again under a new id only when a new attempt can get past it
//     (againAfterAbort), at most 10 times; a permanent refusal (a record too large, an
//     authorization failure, a statement's error) stops the pipeline at once. The id is derived from the group, the member, its generation and the batch's
//     offsets, so a resend can never run the batch twice.
func (c *Client) RunPipeline(ctx context.Context, p Pipeline) error {
	if p.Group == "" || len(p.Topics) == 0 || p.Transform == nil {
		return errors.New("client: pipeline needs Group, Topics and Transform")
	}
	log := p.Logger
	if log == nil {
		log = slog.Default()
	}
	max := p.MaxPollRecords
	if max <= 0 {
		max = 500
	}
	depth := p.InFlight
	if depth <= 0 {
		depth = DefaultInFlight
	}
	committed := &lastCommitted{next: map[string]map[int32]int64{}}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(p.Brokers...),
		kgo.ConsumerGroup(p.Group),
		kgo.ConsumeTopics(p.Topics...),
		kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.BlockRebalanceOnPoll(),
	}, p.Options...)
	opts = append(opts, kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
		committed.settle(ctx, cl, p.Group, revoked, log)
		if p.OnRevoked != nil {
			p.OnRevoked(ctx, cl, revoked)
		}
	}))
	if p.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(p.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("client: pipeline consumer: %w", err)
	}
	defer cl.Close() // leaves the group
	// On the way out: the window's answers, then the rebalance the member's leaving needs.
	defer cl.AllowRebalance()
	r := &pipelineRun{c: c, p: p, cl: cl, log: log, committed: committed, gather: gatherBound(p.MaxBatchRecords, max), limits: p.Limits.orDefaults()}
	defer r.drain()
	var openedAt time.Time // when the window last opened: the first batch polled after it was empty
	for {
		// Settle the answered batches, oldest first; wait for the oldest when the window is
		// full and the next batch can gather no more, or when a rebalance point is due (the
		// batches polled meanwhile go out too, so that the window ends empty).
		for len(r.window) > 0 {
			head := r.window[0]
			due := c.now().Sub(openedAt) >= rebalanceEvery
			if !due && !head.answered() && (len(r.window) < depth || r.gathering()) {
				break
			}
			<-head.done
			r.window = r.window[1:]
			if head.err == nil {
				r.attempt = 0
				committed.record(head.req.KafkaOffsets)
				if p.OnCommit != nil {
					p.OnCommit(head.batch, head.t)
				}
			} else if stop, err := r.failed(ctx, head); stop {
				return err
			}
			if due && len(r.window) == 0 {
				r.sendPending(ctx, depth)
			}
		}
		r.sendPending(ctx, depth)
		empty := len(r.window) == 0
		if empty {
			cl.AllowRebalance() // nothing in flight: the member may give partitions up here
		}
		n := max
		if len(r.window) >= depth && len(r.pending) > 0 {
			n = min(max, r.gather-len(r.pending[0].batch)) // gathering() said there is room
		}
		fetches := r.poll(ctx, n, openedAt.Add(rebalanceEvery))
		if empty {
			// The window opens with the batch polled now: the wait for it (the input idle, a
			// rebalance, the group's join) is not time the window was open.
			openedAt = c.now()
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := fatalFetchError(fetches); err != nil {
			r.drain()
			return err
		}
		batch := fetches.Records()
		if len(batch) == 0 {
			continue
		}
		sql, out, err := p.Transform(ctx, batch)
		if err != nil {
			r.drain()
			rewind(cl, append(r.dropPending(), batch...))
			return fmt.Errorf("client: pipeline batch of %d records: transform: %w", len(batch), err)
		}
		r.add(newPending(batch, sql, out))
		r.sendPending(ctx, depth)
	}
}

// DefaultInFlight is how many batches a pipeline member keeps in flight when Pipeline.InFlight
// is 0.
const DefaultInFlight = 4

// defaultGatherPolls is how many polls' records a batch may gather while the window is full
// when Pipeline.MaxBatchRecords is 0. Under load the request limits usually bind first: at the
// coordinator's defaults, 1000 statements and 1000 records, which a Transform making a
// statement and a record of each input reaches at 1000 inputs. A batch pays a Kafka
// transaction, its markers, the log's writes, a PREPARE and a COMMIT PREPARED whatever its
// size; on a machine short of CPU, batches of up to sixteen polls cost the coordinator,
// PostgreSQL and the broker a fifth to a third less per record than batches of four
// (docs/decisions.md).
const defaultGatherPolls = 16

// gatherBound is the most input records a batch may gather: Pipeline.MaxBatchRecords, or
// defaultGatherPolls polls of maxPoll.
func gatherBound(maxBatch, maxPoll int) int {
	if maxBatch > 0 {
		return maxBatch
	}
	return defaultGatherPolls * maxPoll
}

// rebalanceEvery bounds how long a member with batches always in flight goes without a point
// where its window is empty and a rebalance may run (kgo.BlockRebalanceOnPoll holds one while
// any batch of the member is in flight).
const rebalanceEvery = 200 * time.Millisecond

// pipelineRun is one RunPipeline's state: its consumer and its window of batches in flight,
// oldest first, each chained after the one before it (O4).
type pipelineRun struct {
	c         *Client
	p         Pipeline
	cl        *kgo.Client
	log       *slog.Logger
	committed *lastCommitted
	window    []*flyingBatch
	// pending are the polls transformed and not sent yet, oldest first: only the last may
	// still gather (pipeline_merge.go); there are any only while the window is full.
	pending []*pendingBatch
	gather  int // Pipeline.MaxBatchRecords or its default
	limits  RequestLimits
	// attempt counts the sends of the batch at the group's position: a new id after each abort.
	attempt int
}

// gathering reports whether the member may poll more into its next batch while the window is
// full: nothing is pending yet, or the one batch pending is still open.
func (r *pipelineRun) gathering() bool {
	switch len(r.pending) {
	case 0:
		return true
	case 1:
		return r.pending[0].open(r.gather, r.limits)
	}
	return false
}

// add queues a transformed poll: joined to the last pending batch when it fits, else as a
// batch of its own.
func (r *pipelineRun) add(b *pendingBatch) {
	if n := len(r.pending); n > 0 && r.pending[n-1].join(b, r.gather, r.limits) {
		return
	}
	r.pending = append(r.pending, b)
}

// sendPending sends the pending batches, oldest first, while the window has room.
func (r *pipelineRun) sendPending(ctx context.Context, depth int) {
	for len(r.pending) > 0 && len(r.window) < depth {
		b := r.pending[0]
		r.pending = r.pending[1:]
		member, gen := r.cl.GroupMetadata()
		r.window = append(r.window, r.send(ctx, b, member, gen))
	}
}

// dropPending forgets the batches not sent and returns their records.
func (r *pipelineRun) dropPending() []*kgo.Record {
	var out []*kgo.Record
	for _, b := range r.pending {
		out = append(out, b.batch...)
	}
	r.pending = nil
	return out
}

// flyingBatch is a batch sent and not settled yet.
type flyingBatch struct {
	batch []*kgo.Record
	// req is the request's id, offsets and budget; its statements and records went out in the
	// body encoded as the polls were (pendingBatch.body).
	req    TransactionRequest
	member string
	gen    int32
	done   chan struct{} // closed when t and err are its answer
	t      *Transaction
	err    error
}

func (b *flyingBatch) answered() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// poll polls the next batch; with batches in flight it returns early, when the oldest is
// answered or at the next rebalance point, so that the loop settles them.
func (r *pipelineRun) poll(ctx context.Context, max int, rebalanceAt time.Time) kgo.Fetches {
	if len(r.window) == 0 {
		return r.cl.PollRecords(ctx, max)
	}
	pctx, cancel := context.WithDeadline(ctx, rebalanceAt)
	defer cancel()
	head := r.window[0]
	go func() {
		select {
		case <-head.done:
			cancel()
		case <-pctx.Done():
		}
	}()
	return r.cl.PollRecords(pctx, max)
}

// send sends a batch on its own goroutine. A batch sent while another is in flight names the
// last one sent (O4): it commits only if that one committed.
func (r *pipelineRun) send(ctx context.Context, p *pendingBatch, member string, gen int32) *flyingBatch {
	oc := BatchOffsets(r.p.Group, member, gen, p.batch)
	if r.p.InstanceID != "" {
		oc.GroupInstanceID = &r.p.InstanceID
	}
	if n := len(r.window); n > 0 {
		oc.After = r.window[n-1].req.ID
	}
	b := &flyingBatch{batch: p.batch, member: member, gen: gen, done: make(chan struct{}),
		req: TransactionRequest{ID: BatchID(oc) + "-" + strconv.Itoa(r.attempt), KafkaOffsets: oc, TimeoutMS: r.p.TimeoutMS}}
	body, err := p.body(b.req.ID, b.req.TimeoutMS, oc)
	go func() {
		defer close(b.done)
		if err != nil {
			b.err = err
			return
		}
		b.t, b.err = r.c.submitBatch(ctx, b.req.ID, body)
	}()
	return b
}

// drain waits for every batch in flight to be answered, and forgets them.
func (r *pipelineRun) drain() []*flyingBatch {
	rest := r.window
	r.window = nil
	for _, b := range rest {
		<-b.done
	}
	return rest
}

// failed settles a batch that did not commit: every batch after it in the window is chained
// after it, so none of them commits either (O4); the member waits for their answers, rewinds
// its partitions to the failed batch's first offsets and goes on as the failure says. stop:
// RunPipeline returns err.
func (r *pipelineRun) failed(ctx context.Context, head *flyingBatch) (stop bool, err error) {
	dropped := head.batch
	for _, b := range r.drain() {
		dropped = append(dropped, b.batch...)
	}
	dropped = append(dropped, r.dropPending()...) // polled after it: chained after it when sent
	rewind(r.cl, dropped)
	err = head.err
	switch {
	case errors.Is(err, ErrGroupFenced):
		r.log.Warn("pipeline batch fenced by the group; dropped, rejoining", "group", r.p.Group,
			"member_id", head.member, "generation", head.gen, "records", len(dropped), "error", err)
		r.cl.AllowRebalance() // lets the member's rejoin run
		pauseFor(ctx, fencedPause)
		return false, nil
	case ctx.Err() != nil:
		return true, nil
	case againAfterAbort(err) && r.attempt < maxBatchAttempts:
		// Aborted for a reason that is not the batch's (recovery's presumed abort after a
		// coordinator crash, a Kafka transaction that could not complete): nothing of it
		// committed, so it is polled again and sent under a new id.
		r.log.Warn("pipeline batch aborted; polling it again", "group", r.p.Group, "records", len(dropped),
			"attempt", r.attempt, "error", err)
		r.attempt++
		r.cl.AllowRebalance()
		pauseFor(ctx, fencedPause)
		return false, nil
	}
	r.cl.AllowRebalance()
	return true, fmt.Errorf("client: pipeline batch of %d records: %w", len(head.batch), err)
}

func pauseFor(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// submitBatch sends one batch's request (body, with the id id), again and again while the
// answer is no outcome.
func (c *Client) submitBatch(ctx context.Context, id string, body encodedBody) (*Transaction, error) {
	since := c.now()
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		t, err := c.sendUntil(ctx, id, body, since, committed)
		switch {
		case err == nil:
			return t, nil
		case errors.Is(err, ErrAborted), errors.Is(err, ErrHeuristic), errors.Is(err, ErrInvalid),
			errors.Is(err, ErrConflict), errors.Is(err, ErrUnauthorized), errors.Is(err, ErrForbidden),
			errors.Is(err, ErrRetryWindow):
			return nil, err
		}
		// No outcome yet (unreachable, 503, in doubt): the same id again, which runs it at most
		// once and returns its outcome when it has one, while the server remembers the id.
		if c.now().Sub(since)+backoff > c.retryWindow {
			return nil, c.windowError(since, err)
		}
		if perr := c.pause(ctx, backoff); perr != nil {
			return nil, fmt.Errorf("%w (last answer: %w)", perr, err)
		}
	}
}

// BatchOffsets are the offsets that commit a polled batch: per partition, the last record's
// offset + 1, fenced by the member's generation.
func BatchOffsets(group, member string, gen int32, batch []*kgo.Record) *OffsetCommit {
	type tp struct {
		topic     string
		partition int32
	}
	next := map[tp]int64{}
	for _, r := range batch {
		k := tp{r.Topic, r.Partition}
		next[k] = max(next[k], r.Offset+1)
	}
	oc := &OffsetCommit{GroupID: group, MemberID: member}
	if gen >= 0 && member != "" {
		oc.GenerationID = &gen
	} else {
		oc.MemberID = ""
	}
	for k, o := range next {
		oc.Offsets = append(oc.Offsets, PartitionOffset{Topic: k.topic, Partition: k.partition, Offset: o})
	}
	slices.SortFunc(oc.Offsets, func(a, b PartitionOffset) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition - b.Partition)
	})
	return oc
}

// BatchID is the request id of a batch (RunPipeline adds the attempt): the same group, member,
// generation, offsets and predecessor (OffsetCommit.After) give the same id, so a resend
// returns the first attempt's outcome; a new owner's batch of the same input (another member
// or generation) gets another.
func BatchID(oc *OffsetCommit) string {
	h := sha256.New()
	gen := int32(-1)
	if oc.GenerationID != nil {
		gen = *oc.GenerationID
	}
	fmt.Fprintf(h, "%s\x00%s\x00%d", oc.GroupID, oc.MemberID, gen)
	for _, o := range oc.Offsets {
		h.Write([]byte("\x00" + o.Topic + "\x00" + strconv.Itoa(int(o.Partition)) + "\x00" + strconv.FormatInt(o.Offset, 10)))
	}
	if oc.After != "" {
		// A batch chained after another (O4) is another request than the same batch chained
		// after a third, or after none: its predecessor decides whether it may commit.
		h.Write([]byte("\x00after\x00" + oc.After))
	}
	return "pl-" + hex.EncodeToString(h.Sum(nil))[:40]
}

// rewind puts the batch's partitions back to the batch's first offsets, so that what was
// dropped is polled again (by this member, if it keeps them).
func rewind(cl *kgo.Client, batch []*kgo.Record) {
	first := map[string]map[int32]kgo.EpochOffset{}
	for _, r := range batch {
		ps := first[r.Topic]
		if ps == nil {
			ps = map[int32]kgo.EpochOffset{}
			first[r.Topic] = ps
		}
		if o, ok := ps[r.Partition]; !ok || r.Offset < o.Offset {
			ps[r.Partition] = kgo.EpochOffset{Epoch: -1, Offset: r.Offset}
		}
	}
	cl.SetOffsets(first)
}

// lastCommitted is what this member committed last, per partition.
type lastCommitted struct {
	mu   sync.Mutex
	next map[string]map[int32]int64
}

func (l *lastCommitted) record(oc *OffsetCommit) {
	if oc == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range oc.Offsets {
		ps := l.next[o.Topic]
		if ps == nil {
			ps = map[int32]int64{}
			l.next[o.Topic] = ps
		}
		ps[o.Partition] = o.Offset
	}
}

// settle holds a revocation until the group's stable offsets of the revoked partitions show
// what this member committed last (at most settleTimeout). A commit is answered once Kafka has
// decided it, and the group applies the offsets when the transaction's marker reaches it a
// moment later; a new owner that fetched the offsets in between could be given the ones before
// (observed on Kafka 4.4: a stable fetch right after the answer returned the previous offset
// about once in 40) and would process the last batch again. The member rejoins only after this
// callback, so the new owner fetches after the wait.
func (l *lastCommitted) settle(ctx context.Context, cl *kgo.Client, group string, revoked map[string][]int32, log *slog.Logger) {
	want := map[string]map[int32]int64{}
	l.mu.Lock()
	for topic, ps := range revoked {
		for _, p := range ps {
			if o, ok := l.next[topic][p]; ok {
				if want[topic] == nil {
					want[topic] = map[int32]int64{}
				}
				want[topic][p] = o
			}
			delete(l.next[topic], p)
		}
	}
	l.mu.Unlock()
	if len(want) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	for {
		resps, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			err = resps.Error()
		}
		if err == nil && settled(resps, want) {
			return
		}
		select {
		case <-ctx.Done():
			log.Warn("pipeline: the group's offsets did not show this member's last commit before the revocation",
				"group", group, "error", err)
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func settled(resps kadm.OffsetResponses, want map[string]map[int32]int64) bool {
	for topic, ps := range want {
		for p, o := range ps {
			r, ok := resps.Lookup(topic, p)
			if !ok || r.At < o {
				return false
			}
		}
	}
	return true
}

// settleTimeout bounds the wait of a revocation for the member's last commit to show.
const settleTimeout = 10 * time.Second

// maxBatchAttempts bounds how often one batch is sent again under a new id after aborts that
// were not its own fault (againAfterAbort).
const maxBatchAttempts = 10

// againAfterAbort reports an abort that a new attempt can get past: one that says nothing
// about the batch. Only those are sent again; a refusal that no resend can change stops the
// pipeline at once.
//
//   - class retriable;
//   - class abortable from the coordinator: recovery's presumed abort after a coordinator
//     crash, a refused log write, a budget that ran out;
//   - class abortable from Kafka when its error is not a refusal for good (refusedForGood): a
//     transaction Kafka aborted or timed out, a broker that did not acknowledge in time.
//
// Never a statement's failure, a fenced member, a refused configuration or permission
// (invalid_configuration), the coordinator's own fault (internal), or Kafka refusing the
// records themselves (too large, invalid, an unknown topic) or the client's rights.
func againAfterAbort(err error) bool {
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrAborted) || errors.Is(err, ErrGroupFenced) {
		return false
	}
	switch e.Class {
	case "retriable":
		return true
	case "abortable":
	default:
		return false
	}
	switch e.Participant {
	case "coordinator":
		return true
	case "kafka":
		return !refusedForGood(e.Message)
	}
	return false
}

// permanentKafka are the Kafka error codes (as the error's message names them) that refuse the
// records or the client for good: the same request meets them again.
var permanentKafka = []string{
	"MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD", "CORRUPT_MESSAGE",
	"INVALID_TIMESTAMP", "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_ID", "INVALID_TOPIC_EXCEPTION",
	"_AUTHORIZATION_FAILED", "SASL_AUTHENTICATION_FAILED", "INVALID_CONFIG", "INVALID_REQUIRED_ACKS",
	"INVALID_TRANSACTION_TIMEOUT", "UNSUPPORTED_VERSION", "UNSUPPORTED_FOR_MESSAGE_FORMAT",
	"UNSUPPORTED_COMPRESSION_TYPE", "POLICY_VIOLATION",
}

// refusedForGood reports a Kafka failure message that names a permanent refusal.
func refusedForGood(message string) bool {
	for _, code := range permanentKafka {
		if strings.Contains(message, code) {
			return true
		}
	}
	return false
}

// fencedPause is the wait after a fenced batch before polling again: the member's heartbeat
// learns of the new generation and rejoins meanwhile (a poll before that finds the same batch
// fenced again, answered from the log at once).
const fencedPause = 200 * time.Millisecond

// fatalFetchError is a fetch error the loop cannot go on after (a topic or group the broker
// refuses); transient ones are retried by kgo itself.
func fatalFetchError(f kgo.Fetches) error {
	var out error
	f.EachError(func(topic string, partition int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		var gerr *kgo.ErrGroupSession
		if errors.As(err, &gerr) {
			return // the group session was lost: kgo rejoins
		}
		out = errors.Join(out, fmt.Errorf("client: pipeline fetch %s/%d: %w", topic, partition, err))
	})
	return out
}
