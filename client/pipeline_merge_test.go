package client

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// part is a transformed poll of n records, n statements and n records, each value v.
func part(n int, v string, name string) *pendingBatch {
	var in []*kgo.Record
	var sql []Statement
	var out []Record
	for i := range n {
		in = append(in, &kgo.Record{Topic: "in", Offset: int64(i)})
		sql = append(sql, Statement{Statement: "INSERT INTO t VALUES ($1)", Name: name, Args: []any{v}})
		out = append(out, Record{Topic: "out", Value: Text(v)})
	}
	return newPending(in, sql, out)
}

// TestPendingJoin: a poll joins the batch pending before it only while the merged batch keeps
// within the member's MaxBatchRecords and every request limit, and never when either has named
// statements.
func TestPendingJoin(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 4000)
	limits := RequestLimits{Statements: 1000, Records: 1000, BodyBytes: 1 << 20}
	cases := []struct {
		name     string
		a, b     *pendingBatch
		gather   int
		limits   RequestLimits
		want     bool
		openLeft bool // the merged (or first) batch may still gather
	}{
		{"fits", part(10, "v", ""), part(10, "v", ""), 40, limits, true, true},
		{"fills the batch exactly", part(10, "v", ""), part(10, "v", ""), 20, limits, true, false},
		{"over the member's records", part(10, "v", ""), part(11, "v", ""), 20, limits, false, true},
		{"over the statements", part(10, "v", ""), part(10, "v", ""), 100, RequestLimits{Statements: 15, Records: 1000, BodyBytes: 1 << 20}, false, true},
		{"over the records", part(10, "v", ""), part(10, "v", ""), 100, RequestLimits{Statements: 1000, Records: 19, BodyBytes: 1 << 20}, false, true},
		{"over the body", part(100, big, ""), part(100, big, ""), 1000, limits, false, true},
		{"named before", part(1, "v", "n"), part(1, "v", ""), 100, limits, false, false},
		{"named after", part(1, "v", ""), part(1, "v", "n"), 100, limits, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			na, nb := len(c.a.batch), len(c.b.batch)
			got := c.a.join(c.b, c.gather, c.limits)
			assert.Equal(t, c.want, got)
			if got {
				assert.Len(t, c.a.batch, na+nb)
				assert.Len(t, c.a.sql, na+nb)
				assert.Len(t, c.a.kafka, na+nb)
				body, err := c.a.body("id", nil, nil)
				require.NoError(t, err)
				assert.LessOrEqual(t, len(body)-len(`{"id":"id"}`), c.a.size(), "the size counted is never below the size sent")
			} else {
				assert.Len(t, c.a.batch, na, "a refused join leaves the batch as it was")
			}
			assert.Equal(t, c.openLeft, c.a.open(c.gather, c.limits))
		})
	}
}

// TestGatherBound: a member's MaxBatchRecords is its bound; without one, sixteen polls are.
func TestGatherBound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ maxBatch, maxPoll, want int }{
		{0, 500, 8000},
		{0, 100, 1600},
		{-1, 100, 1600},
		{250, 100, 250},
		{100, 100, 100}, // every poll alone
	} {
		assert.Equal(t, c.want, gatherBound(c.maxBatch, c.maxPoll), "MaxBatchRecords %d, MaxPollRecords %d", c.maxBatch, c.maxPoll)
	}
}

// TestPendingQueue: the member's pending polls gather into one batch while it is open, start a
// second one when the next poll does not fit, and gathering stops then.
func TestPendingQueue(t *testing.T) {
	t.Parallel()
	r := &pipelineRun{gather: 25, limits: DefaultRequestLimits}
	assert.True(t, r.gathering(), "nothing pending")
	r.add(part(10, "v", ""))
	r.add(part(10, "v", ""))
	assert.Len(t, r.pending, 1)
	assert.True(t, r.gathering(), "20 of 25")
	r.add(part(10, "v", ""))
	assert.Len(t, r.pending, 2, "30 would be over 25: a batch of its own")
	assert.False(t, r.gathering(), "two batches wait: poll no more")
	assert.Len(t, r.dropPending(), 30)
	assert.Empty(t, r.pending)
}

// TestPendingBody: a batch's body, built from the parts encoded as its polls joined, is byte for
// byte what encoding/json writes for the same TransactionRequest; a part that cannot be encoded
// joins nothing and fails its own request as Submit would.
func TestPendingBody(t *testing.T) {
	t.Parallel()
	gen := int32(3)
	oc := &OffsetCommit{GroupID: "g", MemberID: "m", GenerationID: &gen, After: "prev",
		Offsets: []PartitionOffset{{Topic: "in", Partition: 1, Offset: 42}}}
	sqlOnly := newPending([]*kgo.Record{{Topic: "in"}}, []Statement{{Statement: "SELECT $1", Args: []any{"a\u2028\"<>&", 1.5, nil, true}}}, nil)
	kafkaOnly := newPending([]*kgo.Record{{Topic: "in"}}, nil, []Record{{Topic: "out", Key: Binary([]byte{0, 255}), Value: JSON(map[string]any{"n": nil}),
		Headers: []Header{TextHeader("h", "v"), BinaryHeader("b", nil)}}})
	joined := func() *pendingBatch {
		b := part(3, "x", "")
		require.True(t, b.join(part(2, "y", ""), 100, DefaultRequestLimits))
		require.True(t, b.join(kafkaOnly, 100, DefaultRequestLimits))
		require.True(t, b.join(sqlOnly, 100, DefaultRequestLimits))
		return b
	}()
	cases := []struct {
		name    string
		b       *pendingBatch
		timeout *int64
		oc      *OffsetCommit
	}{
		{"statements only", sqlOnly, nil, nil},
		{"records only", kafkaOnly, nil, oc},
		{"both, with a budget", part(2, "v", ""), Ptr[int64](500), oc},
		{"joined polls", joined, Ptr[int64](100), oc},
		{"nothing", newPending(nil, nil, nil), nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := c.b.body("pl-1", c.timeout, c.oc)
			require.NoError(t, err)
			want, err := json.Marshal(TransactionRequest{ID: "pl-1", SQL: c.b.sql, Kafka: c.b.kafka, TimeoutMS: c.timeout, KafkaOffsets: c.oc})
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
		})
	}
	t.Run("a part that cannot be encoded", func(t *testing.T) {
		t.Parallel()
		bad := newPending([]*kgo.Record{{Topic: "in"}}, nil, []Record{{Topic: "out", Value: JSON(func() {})}})
		require.Error(t, bad.err)
		b := part(1, "v", "")
		assert.False(t, b.join(bad, 100, DefaultRequestLimits), "it joins nothing")
		assert.False(t, bad.join(part(1, "v", ""), 100, DefaultRequestLimits), "nothing joins it")
		_, err := bad.body("pl-1", nil, nil)
		assert.ErrorContains(t, err, "client: encode the request")
	})
}
