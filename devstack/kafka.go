package devstack

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

// ErrPortInUse: the port asked for is taken (another Kafka, perhaps).
var ErrPortInUse = errors.New("the port is in use")

// Kafka is an in-process Kafka (kfake) with transactions.
type Kafka struct {
	cluster *kfake.Cluster
	brokers []string
	once    sync.Once
}

// StartKafka starts a single-broker kfake cluster listening on a random port
// of 127.0.0.1 with the given topics pre-created (one partition each). Topics
// are not created automatically on first use, so producing to an unknown
// topic fails as it would against a real cluster with auto-creation off.
// Transactions (transactional producers, read_committed consumers) work.
func StartKafka(ctx context.Context, topics ...string) (*Kafka, error) {
	return StartKafkaOn(ctx, 0, topics...)
}

// StartKafkaOn is StartKafka listening on the given port of 127.0.0.1 (0: a random one). A
// port that is taken is an error that matches ErrPortInUse. The cluster also creates topics
// on request (Kafka's CreateTopics: kadm, kafka-topics.sh --create), never on first use.
func StartKafkaOn(ctx context.Context, port int, topics ...string) (*Kafka, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start kafka: %w", err)
	}
	for _, t := range topics {
		if t == "" {
			return nil, errors.New("start kafka: empty topic name")
		}
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(1),
		kfake.ClusterID("coordinator-dev"),
	}
	if port != 0 {
		opts = append(opts, kfake.Ports(port))
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(1, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("start kafka: 127.0.0.1:%d: %w", port, ErrPortInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("start kafka: %w", err)
	}
	return &Kafka{cluster: c, brokers: c.ListenAddrs()}, nil
}

// Brokers returns the seed broker addresses ("127.0.0.1:PORT").
func (k *Kafka) Brokers() []string {
	return append([]string(nil), k.brokers...)
}

// Stop shuts the cluster down and discards its data. It is idempotent.
func (k *Kafka) Stop() {
	k.once.Do(k.cluster.Close)
}
