package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kpgtx/coordinator/client"
	"github.com/kpgtx/coordinator/devstack"
	"github.com/kpgtx/coordinator/service"
)

// coordinatorURL is a real coordinator, as `coordinator dev` runs it: a throwaway PostgreSQL
// with table orders and an in-process Kafka with topic orders (TestMain).
var coordinatorURL string

func Example() {
	ctx := context.Background()
	c, err := client.New(coordinatorURL) // client.WithToken(…), client.WithCAFile(…)
	if err != nil {
		log.Fatal(err)
	}

	// A row and a record, atomically. The id makes retries safe: Submit sends the request
	// again after 503 or 429 with the same id, and waits when the outcome is not known yet.
	order := client.TransactionRequest{
		ID:    "order-42",
		SQL:   []client.Statement{{Statement: "INSERT INTO orders (id, total) VALUES ($1, $2)", Args: []any{"o-42", 10}}},
		Kafka: []client.Record{{Topic: "orders", Key: client.Text("o-42"), Value: client.JSON(map[string]int{"total": 10})}},
	}
	txn, err := c.Submit(ctx, order)
	if err != nil {
		log.Fatal(err)
	}
	rec := txn.Kafka.Records[0]
	fmt.Println(txn.ID, txn.State, "rows:", txn.SQL[0].RowsAffected, "record:", rec.Topic, rec.Offset)

	// The same request again returns the stored outcome; nothing runs twice.
	again, err := c.Submit(ctx, order)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(again.ID, again.State, "offset:", again.Kafka.Records[0].Offset)

	// A statement that fails aborts both sides; the error says who refused and why.
	dup := order
	dup.ID = "order-43" // same row: a duplicate key
	_, err = c.Submit(ctx, dup)
	var e *client.Error
	if errors.As(err, &e) && errors.Is(err, client.ErrAborted) {
		fmt.Println(e.Status, e.Transaction.State, e.Participant, e.Class, "SQLSTATE", e.SQLState)
	}

	// The same id with another body is refused.
	dup.ID = "order-42"
	dup.SQL = []client.Statement{{Statement: "SELECT 1"}}
	_, err = c.Submit(ctx, dup)
	fmt.Println(errors.Is(err, client.ErrConflict))

	// Output:
	// order-42 committed rows: 1 record: orders 0
	// order-42 committed offset: 0
	// 409 aborted sql:default abortable SQLSTATE 23505
	// true
}

func ExampleClient_AllInDoubt() {
	ctx := context.Background()
	c, err := client.New(coordinatorURL)
	if err != nil {
		log.Fatal(err)
	}
	// Every page of the in-doubt view: log rows not finished, prepared PostgreSQL transactions
	// without a log row, Kafka transactions left open.
	n := 0
	for entry, err := range c.AllInDoubt(ctx, client.ListOptions{OlderThan: time.Minute}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(entry.ID, entry.Issue, entry.Actions, entry.Hint)
		n++
	}
	fmt.Println(n, "in doubt")
	// Output:
	// 0 in doubt
}

// TestMain starts the coordinator the examples talk to.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		stop, err := startCoordinator()
		if err != nil {
			fmt.Fprintln(os.Stderr, "client examples: start a coordinator:", err)
			return 1
		}
		defer stop()
		return m.Run()
	}())
}

// startCoordinator runs a coordinator on devstack's PostgreSQL and Kafka, behind an
// httptest server, and sets coordinatorURL.
func startCoordinator() (stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var cleanups []func()
	stop = func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	pg, err := devstack.StartPostgres(ctx, devstack.PostgresOptions{Logger: logger})
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { _ = pg.Stop(context.Background()) })
	kafka, err := devstack.StartKafka(ctx, "orders")
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, kafka.Stop)
	conn, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY, total numeric NOT NULL)")
	_ = conn.Close(ctx)
	if err != nil {
		return nil, err
	}
	cfg := service.Defaults()
	cfg.DatabaseURL = pg.DSN()
	cfg.Brokers = kafka.Brokers()
	cfg.Instance = "example"
	svc, err := service.Open(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, svc.Close)
	loopCtx, stopLoop := context.WithCancel(context.Background())
	svc.Start(loopCtx)
	cleanups = append(cleanups, func() { stopLoop(); svc.Recovery.Wait() })
	srv := httptest.NewServer(svc.Handler())
	cleanups = append(cleanups, srv.Close)
	coordinatorURL = srv.URL
	return stop, nil
}

// Prepare now, decide later: reserve an order, ask a payment service, then commit or roll
// back (examples/reserve is the whole program).
func ExampleClient_Prepare() {
	ctx := context.Background()
	c, err := client.New(coordinatorURL)
	if err != nil {
		log.Fatal(err)
	}
	// Phase 1 only: the row and the record are prepared, not visible, until the decision.
	// Keep the id (and the prepared_state) to decide after a crash: c.Commit(ctx, id, state)
	// or c.Rollback(ctx, id).
	p, err := c.Prepare(ctx, client.TransactionRequest{
		ID:    "reserve-o-7",
		SQL:   []client.Statement{{Statement: "INSERT INTO orders (id, customer, total) VALUES ($1, $2, $3)", Args: []any{"o-7", "alice", 25}}},
		Kafka: []client.Record{{Topic: "orders", Key: client.Text("o-7"), Value: client.JSON(map[string]string{"status": "reserved"})}},
	}, 30*time.Second)
	if err != nil {
		log.Fatal(err) // ErrAborted: phase 1 failed, nothing stays prepared
	}
	fmt.Println(p.ID, p.Transaction.State, "waiting:", p.Transaction.Waiting, "decide by:", p.DecideBy.Format(time.RFC3339))

	paid := true // the payment service's answer
	var txn *client.Transaction
	if paid {
		txn, err = p.Commit(ctx) // ErrAborted when DecideBy passed first
	} else {
		txn, err = p.Rollback(ctx) // ErrDecided when it was committed before
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(txn.ID, txn.State)
}
