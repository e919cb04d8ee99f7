package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kpgtx/coordinator/coord"
)

// TestGroupError: a refused offset commit names the group; the group's own refusals are the
// group's participant with their KIP-1050 class, the transaction's keep classify's.
func TestGroupError(t *testing.T) {
	t.Parallel()
	oc := &coord.OffsetCommit{GroupID: "billing"}
	cases := []struct {
		err         error
		participant string
		class       coord.Class
	}{
		{kerr.IllegalGeneration, coord.ParticipantKafkaGroup, coord.ClassFenced},
		{kerr.UnknownMemberID, coord.ParticipantKafkaGroup, coord.ClassFenced},
		{kerr.FencedInstanceID, coord.ParticipantKafkaGroup, coord.ClassFenced},
		{kerr.StaleMemberEpoch, coord.ParticipantKafkaGroup, coord.ClassFenced},
		{kerr.FencedMemberEpoch, coord.ParticipantKafkaGroup, coord.ClassFenced},
		{kerr.RebalanceInProgress, coord.ParticipantKafkaGroup, coord.ClassFenced},
		{kerr.GroupAuthorizationFailed, coord.ParticipantKafkaGroup, coord.ClassInvalidConfig},
		{kerr.TopicAuthorizationFailed, coord.ParticipantKafkaGroup, coord.ClassInvalidConfig},
		{kerr.OffsetMetadataTooLarge, coord.ParticipantKafkaGroup, coord.ClassAbortable},
		{kerr.ProducerFenced, coord.ParticipantKafka, coord.ClassFenced},
		{kerr.InvalidProducerEpoch, coord.ParticipantKafka, coord.ClassFenced},
		{kerr.InvalidTxnState, coord.ParticipantKafka, coord.ClassAbortable},
		{context.DeadlineExceeded, coord.ParticipantKafka, coord.ClassAbortable},
	}
	for _, tc := range cases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			f := groupError(oc, fmt.Errorf("orders partition 0: %w", tc.err))
			assert.Equal(t, tc.participant, f.Participant)
			assert.Equal(t, tc.class, f.Class)
			assert.True(t, strings.Contains(f.Error(), `"billing"`), "names the group: %s", f)
			assert.True(t, errors.Is(f, tc.err))
		})
	}
}

// TestGroupRetriable: the answers resent with the same ids, and those that end the commit.
func TestGroupRetriable(t *testing.T) {
	t.Parallel()
	for _, err := range []error{kerr.CoordinatorLoadInProgress, kerr.NotCoordinator, kerr.CoordinatorNotAvailable,
		kerr.ConcurrentTransactions, kerr.UnstableOffsetCommit} {
		assert.True(t, groupRetriable(fmt.Errorf("x: %w", err)), "%v", err)
	}
	for _, err := range []error{kerr.IllegalGeneration, kerr.GroupAuthorizationFailed, kerr.ProducerFenced,
		context.DeadlineExceeded, context.Canceled} {
		assert.False(t, groupRetriable(fmt.Errorf("x: %w", err)), "%v", err)
	}
}

// TestTxnOffsetCommitRequest: one topic entry per topic, the member's fencing fields, and -1
// for an unfenced commit.
func TestTxnOffsetCommitRequest(t *testing.T) {
	t.Parallel()
	gen, inst, md := int32(7), "i-1", "m"
	req := txnOffsetCommitRequest("tid", 42, 3, &coord.OffsetCommit{GroupID: "g", GenerationID: &gen, MemberID: "m-1",
		GroupInstanceID: &inst, Offsets: []coord.PartitionOffset{
			{Topic: "a", Partition: 0, Offset: 5, Metadata: &md}, {Topic: "b", Partition: 1, Offset: 6}, {Topic: "a", Partition: 2, Offset: 7}}})
	assert.Equal(t, "tid", req.TransactionalID)
	assert.Equal(t, int64(42), req.ProducerID)
	assert.Equal(t, int16(3), req.ProducerEpoch)
	assert.Equal(t, int32(7), req.Generation)
	assert.Equal(t, "m-1", req.MemberID)
	assert.Equal(t, &inst, req.InstanceID)
	assert.Len(t, req.Topics, 2)
	assert.Len(t, req.Topics[0].Partitions, 2)
	assert.Equal(t, &md, req.Topics[0].Partitions[0].Metadata)

	unf := txnOffsetCommitRequest("tid", 1, 0, &coord.OffsetCommit{GroupID: "g", Offsets: []coord.PartitionOffset{{Topic: "a"}}})
	assert.Equal(t, int32(-1), unf.Generation)
	assert.Empty(t, unf.MemberID)
}
