package coord_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

func offsetsOf(group string, gen *int32, member string, pos ...txntype.PartitionOffset) *txntype.OffsetCommit {
	return &txntype.OffsetCommit{GroupID: group, GenerationID: gen, MemberID: member, Offsets: pos}
}

func TestOffsetsValidate(t *testing.T) {
	t.Parallel()
	po := txntype.PartitionOffset{Topic: "in", Partition: 0, Offset: 1}
	long := strings.Repeat("m", txntype.MaxOffsetMetadata+1)
	cases := []struct {
		name  string
		oc    *txntype.OffsetCommit
		field string // "": valid
	}{
		{"unfenced", offsetsOf("g", nil, "", po), ""},
		{"unfenced by -1", offsetsOf("g", ptr(int32(-1)), "", po), ""},
		{"fenced", offsetsOf("g", ptr(int32(3)), "m-1", po), ""},
		{"static member", &txntype.OffsetCommit{GroupID: "g", GenerationID: ptr(int32(3)), MemberID: "m", GroupInstanceID: ptr("i"), Offsets: []txntype.PartitionOffset{po}}, ""},
		{"no group", offsetsOf("", nil, "", po), "kafka_offsets.group_id"},
		{"a control character in the group", offsetsOf("g\n", nil, "", po), "kafka_offsets.group_id"},
		{"generation below -1", offsetsOf("g", ptr(int32(-2)), "m", po), "kafka_offsets.generation_id"},
		{"generation without member", offsetsOf("g", ptr(int32(0)), "", po), "kafka_offsets.member_id"},
		{"member without generation", offsetsOf("g", nil, "m", po), "kafka_offsets.generation_id"},
		{"instance without generation", &txntype.OffsetCommit{GroupID: "g", GroupInstanceID: ptr("i"), Offsets: []txntype.PartitionOffset{po}}, "kafka_offsets.generation_id"},
		{"empty instance", &txntype.OffsetCommit{GroupID: "g", GenerationID: ptr(int32(1)), MemberID: "m", GroupInstanceID: ptr(""), Offsets: []txntype.PartitionOffset{po}}, "kafka_offsets.group_instance_id"},
		{"no offsets", offsetsOf("g", nil, ""), "kafka_offsets.offsets"},
		{"no topic", offsetsOf("g", nil, "", txntype.PartitionOffset{Offset: 1}), "kafka_offsets.offsets[0].topic"},
		{"a topic off the allowlist", offsetsOf("g", nil, "", txntype.PartitionOffset{Topic: "secret"}), "kafka_offsets.offsets[0].topic"},
		{"negative partition", offsetsOf("g", nil, "", txntype.PartitionOffset{Topic: "in", Partition: -1}), "kafka_offsets.offsets[0].partition"},
		{"negative offset", offsetsOf("g", nil, "", txntype.PartitionOffset{Topic: "in", Offset: -1}), "kafka_offsets.offsets[0].offset"},
		{"metadata too long", offsetsOf("g", nil, "", txntype.PartitionOffset{Topic: "in", Metadata: &long}), "kafka_offsets.offsets[0].metadata"},
		{"a partition twice", offsetsOf("g", nil, "", po, txntype.PartitionOffset{Topic: "in", Offset: 9}), "kafka_offsets.offsets[1]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := txntype.Request{SQL: []txntype.Statement{stmt("SELECT 1")}, KafkaOffsets: tc.oc}
			err := r.Validate(txntype.Limits{Topics: []string{"in"}}, func(string) bool { return true })
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var ie *txntype.InvalidError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, tc.field, ie.Field, "%v", err)
		})
	}

	t.Run("offsets alone are a request", func(t *testing.T) {
		r := txntype.Request{KafkaOffsets: offsetsOf("g", nil, "", po)}
		require.NoError(t, r.Validate(txntype.Limits{}, func(string) bool { return true }))
	})
	t.Run("the digest of a request without offsets is unchanged", func(t *testing.T) {
		a := txntype.Request{SQL: []txntype.Statement{stmt("SELECT 1")}}
		b := a
		b.KafkaOffsets = offsetsOf("g", nil, "", po)
		assert.NotEqual(t, a.Digest(), b.Digest(), "offsets are part of the body")
		c := b
		c.KafkaOffsets = offsetsOf("g", nil, "", txntype.PartitionOffset{Topic: "in", Offset: 2})
		assert.NotEqual(t, b.Digest(), c.Digest())
	})
}

// TestOffsetsRideAlone (B5, B6): requests with offsets never share a Kafka transaction, even
// when sharing is forced: each commits only its own offsets, and the one whose offsets the
// group refuses aborts with the group's refusal while no transaction that commits carries its
// offsets.
func TestOffsetsRideAlone(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.pauseAt = -1
	log, sql, kafka := fakeLog{w}, fakeSQL{w}, fakeKafka{w}
	c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", DefaultTimeout: time.Second,
		FinishTimeout: time.Second, Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}},
		Logger: slog.New(slog.DiscardHandler), Batch: coord.BatchConfig{MaxMembers: 8, Concurrency: 1}}, log, kafka, sql)
	c.ShareAlways()
	w.at = nth("kafka.offsets", 1, failBefore)(w)
	answers := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 3 {
		id := fmt.Sprintf("r%d", i)
		wg.Go(func() {
			req := batchRequest(id)
			req.KafkaOffsets = offsetsOf("g", ptr(int32(1)), "m-"+id, txntype.PartitionOffset{Topic: "in", Partition: 0, Offset: int64(i + 1)})
			_, err := c.Execute(context.Background(), req)
			mu.Lock()
			answers[id] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	require.NoError(t, c.WaitFinals(context.Background()))
	assert.Zero(t, c.OpenBatchMembers())

	rows, _, _, ktx := w.snapshot()
	w.mu.Lock()
	defer w.mu.Unlock()
	refused := 0
	for id, err := range answers {
		row := rows["p_"+id]
		if err != nil {
			refused++
			require.ErrorIs(t, err, txntype.ErrAborted, id)
			assert.Equal(t, txntype.StateAborted, row.State)
			require.NotNil(t, row.Error)
			assert.Equal(t, txntype.ParticipantKafkaGroup, row.Error.Participant)
			assert.Equal(t, txntype.ClassFenced, row.Error.Class)
		} else {
			assert.Equal(t, txntype.StateCommitted, row.State, id)
			require.NotNil(t, row.Kafka)
		}
		for pid, oc := range w.kafkaOffsets {
			if oc.MemberID != "m-"+id {
				continue
			}
			if err != nil {
				assert.NotEqual(t, "committed", ktx[pid], "B6: the refused %s's offsets ride in no committed transaction", id)
			} else {
				assert.Equal(t, row.Kafka.ProducerID, pid, "B5: %s's offsets ride in its own transaction", id)
			}
		}
	}
	assert.Equal(t, 1, refused, "%v", answers)
}
