package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/client"
)

// pipelineEnv is a pipeline's topics, table and group on a test's store.
type pipelineEnv struct {
	e            *env
	in, out      string
	group, table string
	n            int // input records
}

// newPipelineEnv makes an input topic of n orders over partitions, an output topic and the
// shipments table.
func newPipelineEnv(e *env, n int, partitions int32) *pipelineEnv {
	e.t.Helper()
	p := &pipelineEnv{e: e, in: e.prefix + "-orders-in", out: e.prefix + "-shipments", group: e.prefix + "-shipping", table: "shipments", n: n}
	e.createTopic(p.in, partitions)
	e.createTopic(p.out, partitions)
	_, err := e.db.Exec(context.Background(), `CREATE TABLE shipments (order_id text NOT NULL, input_partition int NOT NULL, input_offset bigint NOT NULL)`)
	require.NoError(e.t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	require.NoError(e.t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: p.in, Partition: int32(i) % partitions, Key: []byte(fmt.Sprintf("o-%06d", i)), Value: []byte("{}")})
	}
	require.NoError(e.t, cl.ProduceSync(ctx, recs...).FirstErr())
	return p
}

// transform is the example's: one row and one shipment record per order.
func (p *pipelineEnv) transform(_ context.Context, batch []*kgo.Record) ([]client.Statement, []client.Record, error) {
	var sql []client.Statement
	var recs []client.Record
	for _, r := range batch {
		sql = append(sql, client.Statement{Statement: "INSERT INTO shipments (order_id, input_partition, input_offset) VALUES ($1, $2, $3)",
			Args: []any{string(r.Key), r.Partition, r.Offset}})
		recs = append(recs, client.Record{Topic: p.out, Key: client.Text(string(r.Key)), Value: client.Text("shipped")})
	}
	return sql, recs, nil
}

func (p *pipelineEnv) pipeline() client.Pipeline {
	return client.Pipeline{Brokers: p.e.brokers, Group: p.group, Topics: []string{p.in}, Transform: p.transform,
		Options: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond)}}
}

// rows counts the shipment rows per order.
func (p *pipelineEnv) rows() map[string]int {
	p.e.t.Helper()
	rows, err := p.e.db.Query(context.Background(), `SELECT order_id, count(*) FROM shipments GROUP BY order_id`)
	require.NoError(p.e.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(p.e.t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(p.e.t, rows.Err())
	return out
}

// done reports whether the group's committed offsets reached the input's end offsets.
func (p *pipelineEnv) done(ctx context.Context) bool {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.e.brokers...))
	if err != nil {
		return false
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, p.in)
	if err != nil {
		return false
	}
	committed, err := adm.FetchOffsets(ctx, p.group)
	if err != nil || committed.Error() != nil {
		return false
	}
	ok := true
	ends.Each(func(o kadm.ListedOffset) {
		c, has := committed.Lookup(p.in, o.Partition)
		ok = ok && (has && c.At == o.Offset || !has && o.Offset == 0)
	})
	return ok
}

// waitDone waits until the group has consumed the whole input.
func (p *pipelineEnv) waitDone(t *testing.T, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for !p.done(ctx) {
		require.NoError(t, ctx.Err(), "the group did not reach the input's end offsets; rows so far: %d", len(p.rows()))
		time.Sleep(200 * time.Millisecond)
	}
}

// runToEnd runs one member per pipeline through c until the group consumed the whole input,
// stops them, requires that none failed, and checks exactly once on both sides.
func (p *pipelineEnv) runToEnd(t *testing.T, c *client.Client, pls ...client.Pipeline) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, len(pls))
	for i, pl := range pls {
		wg.Go(func() { errs[i] = c.RunPipeline(ctx, pl) })
	}
	p.waitDone(t, 120*time.Second)
	cancel()
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	p.e.settled()
	p.checkExactlyOnce(t)
}

// checkExactlyOnce: every order exactly once in the table and in the output topic
// (read_committed), the group's committed offsets at the input's end, nothing prepared.
func (p *pipelineEnv) checkExactlyOnce(t *testing.T) {
	t.Helper()
	rows := p.rows()
	out := map[string]int{}
	for _, r := range p.e.committedRecords(p.out) {
		out[string(r.Key)]++
	}
	var missing, dupRows, dupRecs []string
	for i := range p.n {
		k := fmt.Sprintf("o-%06d", i)
		switch {
		case rows[k] == 0 || out[k] == 0:
			missing = append(missing, k)
		case rows[k] > 1:
			dupRows = append(dupRows, k)
		case out[k] > 1:
			dupRecs = append(dupRecs, k)
		}
	}
	assert.Empty(t, missing, "orders missing (rows %d, records %d)", len(rows), len(out))
	assert.Empty(t, dupRows, "orders with more than one row")
	assert.Empty(t, dupRecs, "orders with more than one record")
	assert.Len(t, rows, p.n)
	assert.Len(t, out, p.n)
	assert.True(t, p.done(context.Background()), "the group's offsets are the input's end offsets")
	assert.Empty(t, p.e.preparedLeft(), "nothing left prepared")
}

// TestOffsetsPipeline: two members of the client's pipeline helper process the input through
// the coordinator: exactly once on both sides, the group's offsets at the end.
func TestOffsetsPipeline(t *testing.T) {
	t.Parallel()
	if useKfake() {
		t.Skip("needs the real broker's group coordinator (KAFKA_BROKERS)")
	}
	e := newEnv(t, envOpts{})
	p := newPipelineEnv(e, 600, 3)
	c, err := client.New(e.srv.URL)
	require.NoError(t, err)
	pl := p.pipeline()
	pl.MaxPollRecords = 50
	p.runToEnd(t, c, pl, pl)
}

// TestOffsetsZombie: a member whose partitions were reassigned while it held a batch submits
// it with its old generation: 409 fenced, nothing of it commits, and the new owner processes
// the same input exactly once.
func TestOffsetsZombie(t *testing.T) {
	t.Parallel()
	if useKfake() {
		t.Skip("needs the real broker's group coordinator (KAFKA_BROKERS)")
	}
	e := newEnv(t, envOpts{})
	p := newPipelineEnv(e, 120, 2)
	c, err := client.New(e.srv.URL)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The zombie: a member that polls a batch and then stalls.
	zombie, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumerGroup(p.group), kgo.ConsumeTopics(p.in),
		kgo.DisableAutoCommit(), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.SessionTimeout(6*time.Second),
		kgo.HeartbeatInterval(500*time.Millisecond))
	require.NoError(t, err)
	defer zombie.Close()
	var batch []*kgo.Record
	for len(batch) == 0 {
		f := zombie.PollRecords(ctx, 40)
		require.NoError(t, ctx.Err())
		batch = f.Records()
	}
	member, gen := zombie.GroupMetadata()
	require.NotEmpty(t, member)

	// A new member joins: the group rebalances to a new generation and moves partitions.
	var wg sync.WaitGroup
	var runErr error
	pl := p.pipeline()
	pl.MaxPollRecords = 30
	wg.Go(func() { runErr = c.RunPipeline(ctx, pl) })
	require.Eventually(t, func() bool { _, g := zombie.GroupMetadata(); return g > gen }, 60*time.Second, 50*time.Millisecond,
		"the group moved to a new generation")

	// The zombie submits the batch it held, with its old generation.
	sql, recs, err := p.transform(ctx, batch)
	require.NoError(t, err)
	oc := client.BatchOffsets(p.group, member, gen, batch)
	_, err = c.Submit(ctx, client.TransactionRequest{ID: "zombie", SQL: sql, Kafka: recs, KafkaOffsets: oc})
	require.ErrorIs(t, err, client.ErrGroupFenced, "%v", err)
	require.ErrorIs(t, err, client.ErrAborted)
	g := e.do(http.MethodGet, "/v1/transactions/zombie", nil)
	assert.Equal(t, "aborted", g.str("state"))
	assert.Contains(t, g.str("error", "message"), p.group, "the error names the group")

	// The zombie goes; the new owner processes everything, the zombie's batch included, once.
	zombie.Close()
	p.waitDone(t, 120*time.Second)
	cancel()
	wg.Wait()
	require.NoError(t, runErr)
	e.settled()
	p.checkExactlyOnce(t)
}

// holdingTransport holds the POST of one pipeline batch (the nth) until a batch chained behind
// it was aborted for it, or hold at most, and counts the answers that aborted a batch because
// its predecessor did not commit (O4b).
type holdingTransport struct {
	nth     int
	hold    time.Duration
	release chan struct{} // closed at the first such answer
	once    sync.Once
	mu      sync.Mutex
	posts   int
	after   int // 409 answers naming an uncommitted predecessor
	// budget: those of them that waited out their budget (two chained batches waiting on
	// each other would end so)
	budget int
	// chained is the first committed answer of a batch chained after another.
	chained []byte
}

func (h *holdingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/transactions" {
		h.mu.Lock()
		h.posts++
		held := h.posts == h.nth
		h.mu.Unlock()
		if held {
			select {
			case <-h.release:
			case <-time.After(h.hold):
			}
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr == nil && resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"after":`)) {
		h.mu.Lock()
		if h.chained == nil {
			h.chained = body
		}
		h.mu.Unlock()
	}
	if rerr == nil && resp.StatusCode == http.StatusConflict && bytes.Contains(body, []byte("predecessor")) {
		h.mu.Lock()
		h.after++
		if bytes.Contains(body, []byte("budget")) {
			h.budget++
		}
		h.mu.Unlock()
		h.once.Do(func() {
			if h.release != nil {
				close(h.release)
			}
		})
	}
	return resp, rerr
}

// TestOffsetsPipelineChainBroken (O4): one batch of a member's window reaches the coordinator
// late, after the batches chained behind it gave up waiting for it. They abort (409, their
// predecessor did not commit) while it commits; the member drops them, polls again from the
// first one's offsets, and every order ends exactly once on both sides with the group's offsets
// at the end.
func TestOffsetsPipelineChainBroken(t *testing.T) {
	t.Parallel()
	if useKfake() {
		t.Skip("needs the real broker's group coordinator (KAFKA_BROKERS)")
	}
	e := newEnv(t, envOpts{})
	p := newPipelineEnv(e, 300, 2)
	// Held until a batch behind it gave up on it (after the coordinator's one-second grace
	// for a predecessor not logged yet), at most 15 s: a cold coordinator may take seconds to
	// reach that point.
	tr := &holdingTransport{nth: 2, hold: 15 * time.Second, release: make(chan struct{})}
	c, err := client.New(e.srv.URL, client.WithHTTPClient(&http.Client{Transport: tr}))
	require.NoError(t, err)
	pl := p.pipeline()
	pl.MaxPollRecords = 20
	pl.InFlight = 4
	p.runToEnd(t, c, pl)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	assert.Positive(t, tr.after, "a batch chained behind the held one aborted for it")

	// A committed chained batch shows its predecessor in GET and on the console.
	var answer struct {
		ID           string `json:"id"`
		KafkaOffsets struct {
			After string `json:"after"`
		} `json:"kafka_offsets"`
	}
	require.NoError(t, json.Unmarshal(tr.chained, &answer), "%s", tr.chained)
	require.NotEmpty(t, answer.KafkaOffsets.After, "%s", tr.chained)
	g := e.do(http.MethodGet, "/v1/transactions/"+answer.ID, nil)
	assert.Equal(t, "committed", g.str("state"))
	assert.Equal(t, answer.KafkaOffsets.After, g.str("kafka_offsets", "after"))
	b := newBrowser(t)
	b.navigate(e.srv.URL + "/ui/#/txn/" + answer.ID)
	b.visible("#offsets-after")
	assert.Equal(t, answer.KafkaOffsets.After, b.text("#offsets-after"), "the console links the predecessor")
}

// TestOffsetsPipelineSharedRow (O4c): every batch of a member's window also adds its orders to
// one row of totals, so chained batches update the same row. The statements of a batch run
// once its predecessor's are prepared, so the later batch waits for the earlier one's lock
// instead of both waiting on each other: no batch waits out its budget, and the total counts
// every order once.
func TestOffsetsPipelineSharedRow(t *testing.T) {
	t.Parallel()
	if useKfake() {
		t.Skip("needs the real broker's group coordinator (KAFKA_BROKERS)")
	}
	e := newEnv(t, envOpts{})
	p := newPipelineEnv(e, 400, 2)
	_, err := e.db.Exec(context.Background(), `CREATE TABLE totals (k text PRIMARY KEY, n bigint NOT NULL)`)
	require.NoError(t, err)
	tr := &holdingTransport{}
	c, err := client.New(e.srv.URL, client.WithHTTPClient(&http.Client{Transport: tr}))
	require.NoError(t, err)
	pl := p.pipeline()
	pl.MaxPollRecords = 10
	pl.InFlight = 4
	pl.Transform = func(ctx context.Context, batch []*kgo.Record) ([]client.Statement, []client.Record, error) {
		sql, recs, err := p.transform(ctx, batch)
		sql = append(sql, client.Statement{Statement: "INSERT INTO totals (k, n) VALUES ('orders', $1) ON CONFLICT (k) DO UPDATE SET n = totals.n + EXCLUDED.n",
			Args: []any{len(batch)}})
		return sql, recs, err
	}
	p.runToEnd(t, c, pl)
	var n int64
	require.NoError(t, e.db.QueryRow(context.Background(), `SELECT n FROM totals WHERE k = 'orders'`).Scan(&n))
	assert.Equal(t, int64(p.n), n, "every order counted once")
	tr.mu.Lock()
	defer tr.mu.Unlock()
	assert.Zero(t, tr.budget, "no batch waited out its budget for its predecessor")
}

// TestOffsetsPipelineGathers: a member whose window is full polls on, and the polls it makes
// meanwhile go out together as its next batch, within its MaxBatchRecords and the request
// limits it was given; exactly once on both sides all the same.
func TestOffsetsPipelineGathers(t *testing.T) {
	t.Parallel()
	if useKfake() {
		t.Skip("needs the real broker's group coordinator (KAFKA_BROKERS)")
	}
	cases := []struct {
		name   string
		gather int
		limits client.RequestLimits
		most   int // the largest batch allowed
	}{
		{"bounded by the member", 30, client.RequestLimits{}, 30},
		{"bounded by the statements limit", 60, client.RequestLimits{Statements: 45}, 45},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{})
			p := newPipelineEnv(e, 600, 2)
			c, err := client.New(e.srv.URL)
			require.NoError(t, err)
			pl := p.pipeline()
			pl.MaxPollRecords = 10
			pl.MaxBatchRecords = tc.gather
			pl.Limits = tc.limits
			pl.InFlight = 1
			var mu sync.Mutex
			var sizes []int
			pl.OnCommit = func(batch []*kgo.Record, _ *client.Transaction) {
				mu.Lock()
				defer mu.Unlock()
				sizes = append(sizes, len(batch))
			}
			p.runToEnd(t, c, pl)
			mu.Lock()
			defer mu.Unlock()
			require.NotEmpty(t, sizes)
			assert.Greater(t, slices.Max(sizes), 10, "batches gathered several polls: %v", sizes)
			assert.LessOrEqual(t, slices.Max(sizes), tc.most, "within the bound: %v", sizes)
		})
	}
}
