// Command reserve composes two steps with "prepare now, decide later": it reserves an order
// through the coordinator (a row in the table orders and an "order reserved" record, prepared
// on both sides but not visible yet: client.Prepare), then asks a payment service, and commits
// the reservation when the payment is approved or rolls it back when it is declined. The
// payment service is simulated in-process (an HTTP handler that declines amounts above
// -limit, or everything with -decline).
//
// Its defaults are those of `coordinator dev` (the API on 127.0.0.1:8080, the table and topic
// orders), so with dev mode running it needs no flags (README.md in this directory):
//
//	go run ./cmd/coordinator dev
//	go run ./examples/reserve
//	go run ./examples/reserve -decline
//
// On your own services, create the table first:
//
//	CREATE TABLE orders (id text PRIMARY KEY, customer text, total numeric NOT NULL);
//	go run ./examples/reserve -url http://host:8080 -topic orders
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kpgtx/coordinator/client"
)

func main() {
	var (
		baseURL  = flag.String("url", envOr("COORDINATOR_URL", "http://127.0.0.1:8080"), "the coordinator's base URL (env COORDINATOR_URL)")
		token    = flag.String("token", os.Getenv("COORDINATOR_TOKEN"), "a bearer token with the submit role (env COORDINATOR_TOKEN)")
		topic    = flag.String("topic", "orders", "the topic of the \"order reserved\" record")
		table    = flag.String("table", "orders", "the table of orders: (id text PRIMARY KEY, customer text, total numeric NOT NULL)")
		order    = flag.String("order", "", "the order's id (default: a new one)")
		customer = flag.String("customer", "alice", "the order's customer")
		amount   = flag.Int("amount", 25, "the order's total, which the payment service charges")
		limit    = flag.Int("limit", 1000, "the payment service declines amounts above this")
		decline  = flag.Bool("decline", false, "the payment service declines the payment")
		within   = flag.Duration("within", 30*time.Second, "the window to decide in, after which the coordinator aborts the reservation (0: the coordinator's bound)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var opts []client.Option
	if *token != "" {
		opts = append(opts, client.WithToken(*token))
	}
	c, err := client.New(*baseURL, opts...)
	if err != nil {
		fail(2, "reserve: %v", err)
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = c.Health(hctx)
	cancel()
	if err != nil {
		fail(1, "reserve: the coordinator at %s does not answer (start it with `go run ./cmd/coordinator dev`, or give -url): %v", *baseURL, err)
	}

	payments := httptest.NewServer(paymentService(*limit, *decline))
	defer payments.Close()

	if *order == "" {
		*order = "o-" + client.NewID()[:12]
	}
	outcome, err := run(ctx, c, payments.URL, reservation{
		order: *order, customer: *customer, amount: *amount, table: *table, topic: *topic, within: *within,
	})
	if err != nil {
		var e *client.Error
		if errors.As(err, &e) && e.SQLState == "42P01" {
			fmt.Fprintf(os.Stderr, "reserve: the table is missing; `coordinator dev` creates it, elsewhere run: "+
				"CREATE TABLE %s (id text PRIMARY KEY, customer text, total numeric NOT NULL)\n", *table)
		}
		fail(1, "reserve: %v", err)
	}
	fmt.Println(outcome)
}

// reservation is what the example reserves.
type reservation struct {
	order, customer string
	amount          int
	table, topic    string
	within          time.Duration
}

// run is the two steps: reserve (prepare), pay, then commit or roll back. It returns the
// outcome's line.
func run(ctx context.Context, c *client.Client, paymentsURL string, r reservation) (string, error) {
	// Step 1: reserve. The row and the record are prepared on both sides; nothing is visible
	// until the commit. The id is ours, so that a crash before the decision can be followed by
	// c.Rollback(ctx, id) (or c.Commit(ctx, id, preparedState)) from another process.
	id := "reserve-" + r.order
	p, err := c.Prepare(ctx, client.TransactionRequest{
		ID: id,
		SQL: []client.Statement{{
			Statement: fmt.Sprintf("INSERT INTO %s (id, customer, total) VALUES ($1, $2, $3)", r.table),
			Args:      []any{r.order, r.customer, r.amount},
		}},
		Kafka: []client.Record{{
			Topic: r.topic, Key: client.Text(r.order),
			Value: client.JSON(map[string]any{"order": r.order, "customer": r.customer, "total": r.amount, "status": "reserved"}),
		}},
	}, r.within)
	if err != nil {
		return "", fmt.Errorf("reserve order %s: %w", r.order, err)
	}
	fmt.Printf("reserved order %s: transaction %s %s, prepared_state %s, decide by %s\n",
		r.order, p.ID, p.Transaction.State, p.PreparedState, p.DecideBy.Format(time.RFC3339))

	// Step 2: pay. Whatever goes wrong here, the reservation is rolled back.
	approved, reason, err := pay(ctx, paymentsURL, r.order, r.amount)
	if err != nil {
		reason = "payment service: " + err.Error()
	}
	// Decide even when ctx was cancelled (Ctrl-C): the reservation would otherwise wait until
	// its deadline.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if approved {
		fmt.Printf("payment of %d for order %s: approved\n", r.amount, r.order)
		txn, err := p.Commit(dctx)
		if err != nil {
			// ErrAborted: the deadline passed first (or the reservation was rolled back).
			return "", fmt.Errorf("commit order %s: %w", r.order, err)
		}
		out := fmt.Sprintf("order %s: %s (the row and the record are visible)", r.order, txn.State)
		if txn.Kafka != nil && len(txn.Kafka.Records) > 0 {
			rec := txn.Kafka.Records[0]
			out += fmt.Sprintf("; record %s/%d@%d", rec.Topic, rec.Partition, rec.Offset)
		}
		return out, nil
	}
	fmt.Printf("payment of %d for order %s: declined (%s)\n", r.amount, r.order, reason)
	txn, err := p.Rollback(dctx)
	if err != nil {
		// ErrDecided: it was committed before (by another process holding the id).
		return "", fmt.Errorf("roll back order %s: %w", r.order, err)
	}
	return fmt.Sprintf("order %s: %s, rolled back (nothing of it is visible)", r.order, txn.State), nil
}

// payment is the simulated payment service's request and answer.
type payment struct {
	Order    string `json:"order"`
	Amount   int    `json:"amount"`
	Approved bool   `json:"approved"`
	Reason   string `json:"reason,omitempty"`
}

// paymentService approves a payment up to limit, unless it declines everything.
func paymentService(limit int, declineAll bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p payment
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Order == "" {
			http.Error(w, "want {\"order\":…,\"amount\":…}", http.StatusBadRequest)
			return
		}
		switch {
		case declineAll:
			p.Reason = "card declined"
		case p.Amount > limit:
			p.Reason = fmt.Sprintf("amount %d above the limit %d", p.Amount, limit)
		case p.Amount <= 0:
			p.Reason = "nothing to charge"
		default:
			p.Approved = true
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p)
	})
}

// pay asks the payment service to charge amount for the order.
func pay(ctx context.Context, url, order string, amount int) (approved bool, reason string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, _ := json.Marshal(payment{Order: order, Amount: amount})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/payments", strings.NewReader(string(body)))
	if err != nil {
		return false, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, "", fmt.Errorf("status %s", resp.Status)
	}
	var p payment
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return false, "", err
	}
	return p.Approved, p.Reason, nil
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(code)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
