package test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/api"
	"github.com/kpgtx/coordinator/client"
	"github.com/kpgtx/coordinator/service"
)

// Tests of the Go client (package client) against a real coordinator.

func (e *env) order(id string, extra ...client.Statement) client.TransactionRequest {
	return client.TransactionRequest{
		ID:    id,
		SQL:   append([]client.Statement{{Statement: "INSERT INTO orders (id, total) VALUES ($1, 1)", Args: []any{id}}}, extra...),
		Kafka: []client.Record{{Topic: e.topic, Key: client.Text(id), Value: client.Text("v")}},
	}
}

// TestClient submits, reads, lists and operates through the client, and checks the typed
// errors against the server's real answers.
func TestClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	c, err := client.New(e.srv.URL)
	require.NoError(t, err)

	// Committed, with a generated id; the same id again returns the stored outcome.
	req := e.order("")
	req.SQL[0].Args = []any{"gen"}
	txn, err := c.Submit(ctx, req)
	require.NoError(t, err)
	assert.Regexp(t, `^[0-9a-f]{32}$`, txn.ID)
	assert.Equal(t, client.StateCommitted, txn.State)
	require.NotNil(t, txn.Kafka)
	require.Len(t, txn.Kafka.Records, 1)
	assert.Equal(t, int64(1), txn.SQL[0].RowsAffected)
	req.ID = txn.ID
	again, err := c.Submit(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, txn.Kafka.Records, again.Kafka.Records, "the stored outcome, not a second run")
	assert.Equal(t, 1, countRows(t, e.db, "gen"))

	got, err := c.Get(ctx, txn.ID)
	require.NoError(t, err)
	assert.Equal(t, client.StateCommitted, got.State)
	assert.NotEmpty(t, got.Events)
	assert.Equal(t, client.StateActive, got.Events[0].State)

	for _, id := range []string{"c1", "c2", "c3"} {
		_, err := c.Submit(ctx, e.order(id))
		require.NoError(t, err)
	}

	cases := []struct {
		name  string
		run   func() error
		is    error
		check func(t *testing.T, e *client.Error)
	}{
		{"aborted by a failing statement", func() error {
			_, err := c.Submit(ctx, e.order("f1", client.Statement{Statement: "SELECT 1/0"}))
			return err
		}, client.ErrAborted, func(t *testing.T, ce *client.Error) {
			assert.Equal(t, http.StatusConflict, ce.Status)
			assert.Equal(t, "22012", ce.SQLState)
			assert.Equal(t, "abortable", ce.Class)
			assert.Contains(t, ce.Participant, "sql")
			require.NotNil(t, ce.Transaction)
			assert.Equal(t, client.StateAborted, ce.Transaction.State)
			assert.Equal(t, 0, countRows(t, e.db, "f1"))
		}},
		{"invalid: transaction control", func() error {
			_, err := c.Submit(ctx, client.TransactionRequest{SQL: []client.Statement{{Statement: "COMMIT"}}})
			return err
		}, client.ErrInvalid, func(t *testing.T, ce *client.Error) {
			assert.Equal(t, http.StatusBadRequest, ce.Status)
			assert.Equal(t, "sql[0].statement", ce.Field)
			assert.Nil(t, ce.Transaction)
		}},
		{"the id with another body", func() error {
			_, err := c.Submit(ctx, client.TransactionRequest{ID: "c1", SQL: []client.Statement{{Statement: "SELECT 1"}}})
			return err
		}, client.ErrConflict, func(t *testing.T, ce *client.Error) { assert.Equal(t, "id_conflict", ce.Class) }},
		{"unknown id", func() error { _, err := c.Get(ctx, "nope"); return err }, client.ErrNotFound, nil},
		{"abort of a committed transaction", func() error { _, err := c.Abort(ctx, "c1", "test"); return err },
			client.ErrNotAllowed, func(t *testing.T, ce *client.Error) { assert.Equal(t, "not_allowed", ce.Class) }},
		{"resolve of a committed transaction", func() error {
			_, err := c.Resolve(ctx, "c1", client.StateAborted, "test")
			return err
		}, client.ErrNotAllowed, nil},
		{"resolve without a reason", func() error {
			_, err := c.Resolve(ctx, "c1", client.StateAborted, "")
			return err
		}, client.ErrInvalid, func(t *testing.T, ce *client.Error) { assert.Equal(t, "reason", ce.Field) }},
		{"an unknown state", func() error { _, err := c.List(ctx, client.ListOptions{State: "limbo"}); return err },
			client.ErrInvalid, func(t *testing.T, ce *client.Error) { assert.Equal(t, "state", ce.Field) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			require.ErrorIs(t, err, tc.is)
			var ce *client.Error
			require.ErrorAs(t, err, &ce)
			t.Logf("%v", err)
			if tc.check != nil {
				tc.check(t, ce)
			}
		})
	}

	// A final transaction is returned as it is by retry; the pass runs.
	r, err := c.Retry(ctx, "c2", "nothing to do")
	require.NoError(t, err)
	assert.Equal(t, client.StateCommitted, r.State)
	_, err = c.RunRecovery(ctx)
	require.NoError(t, err)

	// Paging: one transaction a page, every committed one once.
	var ids []string
	for txn, err := range c.All(ctx, client.ListOptions{State: client.StateCommitted, Limit: 1}) {
		require.NoError(t, err)
		ids = append(ids, txn.ID)
	}
	assert.ElementsMatch(t, []string{txn.ID, "c1", "c2", "c3"}, ids)
	page, err := c.List(ctx, client.ListOptions{State: client.StateAborted})
	require.NoError(t, err)
	require.Len(t, page.Transactions, 1)
	assert.Equal(t, "f1", page.Transactions[0].ID)
	assert.Empty(t, page.Next)

	inDoubt, err := c.ListInDoubt(ctx, client.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, inDoubt.Entries)

	ready, err := c.Ready(ctx)
	require.NoError(t, err)
	assert.Equal(t, "ready", ready.Status)
	require.NoError(t, c.Health(ctx))
	spec, err := c.OpenAPI(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(spec), "openapi: 3.1.0")
	metrics, err := c.Metrics(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(metrics), "kpgtx_")
}

// TestClientTokens: the token is sent, and the server's refusals are typed.
func TestClientTokens(t *testing.T) {
	t.Parallel()
	reader, submitter := newSecret("r"), newSecret("s")
	toks, err := api.ParseTokens("dash:read:" + reader + ";ci:submit:" + submitter)
	require.NoError(t, err)
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.Tokens = toks }})
	ctx := context.Background()
	with := func(token string) *client.Client {
		c, err := client.New(e.srv.URL, client.WithToken(token))
		require.NoError(t, err)
		return c
	}
	_, err = with(submitter).Submit(ctx, e.order("t1"))
	require.NoError(t, err)
	_, err = with(reader).Get(ctx, "t1")
	require.NoError(t, err)
	_, err = with(reader).Submit(ctx, e.order("t2"))
	assert.ErrorIs(t, err, client.ErrForbidden)
	_, err = with("").Get(ctx, "t1")
	assert.ErrorIs(t, err, client.ErrUnauthorized)
	_, err = with(submitter).Abort(ctx, "t1", "")
	assert.ErrorIs(t, err, client.ErrForbidden)
}

// TestClientWaitsInDoubt: a request whose transaction a crash left prepared is answered 202;
// Submit polls until an operator's retry commits it.
func TestClientWaitsInDoubt(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{})
	e.killedAt(t, "after_log_prepared", "w1")
	e.postponeRecovery(t)
	n := e.startNode(t, "a", noRecoveryLoop...)

	polled := make(chan struct{})
	var gets atomic.Int32
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodGet && gets.Add(1) == 1 {
			close(polled)
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
	c, err := client.New(n.base, client.WithHTTPClient(hc), client.WithPollInterval(50*time.Millisecond))
	require.NoError(t, err)
	operator, err := client.New(n.base)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		select {
		case <-polled:
		case <-ctx.Done():
			return
		}
		if _, err := operator.Retry(ctx, "w1", "the client waits"); err != nil {
			t.Errorf("retry: %v", err)
		}
	}()
	// The same body as the crashed request (crash_test.go's orderBody).
	txn, err := c.Submit(ctx, e.order("w1"))
	require.NoError(t, err)
	assert.Equal(t, client.StateCommitted, txn.State)
	assert.Positive(t, gets.Load(), "Submit polled the in-doubt transaction")
	e.verify(t, n.base, map[string]sent{"w1": {kind: "order"}})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestClientTypedRecords sends bytes, JSON, ordered headers, a timestamp and the outbox pattern
// (a record built from the insert's RETURNING) through the client's helpers, and reads them back.
func TestClientTypedRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	c, err := client.New(e.srv.URL)
	require.NoError(t, err)
	at := time.UnixMilli(1767323045123).UTC()
	txn, err := c.Submit(ctx, client.TransactionRequest{ID: "typed-1",
		SQL: []client.Statement{{Statement: "INSERT INTO orders (id, total, note) VALUES ($1, 12.5, 'n') RETURNING id, total", Args: []any{"typed-1"}}},
		Kafka: []client.Record{
			{Topic: e.topic, Key: client.Binary([]byte{0, 0, 0, 0, 1}), Value: client.JSON(map[string]any{"n": 1}),
				Headers:   []client.Header{client.TextHeader("h", "a"), client.BinaryHeader("h", []byte{0xff}), {Name: "null"}},
				Timestamp: &at},
			{Topic: e.topic, Key: client.FromResult(0, 0, "id"), Value: client.FromResult(0, 0, ""),
				Headers: []client.Header{client.HeaderFrom("total", 0, 0, "total")}},
		}})
	require.NoError(t, err)
	require.Len(t, txn.Kafka.Records, 2)
	assert.Equal(t, at, txn.Kafka.Records[0].Timestamp)
	got := e.committedRecords(e.topic)
	find := func(off client.RecordOffset) *kgo.Record {
		r, ok := got[fmt.Sprintf("%d/%d", off.Partition, off.Offset)]
		require.True(t, ok, "record at %+v", off)
		return r
	}
	first := find(txn.Kafka.Records[0])
	assert.Equal(t, []byte{0, 0, 0, 0, 1}, first.Key)
	assert.Equal(t, `{"n":1}`, string(first.Value))
	require.Len(t, first.Headers, 3)
	assert.Equal(t, []byte{0xff}, first.Headers[1].Value)
	assert.Nil(t, first.Headers[2].Value)
	assert.Equal(t, at, first.Timestamp.UTC())
	second := find(txn.Kafka.Records[1])
	assert.Equal(t, "typed-1", string(second.Key))
	assert.JSONEq(t, `{"id":"typed-1","total":12.5}`, string(second.Value))
	assert.Equal(t, "12.5", string(second.Headers[0].Value))

	// A reference to a row that is not there: aborted, a typed error.
	_, err = c.Submit(ctx, client.TransactionRequest{ID: "typed-2",
		SQL:   []client.Statement{{Statement: "UPDATE orders SET note = 'x' WHERE id = 'none' RETURNING id"}},
		Kafka: []client.Record{{Topic: e.topic, Value: client.FromResult(0, 0, "")}}})
	require.ErrorIs(t, err, client.ErrAborted)
}
