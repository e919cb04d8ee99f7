package test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/service"
)

// Partition states the fake broker reports for the committed transaction's partition.
const (
	partitionOpen       int32 = iota // its producer holds a transaction open from the row's offset (hanging)
	partitionLeaderless              // the partition has no leader: it cannot be asked
	partitionClosed                  // nothing open
)

// R2, R3 and H2 through the coordinator: a committed transaction whose records Kafka still holds
// open (a hanging transaction: the broker skipped its marker) keeps its row past the retention,
// from the first pass, before any hanging scan ran and whichever instance runs it, and while the
// partition has no leader; once nothing holds the records open the row goes and leaves its mark,
// and a hanging transaction found afterwards on those records is cannot_repair, never aborted.
func TestRetentionKeepsHangingEvidence(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	e := newEnv(t, envOpts{brokers: cluster.ListenAddrs(), configure: func(c *service.Config) { c.MarkerAge = time.Second }})
	ctx := context.Background()

	r := e.post(order(e, "kept", 10))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	require.Equal(t, "committed", r.str("state"))
	e.settled()
	tid := r.str("kafka", "transactional_id")
	pid, err := strconv.ParseInt(r.str("kafka", "producer_id"), 10, 64)
	require.NoError(t, err)
	recs := r.get("kafka", "records").([]any)
	require.Len(t, recs, 1)
	partition, err := strconv.ParseInt(fmt.Sprint(recs[0].(map[string]any)["partition"]), 10, 32)
	require.NoError(t, err)
	offset, err := strconv.ParseInt(fmt.Sprint(recs[0].(map[string]any)["offset"]), 10, 64)
	require.NoError(t, err)

	var state atomic.Int32 // partitionOpen first
	describeProducers(cluster, func(topic string, p int32, sp *kmsg.DescribeProducersResponseTopicPartition) {
		if topic != e.topic || int64(p) != partition {
			return
		}
		switch state.Load() {
		case partitionOpen:
			sp.ActiveProducers = append(sp.ActiveProducers, openProducer(pid, 0, offset))
		case partitionLeaderless:
			sp.ErrorCode = kerr.NotLeaderForPartition.Code
		}
	})

	// The row ages past the retention once the marker sweep has deleted its marker (R1).
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, e.db.QueryRow(ctx, "SELECT count(*) FROM coordinator_markers").Scan(&n))
		return n == 0
	}, time.Minute, 100*time.Millisecond, "the marker sweep")
	_, err = e.db.Exec(ctx, `UPDATE coordinator_transactions SET created_at = created_at - interval '8 days',
    updated_at = updated_at - interval '8 days', finished_at = finished_at - interval '8 days',
    instance_id = 'another', owner_instance = 'another'`) // another instance's row: any instance decides alike
	require.NoError(t, err)
	// A live peer in a long pass: its heartbeat is old, and it keeps its lock (I8).
	_, err = e.db.Exec(ctx, `INSERT INTO coordinator_instances (instance_id, txn_id_prefix, pool_size, heartbeat_at)
VALUES ('another', 'p', 1, now() - interval '1 hour')`)
	require.NoError(t, err)
	exists := func() bool {
		var n int
		require.NoError(t, e.db.QueryRow(ctx, "SELECT count(*) FROM coordinator_transactions WHERE request_id = 'kept'").Scan(&n))
		return n == 1
	}

	for _, s := range []int32{partitionOpen, partitionLeaderless} {
		state.Store(s)
		st, err := e.svc.Retention.RunOnce(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, st.KeptKafka, "state %d", s)
		assert.Zero(t, st.Removed, "state %d", s)
		require.True(t, exists(), "state %d: the row stays while its records may be held open", s)
	}

	state.Store(partitionClosed)
	st, err := e.svc.Retention.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Removed, "nothing holds the records open any more")
	require.False(t, exists())
	var mark int64
	require.NoError(t, e.db.QueryRow(ctx, "SELECT max_offset FROM coordinator_pruned WHERE transactional_id = $1 AND topic = $2 AND partition = $3",
		tid, e.topic, partition).Scan(&mark), "the removal's mark (R3)")
	assert.Equal(t, offset, mark)

	// H2: records no row explains, at or below the mark, are an operator's, never an abort.
	h := kafkatxn.Hanging{TransactionalID: tid, ProducerID: pid, Topic: e.topic, Partition: int32(partition), StartOffset: offset}
	ev, err := recovery.ReadHangingEvidence(ctx, e.svc.Log, h)
	require.NoError(t, err)
	_, status, note := recovery.HangingPlan(h, ev)
	assert.Equal(t, kafkatxn.HangingCannotRepair, status, note)
	assert.Contains(t, note, fmt.Sprintf("up to offset %d", offset))
	// Above the mark, a missing row is a row never logged: abort.
	h.StartOffset = offset + 1
	ev, err = recovery.ReadHangingEvidence(ctx, e.svc.Log, h)
	require.NoError(t, err)
	commit, status, note := recovery.HangingPlan(h, ev)
	assert.Empty(t, status, note)
	assert.False(t, commit)
}

// describeProducers answers every DescribeProducers request of the cluster itself: each
// partition asked answers with nothing open, unless answer fills it in (open producers, an
// error code).
func describeProducers(cluster *kfake.Cluster, answer func(topic string, partition int32, sp *kmsg.DescribeProducersResponseTopicPartition)) {
	cluster.ControlKey(int16(kmsg.DescribeProducers), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		rq := req.(*kmsg.DescribeProducersRequest)
		resp := rq.ResponseKind().(*kmsg.DescribeProducersResponse)
		for _, rt := range rq.Topics {
			st := kmsg.NewDescribeProducersResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewDescribeProducersResponseTopicPartition()
				sp.Partition = p
				answer(rt.Topic, p, &sp)
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// openProducer is a producer a partition reports with a transaction open from offset, last
// written a minute ago.
func openProducer(pid int64, epoch int32, offset int64) kmsg.DescribeProducersResponseTopicPartitionActiveProducer {
	ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
	ap.ProducerID, ap.ProducerEpoch, ap.CurrentTxnStartOffset = pid, epoch, offset
	ap.LastTimestamp = time.Now().Add(-time.Minute).UnixMilli()
	return ap
}
