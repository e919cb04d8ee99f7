// Command pipeline is an exactly-once consume-transform-write pipeline through the coordinator:
// it consumes orders from a topic as a member of a consumer group, and for every polled batch
// inserts one shipment row per order and produces one shipment record per order, committing
// the batch's input offsets in the same atomic transaction (client.Pipeline). Kill it at any
// moment, run several at once, kill the coordinator: every order ends up exactly once in the
// table and once in the output topic.
//
// Its defaults are those of `coordinator dev` (the API on 127.0.0.1:8080, Kafka on
// 127.0.0.1:9092, the topics orders and shipments, the table shipments), so with dev mode
// running it needs no flags (README.md in this directory):
//
//	go run ./cmd/coordinator dev
//	go run ./examples/pipeline
//
// On your own services, create the table and the topics first:
//
//	CREATE TABLE shipments (order_id text NOT NULL, input_partition int NOT NULL, input_offset bigint NOT NULL);
//	kafka-topics.sh --bootstrap-server host:9092 --create --topic shipments
//	go run ./examples/pipeline -coordinator http://host:8080 -brokers host:9092 \
//	    -group shipping -in orders -out shipments
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/client"
)

func main() {
	var (
		coordinator = flag.String("coordinator", envOr("COORDINATOR_URL", "http://127.0.0.1:8080"), "the coordinator's base URL (env COORDINATOR_URL)")
		brokers     = flag.String("brokers", envOr("KAFKA_BROKERS", "127.0.0.1:9092"), "Kafka brokers, comma-separated (env KAFKA_BROKERS)")
		group       = flag.String("group", "shipping", "the consumer group")
		in          = flag.String("in", "orders", "the input topic (orders)")
		out         = flag.String("out", "shipments", "the output topic (shipment records)")
		table       = flag.String("table", "shipments", "the table of shipment rows")
		token       = flag.String("token", os.Getenv("COORDINATOR_TOKEN"), "a bearer token with the submit role (env COORDINATOR_TOKEN)")
		maxPoll     = flag.Int("max-poll", 100, "records per poll at most; polls made while the window is full go out together, up to 4 polls and the server's request limits")
		inFlight    = flag.Int("in-flight", client.DefaultInFlight, "batches in flight at once, each chained after the one before (1: one at a time)")
		session     = flag.Duration("session-timeout", 45*time.Second, "the group session timeout: how long a dead member holds its partitions")
		logLevel    = flag.String("log-level", "info", "debug, info, warn or error (debug adds every batch's records)")
	)
	flag.Parse()
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "pipeline: -log-level %q: want debug, info, warn or error\n", *logLevel)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var opts []client.Option
	if *token != "" {
		opts = append(opts, client.WithToken(*token))
	}
	c, err := client.New(*coordinator, opts...)
	if err != nil {
		log.Error("pipeline: client", "error", err)
		os.Exit(2)
	}
	seeds := strings.Split(*brokers, ",")
	if err := preflight(ctx, log, c, *coordinator, seeds, *in, *out); err != nil {
		log.Error("pipeline: cannot start", "error", err)
		os.Exit(1)
	}

	insert := fmt.Sprintf("INSERT INTO %s (order_id, input_partition, input_offset) VALUES ($1, $2, $3)", *table)
	var batches, orders int
	p := client.Pipeline{
		Brokers: seeds, Group: *group, Topics: []string{*in},
		MaxPollRecords: *maxPoll, InFlight: *inFlight, Logger: log,
		Options: []kgo.Opt{
			kgo.SessionTimeout(*session), kgo.HeartbeatInterval(min(3*time.Second, *session/10)),
			kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
				member, gen := cl.GroupMetadata()
				log.Info("pipeline: partitions assigned", "group", *group, "partitions", partitions(assigned),
					"member_id", member, "generation", gen)
			}),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
				log.Warn("pipeline: partitions lost (the group moved on without this member)", "group", *group, "partitions", partitions(lost))
			}),
		},
		OnRevoked: func(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
			log.Info("pipeline: partitions revoked (a rebalance; the last batch's offsets are committed)", "group", *group,
				"partitions", partitions(revoked))
		},
		Transform: func(_ context.Context, batch []*kgo.Record) ([]client.Statement, []client.Record, error) {
			sql := make([]client.Statement, 0, len(batch))
			recs := make([]client.Record, 0, len(batch))
			for _, r := range batch {
				order := string(r.Key)
				log.Debug("pipeline: order", "order", order, "partition", r.Partition, "offset", r.Offset)
				sql = append(sql, client.Statement{Statement: insert, Args: []any{order, r.Partition, r.Offset}})
				recs = append(recs, client.Record{Topic: *out, Key: client.Text(order),
					Value: client.JSON(map[string]string{"order": order, "status": "shipped"})})
			}
			return sql, recs, nil
		},
		OnCommit: func(batch []*kgo.Record, t *client.Transaction) {
			batches++
			orders += len(batch)
			attrs := []any{"id", t.ID, "state", t.State, "orders", len(batch), "offsets", offsets(t.KafkaOffsets)}
			if t.Kafka != nil {
				attrs = append(attrs, "records_out", len(t.Kafka.Records))
			}
			log.Info("pipeline: batch committed", append(attrs, "batches", batches, "orders_total", orders)...)
		},
	}
	log.Info("pipeline: joining the group", "coordinator", *coordinator, "brokers", *brokers, "group", *group,
		"in", *in, "out", *out, "table", *table)
	if err := c.RunPipeline(ctx, p); err != nil {
		log.Error("pipeline: stopped", "error", err)
		var e *client.Error
		if errors.As(err, &e) && e.SQLState == "42P01" {
			log.Error("pipeline: the table is missing; `coordinator dev` creates it, elsewhere run: " +
				"CREATE TABLE " + *table + " (order_id text NOT NULL, input_partition int NOT NULL, input_offset bigint NOT NULL)")
		}
		os.Exit(1)
	}
	log.Info("pipeline: stopped; left the group", "batches", batches, "orders", orders)
}

// preflight checks, before joining the group, that the coordinator answers and that Kafka has
// both topics, and says what to do when not (the group would otherwise wait without a word).
func preflight(ctx context.Context, log *slog.Logger, c *client.Client, url string, brokers []string, topics ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := c.Health(ctx); err != nil {
		return fmt.Errorf("the coordinator at %s does not answer (start it with `go run ./cmd/coordinator dev`, or give -coordinator): %w", url, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("Kafka at %s does not answer (`coordinator dev` prints its Kafka address; give it with -brokers): %w",
			strings.Join(brokers, ","), err)
	}
	var missing []string
	for _, t := range topics {
		if d, ok := md[t]; !ok || d.Err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("Kafka at %s has no topic %s: `coordinator dev` creates orders and shipments (more with -topics); "+
			"on your own Kafka create it (kafka-topics.sh --bootstrap-server %s --create --topic %s)",
			strings.Join(brokers, ","), strings.Join(missing, ", "), brokers[0], missing[0])
	}
	log.Info("pipeline: coordinator and Kafka answer", "topics", strings.Join(topics, ","))
	return nil
}

// partitions renders a rebalance's partitions as "topic/0,topic/1".
func partitions(m map[string][]int32) string {
	var out []string
	for topic, ps := range m {
		for _, p := range ps {
			out = append(out, fmt.Sprintf("%s/%d", topic, p))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// offsets renders a batch's committed offsets as "orders/0→42" (the next offset to read).
func offsets(o *client.OffsetCommit) string {
	if o == nil {
		return ""
	}
	var out []string
	for _, p := range o.Offsets {
		out = append(out, fmt.Sprintf("%s/%d→%d", p.Topic, p.Partition, p.Offset))
	}
	return strings.Join(out, ",")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
