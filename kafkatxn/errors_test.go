package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// dialError is what a refused TCP connection to a broker looks like.
func dialError() error {
	return &net.OpError{
		Op:  "dial",
		Net: "tcp",
		Addr: &net.TCPAddr{
			IP:   net.IPv4(127, 0, 0, 1),
			Port: 9092,
		},
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED),
	}
}

func wrap(err error) error { return fmt.Errorf("produce to t: %w", err) }

func TestClassifyNil(t *testing.T) {
	t.Parallel()
	assert.Nil(t, classify(nil))
}

func TestClassifyKafkaCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		err   error
		class txntype.Class
	}{
		// Fenced (application-recoverable).
		{"producer fenced", kerr.ProducerFenced, txntype.ClassFenced},
		{"invalid producer epoch", kerr.InvalidProducerEpoch, txntype.ClassFenced},
		{"txn coordinator fenced", kerr.TransactionCoordinatorFenced, txntype.ClassFenced},
		{"invalid producer id mapping", kerr.InvalidProducerIDMapping, txntype.ClassFenced},
		{"unknown producer id", kerr.UnknownProducerID, txntype.ClassFenced},
		// Invalid configuration.
		{"topic authorization", kerr.TopicAuthorizationFailed, txntype.ClassInvalidConfig},
		{"transactional id authorization", kerr.TransactionalIDAuthorizationFailed, txntype.ClassInvalidConfig},
		{"cluster authorization", kerr.ClusterAuthorizationFailed, txntype.ClassInvalidConfig},
		{"invalid transaction timeout", kerr.InvalidTransactionTimeout, txntype.ClassInvalidConfig},
		{"unsupported version", kerr.UnsupportedVersion, txntype.ClassInvalidConfig},
		{"sasl authentication", kerr.SaslAuthenticationFailed, txntype.ClassInvalidConfig},
		// Abortable.
		{"message too large", kerr.MessageTooLarge, txntype.ClassAbortable},
		{"record list too large", kerr.RecordListTooLarge, txntype.ClassAbortable},
		{"unknown topic or partition", kerr.UnknownTopicOrPartition, txntype.ClassAbortable},
		{"invalid txn state", kerr.InvalidTxnState, txntype.ClassAbortable},
		{"transaction abortable", kerr.TransactionAbortable, txntype.ClassAbortable},
		{"invalid record", kerr.InvalidRecord, txntype.ClassAbortable},
		{"corrupt message", kerr.CorruptMessage, txntype.ClassAbortable},
		// Retriable (Kafka marks them retriable).
		{"not enough replicas", kerr.NotEnoughReplicas, txntype.ClassRetriable},
		{"request timed out", kerr.RequestTimedOut, txntype.ClassRetriable},
		{"not leader", kerr.NotLeaderForPartition, txntype.ClassRetriable},
		{"coordinator loading", kerr.CoordinatorLoadInProgress, txntype.ClassRetriable},
		// Neither listed nor retriable: abortable by default.
		{"unknown server error", kerr.UnknownServerError, txntype.ClassAbortable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, err := range []error{tt.err, wrap(tt.err), wrap(wrap(tt.err))} {
				f := classify(err)
				require.NotNil(t, f)
				assert.Equal(t, tt.class, f.Class, "classify(%v)", err)
				assert.False(t, f.Unavailable, "classify(%v).Unavailable", err)
				assert.Equal(t, txntype.ParticipantKafka, f.Participant)
				assert.Same(t, err, f.Err, "the original error is kept")
				assert.ErrorIs(t, f, tt.err, "the Failure unwraps to the Kafka error")
			}
		})
	}
}

func TestClassifyCodeUsesKafkaRetriableFlag(t *testing.T) {
	t.Parallel()
	// Every Kafka error code that classifyCode does not name explicitly follows Kafka's own
	// retriable flag.
	named := map[*kerr.Error]bool{}
	for _, e := range []*kerr.Error{
		kerr.ProducerFenced, kerr.InvalidProducerEpoch, kerr.TransactionCoordinatorFenced,
		kerr.InvalidProducerIDMapping, kerr.UnknownProducerID,
		kerr.TopicAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed,
		kerr.ClusterAuthorizationFailed, kerr.InvalidTransactionTimeout, kerr.UnsupportedVersion,
		kerr.UnsupportedForMessageFormat, kerr.SaslAuthenticationFailed, kerr.InvalidConfig,
		kerr.UnsupportedCompressionType, kerr.InvalidRequiredAcks,
		kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord,
		kerr.UnknownTopicOrPartition, kerr.UnknownTopicID, kerr.InvalidTopicException,
		kerr.TransactionAbortable, kerr.InvalidTxnState, kerr.InvalidTimestamp,
		kerr.CorruptMessage,
	} {
		named[e] = true
	}
	for code := int16(-1); code < 200; code++ {
		err := kerr.ErrorForCode(code)
		ke, ok := err.(*kerr.Error)
		if !ok || named[ke] || (ke == kerr.UnknownServerError && code != -1) {
			continue
		}
		want := txntype.ClassAbortable
		if ke.Retriable || ke == kerr.ConcurrentTransactions {
			want = txntype.ClassRetriable
		}
		assert.Equal(t, want, classifyCode(ke), "code %d (%s)", code, ke.Message)
	}
}

func TestClassifyNonKafkaErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		err         error
		class       txntype.Class
		unavailable bool
	}{
		{"pool exhausted", ErrPoolExhausted, txntype.ClassRetriable, true},
		{"pool exhausted wrapped", wrap(ErrPoolExhausted), txntype.ClassRetriable, true},
		{"dial error", dialError(), txntype.ClassRetriable, true},
		{"dial error wrapped", wrap(dialError()), txntype.ClassRetriable, true},
		{"connection refused", wrap(syscall.ECONNREFUSED), txntype.ClassRetriable, true},
		{"client closed", kgo.ErrClientClosed, txntype.ClassRetriable, true},
		{"kafka aborted", txntype.ErrKafkaAborted, txntype.ClassAbortable, false},
		{"kafka aborted wrapped", wrap(txntype.ErrKafkaAborted), txntype.ClassAbortable, false},
		{"record timeout", kgo.ErrRecordTimeout, txntype.ClassAbortable, false},
		{"record retries", kgo.ErrRecordRetries, txntype.ClassAbortable, false},
		{"aborting", kgo.ErrAborting, txntype.ClassAbortable, false},
		{"canceled", context.Canceled, txntype.ClassAbortable, false},
		{"unknown", errors.New("something else"), txntype.ClassAbortable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := classify(tt.err)
			require.NotNil(t, f)
			assert.Equal(t, tt.class, f.Class)
			assert.Equal(t, tt.unavailable, f.Unavailable)
			assert.Equal(t, txntype.ParticipantKafka, f.Participant)
			assert.ErrorIs(t, f, tt.err)
		})
	}
}

// The budget running out is not the broker being down: the transaction cannot commit, the
// producer is fine (abortable, not Unavailable). context.DeadlineExceeded implements net.Error
// (Timeout() is true), so it must be tested before the connection-error case.
func TestClassifyDeadlineExceeded(t *testing.T) {
	t.Parallel()
	for _, err := range []error{context.DeadlineExceeded, wrap(context.DeadlineExceeded)} {
		f := classify(err)
		require.NotNil(t, f)
		assert.Equal(t, txntype.ClassAbortable, f.Class, "classify(%v)", err)
		assert.False(t, f.Unavailable, "classify(%v).Unavailable", err)
	}
}

func TestEndTxnRetriable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{kerr.ConcurrentTransactions, true},
		{kerr.NotCoordinator, true},
		{kerr.CoordinatorLoadInProgress, true},
		{kerr.CoordinatorNotAvailable, true},
		{kerr.RequestTimedOut, true},
		{kerr.NetworkException, true},
		{dialError(), true},
		{wrap(kerr.ConcurrentTransactions), true},
		{kerr.ProducerFenced, false},
		{kerr.InvalidTxnState, false},
		{kerr.TransactionAbortable, false},
		{kerr.InvalidProducerEpoch, false},
		{wrap(kerr.ProducerFenced), false},
		{errors.New("other"), false},
		{nil, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.err), func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, endTxnRetriable(tt.err))
		})
	}
}

func TestEndTxnAbortAsked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{kerr.InvalidTxnState, true},
		{kerr.TransactionAbortable, true},
		{wrap(kerr.InvalidTxnState), true},
		{wrap(kerr.TransactionAbortable), true},
		// PRODUCER_FENCED is ambiguous (a late commit after the id was reused): not aborted.
		{kerr.ProducerFenced, false},
		{wrap(kerr.ProducerFenced), false},
		{kerr.InvalidProducerEpoch, false},
		{kerr.ConcurrentTransactions, false},
		{kerr.RequestTimedOut, false},
		{txntype.ErrKafkaAborted, false},
		{dialError(), false},
		{nil, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.err), func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, endTxnAbortAsked(tt.err))
		})
	}
}

func TestProducerBroken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{kerr.ProducerFenced, true},
		{kerr.InvalidProducerEpoch, true},
		{wrap(kerr.UnknownProducerID), true},
		{kerr.OperationNotAttempted, true},
		{errors.New("unknown outcome"), true},
		{dialError(), true},
		{kerr.MessageTooLarge, false},
		{kerr.InvalidTxnState, false},
		{kerr.NotEnoughReplicas, false},
		{kerr.TopicAuthorizationFailed, false},
		{nil, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.err), func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, producerBroken(tt.err))
		})
	}
}

func partitionOf(t *testing.T, tp kgo.TopicPartitioner, r *kgo.Record, n int) int {
	t.Helper()
	p := tp.Partition(r, n)
	require.GreaterOrEqual(t, p, 0)
	return p
}

func TestPartitionerExplicitPartition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		key       []byte
		partition int32
	}{
		{"partition 0 without key", nil, 0},
		{"partition 5 without key", nil, 5},
		{"partition 0 with key", []byte("k"), 0},
		{"partition 7 with key", []byte("k"), 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tp := newPartitioner().ForTopic("orders")
			for range 20 {
				r := &kgo.Record{Topic: "orders", Key: tt.key, Partition: tt.partition}
				withExplicitPartition(r)
				require.True(t, isExplicit(r))
				assert.True(t, tp.RequiresConsistency(r))
				assert.Equal(t, int(tt.partition), partitionOf(t, tp, r, 8))
				if nb, ok := tp.(kgo.TopicPartitionerOnNewBatch); ok {
					nb.OnNewBatch()
				}
			}
		})
	}
}

func TestPartitionerKeyed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		n    int
	}{
		{"one partition", 1},
		{"three partitions", 3},
		{"sixteen partitions", 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p1 := newPartitioner().ForTopic("orders")
			p2 := newPartitioner().ForTopic("orders")
			seen := map[int]bool{}
			for i := range 50 {
				key := []byte(fmt.Sprintf("key-%d", i))
				r := &kgo.Record{Topic: "orders", Key: key}
				require.False(t, isExplicit(r))
				assert.True(t, p1.RequiresConsistency(r), "keyed records hash consistently")
				first := partitionOf(t, p1, r, tt.n)
				assert.Less(t, first, tt.n)
				// Same key: same partition, on the same and on another partitioner, also
				// after a new batch.
				if nb, ok := p1.(kgo.TopicPartitionerOnNewBatch); ok {
					nb.OnNewBatch()
				}
				assert.Equal(t, first, partitionOf(t, p1, &kgo.Record{Topic: "orders", Key: key}, tt.n))
				assert.Equal(t, first, partitionOf(t, p2, &kgo.Record{Topic: "orders", Key: key}, tt.n))
				seen[first] = true
			}
			if tt.n > 1 {
				assert.Greater(t, len(seen), 1, "keys spread over partitions")
			}
		})
	}
}

func TestToKgoPartition(t *testing.T) {
	t.Parallel()
	zero, three := int32(0), int32(3)
	key := txntype.Text("k")
	tests := []struct {
		name     string
		rec      txntype.Record
		explicit bool
		want     int32
	}{
		{"no partition", txntype.Record{Topic: "t", Key: key}, false, 0},
		{"partition 0", txntype.Record{Topic: "t", Partition: &zero}, true, 0},
		{"partition 3", txntype.Record{Topic: "t", Key: key, Partition: &three}, true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			kr := toKgo(tt.rec)
			assert.Equal(t, tt.explicit, isExplicit(kr))
			if tt.explicit {
				assert.Equal(t, int(tt.want), newPartitioner().ForTopic("t").Partition(kr, 8))
			}
		})
	}
}

// A flush the brokers did not acknowledge within the budget means Kafka is down: nothing was
// prepared, so the caller may retry (503). Other flush errors keep their class.
func TestUnacknowledged(t *testing.T) {
	t.Parallel()
	f := unacknowledged(fmt.Errorf("flush: %w", context.DeadlineExceeded))
	assert.Equal(t, txntype.ClassRetriable, f.Class)
	assert.True(t, f.Unavailable)
	f = unacknowledged(fmt.Errorf("flush: %w", kerr.MessageTooLarge))
	assert.Equal(t, txntype.ClassAbortable, f.Class)
	assert.False(t, f.Unavailable)
}
