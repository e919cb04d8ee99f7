package kafkatxn

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestScanAndRepair: a transaction Kafka's coordinator still has open is not hanging; a leased id
// is never examined; a marker written by Repair closes the open transaction on the partition
// and gives the id back once nothing of it hangs.
func TestScanAndRepair(t *testing.T) {
	t.Parallel()
	p, c := kfakePool(t, "orders", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kt, err := p.Acquire(ctx)
	require.NoError(t, err)
	txn := kt.(*Txn)
	require.NoError(t, txn.Begin(ctx, []txntype.Record{{Topic: "orders", Key: key("a")}, {Topic: "orders", Key: key("b")}}))
	ks, err := txn.Prepare(ctx)
	require.NoError(t, err)
	ids := []string{p.TransactionalID(0), p.TransactionalID(1)}

	found, _, err := p.findHanging(ctx, ids, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	assert.Empty(t, found, "leased: its request decides it")
	txn.Release(true) // not leased any more; the transaction stays open
	found, _, err = p.findHanging(ctx, ids, time.Now())
	require.NoError(t, err)
	assert.Empty(t, found, "Kafka's coordinator has it open (Ongoing): it is not hanging")

	// The partitions hold it open. Taken as hanging, Repair sends the marker with the ids the
	// partition reported; once the partition reports it closed the id is no longer held.
	open, err := p.openOnPartitions(ctx, []string{"orders"}, map[int64]txnView{ks.ProducerID: {id: ks.TransactionalID}})
	require.NoError(t, err)
	require.NotEmpty(t, open)
	for _, h := range open {
		h.TransactionalID = ks.TransactionalID
		p.mu.Lock()
		hh := h
		p.watch.hanging[h.key()] = &hh
		p.mu.Unlock()
	}
	assert.Equal(t, len(open), len(p.HangingTransactions()))
	assert.Equal(t, 1, p.Detail().Hanging)
	var sent []kmsg.WriteTxnMarkersRequestMarker
	c.ControlKey(int16(kmsg.WriteTxnMarkers), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.WriteTxnMarkersRequest)
		sent = append(sent, r.Markers...)
		return nil, nil, false // kfake writes it
	})
	// kfake reports producers from its coordinator's view: answer as a partition whose
	// transaction the marker closed.
	c.ControlKey(int16(kmsg.DescribeProducers), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.DescribeProducersRequest)
		resp := r.ResponseKind().(*kmsg.DescribeProducersResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewDescribeProducersResponseTopic()
			st.Topic = rt.Topic
			for _, part := range rt.Partitions {
				sp := kmsg.NewDescribeProducersResponseTopicPartition()
				sp.Partition = part
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	for _, h := range p.HangingTransactions() {
		require.NoError(t, p.Repair(ctx, h, true))
	}
	require.Len(t, sent, len(open))
	for i, m := range sent {
		assert.Equal(t, ks.ProducerID, m.ProducerID)
		assert.Equal(t, open[0].ProducerEpoch, m.ProducerEpoch, "the epoch the partition last saw")
		assert.True(t, m.Committed, "marker %d follows the decision", i)
	}
	assert.Empty(t, p.HangingTransactions())
	assert.EqualValues(t, len(open), p.RepairedTotal())
	assert.Zero(t, p.Detail().Hanging)
}

// TestAcquireWaitsForTheRestartCheck: after a sign of a restart, an id is leased only once a
// scan has checked it; a held id is never leased.
func TestAcquireWaitsForTheRestartCheck(t *testing.T) {
	t.Parallel()
	p, _ := kfakePool(t, "orders", 1)
	p.RememberTopics("orders")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.suspect("test")
	p.mu.Lock()
	gen := p.watch.gen
	p.mu.Unlock()
	kt, err := p.Acquire(ctx)
	require.NoError(t, err)
	p.mu.Lock()
	assert.Equal(t, gen, p.watch.checked[kt.TransactionalID()], "checked by a scan that began after the sign")
	// Hold the other id as hanging: Acquire must not hand it out.
	other := p.TransactionalID(0)
	if other == kt.TransactionalID() {
		other = p.TransactionalID(1)
	}
	p.watch.hanging["x"] = &Hanging{TransactionalID: other, Topic: "orders"}
	p.mu.Unlock()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	_, err = p.Acquire(short)
	require.Error(t, err, "the only other id is held")
	assert.True(t, txntype.AsFailure(err).Unavailable)
	assert.Equal(t, 1, p.Detail().Hanging)
	kt.Release(true)
}

// TestCheckRecordsRecordsTopics: a topic is recorded (Config.RecordTopics) before its first
// record, once within topicRecordEvery, again once that is over, and after a failed recording;
// a failed recording fails the check as the coordinator's own retriable failure.
func TestCheckRecordsRecordsTopics(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "payments"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var calls [][]string
	var fail error
	p, err := NewPool(ctx, Config{Brokers: c.ListenAddrs(), IDPrefix: "ut", Instance: "i", PoolSize: 1,
		TransactionTimeout: 10 * time.Second, RecordTopics: func(_ context.Context, topics []string) error {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, slices.Clone(topics))
			return fail
		}}, nil)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	recorded := func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		out := calls
		calls = nil
		return out
	}
	orders := []txntype.Record{{Topic: "orders", Value: key("1")}, {Topic: "orders", Value: key("2")}}
	both := append(slices.Clone(orders), txntype.Record{Topic: "payments", Value: key("3")})

	require.NoError(t, p.CheckRecords(ctx, orders))
	assert.Equal(t, [][]string{{"orders"}}, recorded(), "recorded once before its first record")
	require.NoError(t, p.CheckRecords(ctx, orders))
	assert.Empty(t, recorded(), "recorded within the hour: not again")

	mu.Lock()
	fail = errors.New("log down")
	mu.Unlock()
	err = p.CheckRecords(ctx, both)
	var f *txntype.Failure
	require.ErrorAs(t, err, &f)
	assert.Equal(t, txntype.ParticipantCoordinator, f.Participant)
	assert.True(t, f.Unavailable, "a 503: nothing was produced")
	assert.Equal(t, [][]string{{"payments"}}, recorded(), "only the topic not recorded yet")
	mu.Lock()
	fail = nil
	mu.Unlock()
	require.NoError(t, p.CheckRecords(ctx, both))
	assert.Equal(t, [][]string{{"payments"}}, recorded(), "a failed recording is tried again")

	p.mu.Lock()
	p.touched["orders"] = time.Now().Add(-topicRecordEvery - time.Minute)
	p.mu.Unlock()
	require.NoError(t, p.CheckRecords(ctx, both))
	assert.Equal(t, [][]string{{"orders"}}, recorded(), "recorded again once the hour is over")

	// Topics remembered at startup were recorded by an earlier run, perhaps nearly a day ago:
	// this run records them again at their first record.
	p.mu.Lock()
	delete(p.touched, "payments")
	p.mu.Unlock()
	p.RememberTopics("payments")
	assert.Contains(t, p.touchedTopics(), "payments", "scanned from the start")
	require.NoError(t, p.CheckRecords(ctx, both))
	assert.Equal(t, [][]string{{"payments"}}, recorded())
}

// TestRecordTopicsOnceForABurst: requests arriving together on a topic never recorded make one
// recording, and none of them goes on before it ended; a refresh due meanwhile holds nobody.
func TestRecordTopicsOnceForABurst(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var calls atomic.Int32
	release := make(chan struct{})
	p, err := NewPool(ctx, Config{Brokers: c.ListenAddrs(), IDPrefix: "ut", Instance: "i", PoolSize: 1,
		TransactionTimeout: 10 * time.Second, RecordTopics: func(context.Context, []string) error {
			calls.Add(1)
			<-release
			return nil
		}}, nil)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	recs := []txntype.Record{{Topic: "orders", Value: key("1")}}
	require.NoError(t, p.checkTopics(ctx, recs)) // metadata first, so the burst meets only the recording

	const burst = 8
	var returned atomic.Int32
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() {
			assert.NoError(t, p.CheckRecords(ctx, recs))
			returned.Add(1)
		})
	}
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, returned.Load(), "nobody goes on before the topic is recorded")
	close(release)
	wg.Wait()
	assert.EqualValues(t, 1, calls.Load(), "one recording for the burst")

	// A refresh under way: the topic is durable already, so the others do not wait for it.
	p.mu.Lock()
	p.touched["orders"] = time.Now().Add(-topicRecordEvery - time.Minute)
	p.mu.Unlock()
	hold := make(chan struct{})
	p.cfg.RecordTopics = func(context.Context, []string) error {
		calls.Add(1)
		<-hold
		return nil
	}
	refreshed := make(chan error, 1)
	go func() { refreshed <- p.CheckRecords(ctx, recs) }()
	require.Eventually(t, func() bool { return calls.Load() == 2 }, 5*time.Second, time.Millisecond)
	require.NoError(t, p.CheckRecords(ctx, recs), "not held by the refresh")
	assert.EqualValues(t, 2, calls.Load(), "the refresh is the only recording")
	close(hold)
	require.NoError(t, <-refreshed)
}
