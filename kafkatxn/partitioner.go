package kafkatxn

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A request may name a record's partition, or leave it to the key. kgo's Record.Partition is
// honoured only by a manual partitioner, and 0 is both "unset" and "partition 0"; so records with
// an explicit partition carry a context marker, and the rest go to kgo's default (sticky,
// key-hashing) partitioner.
type explicitPartitionKey struct{}

func withExplicitPartition(r *kgo.Record) {
	r.Context = context.WithValue(context.Background(), explicitPartitionKey{}, true)
}

func isExplicit(r *kgo.Record) bool {
	return r.Context != nil && r.Context.Value(explicitPartitionKey{}) != nil
}

type partitioner struct{ inner kgo.Partitioner }

func newPartitioner() kgo.Partitioner { return partitioner{inner: kgo.StickyKeyPartitioner(nil)} }

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &topicPartitioner{inner: p.inner.ForTopic(topic)}
}

type topicPartitioner struct{ inner kgo.TopicPartitioner }

func (t *topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return isExplicit(r) || t.inner.RequiresConsistency(r)
}

func (t *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if isExplicit(r) {
		return int(r.Partition)
	}
	return t.inner.Partition(r, n)
}

// OnNewBatch keeps the sticky partitioner moving for records without key or partition.
func (t *topicPartitioner) OnNewBatch() {
	if nb, ok := t.inner.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}
