package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestGroupError: a refused offset commit names the group; the group's own refusals are the
// group's participant with their KIP-1050 class, the transaction's keep classify's.
func TestGroupError(t *testing.T) {
	t.Parallel()
	oc := &txntype.OffsetCommit{GroupID: "billing"}
	cases := []struct {
		err         error
		participant string
		class       txntype.Class
	}{
		{kerr.IllegalGeneration, txntype.ParticipantKafkaGroup, txntype.ClassFenced},
		{kerr.UnknownMemberID, txntype.ParticipantKafkaGroup, txntype.ClassFenced},
		{kerr.FencedInstanceID, txntype.ParticipantKafkaGroup, txntype.ClassFenced},
		{kerr.StaleMemberEpoch, txntype.ParticipantKafkaGroup, txntype.ClassFenced},
		{kerr.FencedMemberEpoch, txntype.ParticipantKafkaGroup, txntype.ClassFenced},
		{kerr.RebalanceInProgress, txntype.ParticipantKafkaGroup, txntype.ClassFenced},
		{kerr.GroupAuthorizationFailed, txntype.ParticipantKafkaGroup, txntype.ClassInvalidConfig},
		{kerr.TopicAuthorizationFailed, txntype.ParticipantKafkaGroup, txntype.ClassInvalidConfig},
		{kerr.OffsetMetadataTooLarge, txntype.ParticipantKafkaGroup, txntype.ClassAbortable},
		{kerr.ProducerFenced, txntype.ParticipantKafka, txntype.ClassFenced},
		{kerr.InvalidProducerEpoch, txntype.ParticipantKafka, txntype.ClassFenced},
		{kerr.InvalidTxnState, txntype.ParticipantKafka, txntype.ClassAbortable},
		{context.DeadlineExceeded, txntype.ParticipantKafka, txntype.ClassAbortable},
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
	req := txnOffsetCommitRequest("tid", 42, 3, &txntype.OffsetCommit{GroupID: "g", GenerationID: &gen, MemberID: "m-1",
		GroupInstanceID: &inst, Offsets: []txntype.PartitionOffset{
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

	unf := txnOffsetCommitRequest("tid", 1, 0, &txntype.OffsetCommit{GroupID: "g", Offsets: []txntype.PartitionOffset{{Topic: "a"}}})
	assert.Equal(t, int32(-1), unf.Generation)
	assert.Empty(t, unf.MemberID)
}
