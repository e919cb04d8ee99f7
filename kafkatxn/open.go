package kafkatxn

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// OpenOnPartition is a transaction a producer holds open on a partition: its records from StartOffset
// on wait for a marker.
type OpenOnPartition struct {
	ProducerID  int64
	StartOffset int64
}

// OpenOnPartitions asks the leaders of the partitions which transactions they hold open now
// (DescribeProducers: the producers with a current transaction start offset), for the
// retention's Kafka evidence (R2 in docs/design.md): a logged transaction's row may go only once
// no transaction of its producer holds its records open. Each partition answers for itself:
// open lists the open transactions of every partition that answered (none: an empty entry),
// unasked the partitions that did not (no leader, an error, a topic the metadata does not
// know), with why. Nothing is read as "closed" that Kafka did not say is closed.
func (p *Pool) OpenOnPartitions(ctx context.Context, parts []TopicPartition) (open map[TopicPartition][]OpenOnPartition, unasked map[TopicPartition]error) {
	open = map[TopicPartition][]OpenOnPartition{}
	unasked = map[TopicPartition]error{}
	if len(parts) == 0 {
		return open, unasked
	}
	set := kadm.TopicsSet{}
	for _, tp := range parts {
		set.Add(tp.Topic, tp.Partition)
	}
	described, err := p.adm.DescribeProducers(ctx, set)
	for _, tp := range parts {
		dp, ok := described[tp.Topic].Partitions[tp.Partition]
		switch {
		case ok && dp.Err != nil:
			unasked[tp] = fmt.Errorf("describe producers of %s: %w", tp, dp.Err)
		case ok:
			txns := []OpenOnPartition{}
			for _, pr := range dp.ActiveProducers {
				if pr.CurrentTxnStartOffset >= 0 {
					txns = append(txns, OpenOnPartition{ProducerID: pr.ProducerID, StartOffset: pr.CurrentTxnStartOffset})
				}
			}
			open[tp] = txns
		case err != nil:
			unasked[tp] = fmt.Errorf("describe producers of %s: %w", tp, err)
		default:
			unasked[tp] = fmt.Errorf("describe producers of %s: no answer for the partition", tp)
		}
	}
	return open, unasked
}
