// Command pipeline is an exactly-once consume-transform-write pipeline through the coordinator:
// it consumes orders from a topic as a member of a consumer group, and for every polled batch
// inserts one shipment row per order and produces one shipment record per order, committing
// the batch's input offsets in the same atomic transaction (client.Pipeline). Kill it at any
// moment, run several at once, kill the coordinator: every order ends up exactly once in the
// table and once in the output topic.
//
//	CREATE TABLE shipments (order_id text NOT NULL, input_partition int NOT NULL, input_offset bigint NOT NULL);
//	go run ./examples/pipeline -coordinator http://127.0.0.1:8080 -brokers 127.0.0.1:9092 \
//	    -group shipping -in orders -out shipments
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/client"
)

func main() {
	var (
		coordinator = flag.String("coordinator", envOr("COORDINATOR_URL", "http://127.0.0.1:8080"), "the coordinator's base URL")
		brokers     = flag.String("brokers", envOr("KAFKA_BROKERS", "127.0.0.1:9092"), "Kafka brokers, comma-separated")
		group       = flag.String("group", "shipping", "the consumer group")
		in          = flag.String("in", "orders", "the input topic (orders)")
		out         = flag.String("out", "shipments", "the output topic (shipment records)")
		table       = flag.String("table", "shipments", "the table of shipment rows")
		token       = flag.String("token", os.Getenv("COORDINATOR_TOKEN"), "a bearer token with the submit role")
		maxPoll     = flag.Int("max-poll", 100, "records per batch at most (one statement each: at most the server's COORDINATOR_MAX_STATEMENTS)")
		session     = flag.Duration("session-timeout", 45*time.Second, "the group session timeout: how long a dead member holds its partitions")
	)
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var opts []client.Option
	if *token != "" {
		opts = append(opts, client.WithToken(*token))
	}
	c, err := client.New(*coordinator, opts...)
	if err != nil {
		log.Error("client", "error", err)
		os.Exit(2)
	}
	insert := fmt.Sprintf("INSERT INTO %s (order_id, input_partition, input_offset) VALUES ($1, $2, $3)", *table)
	p := client.Pipeline{
		Brokers: strings.Split(*brokers, ","), Group: *group, Topics: []string{*in},
		MaxPollRecords: *maxPoll, Logger: log,
		Options: []kgo.Opt{kgo.SessionTimeout(*session), kgo.HeartbeatInterval(min(3*time.Second, *session/10))},
		Transform: func(_ context.Context, batch []*kgo.Record) ([]client.Statement, []client.Record, error) {
			sql := make([]client.Statement, 0, len(batch))
			recs := make([]client.Record, 0, len(batch))
			for _, r := range batch {
				order := string(r.Key)
				sql = append(sql, client.Statement{Statement: insert, Args: []any{order, r.Partition, r.Offset}})
				recs = append(recs, client.Record{Topic: *out, Key: client.Text(order),
					Value: client.JSON(map[string]string{"order": order, "status": "shipped"})})
			}
			return sql, recs, nil
		},
	}
	if err := c.RunPipeline(ctx, p); err != nil {
		log.Error("pipeline stopped", "error", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
