package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The sending policy (retries, Retry-After, polling on 202, errors) against scripted answers;
// test/client_test.go runs the client against a real coordinator.

type scripted struct {
	status     int
	retryAfter string
	body       string
}

// script serves the answers in order (the last one again when they run out) and records
// what it was sent.
type script struct {
	mu      sync.Mutex
	answers []scripted
	got     []seen
}

type seen struct {
	method, path, auth, body string
	at                       time.Time
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.got = append(s.got, seen{r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), string(body), time.Now()})
	a := s.answers[0]
	if len(s.answers) > 1 {
		s.answers = s.answers[1:]
	}
	s.mu.Unlock()
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

func (s *script) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.got...)
}

func serve(t *testing.T, answers ...scripted) (*script, string) {
	t.Helper()
	s := &script{answers: answers}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

const (
	txnCommitted = `{"id":"x","gid":"kpgtx_x","state":"committed","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","kafka":{"transactional_id":"kpgtx-a-1","producer_id":9007199254740993,"producer_epoch":3,"records":[{"topic":"orders","partition":0,"offset":7}]}}`
	txnPrepared  = `{"id":"x","gid":"kpgtx_x","state":"prepared","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`
	txnAborted   = `{"id":"x","gid":"kpgtx_x","state":"aborted","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","error":{"participant":"sql","class":"abortable","message":"duplicate key","sqlstate":"23505"}}`
	txnRetriable = `{"id":"x","gid":"kpgtx_x","state":"aborted","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","error":{"participant":"kafka","class":"retriable","message":"broker down"}}`
	txnHeuristic = `{"id":"x","gid":"kpgtx_x","state":"heuristic","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`
	errInvalid   = `{"error":{"class":"invalid_request","field":"sql[0].statement","message":"COMMIT ends the transaction"}}`
	errBusy      = `{"error":{"class":"overloaded","message":"server busy"}}`
)

func newClient(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	c, err := New(url, append([]Option{WithBackoff(time.Millisecond, 20*time.Millisecond), WithPollInterval(time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	return c
}

var order = TransactionRequest{SQL: []Statement{{Statement: "INSERT INTO orders(id) VALUES ($1)", Args: []any{"o-1"}}},
	Kafka: []Record{{Topic: "orders", Key: Text("o-1"), Value: JSON(map[string]int{"total": 10})}}}

func TestSubmit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		answers  []scripted
		opts     []Option
		want     []error // errors.Is of the result; nil: committed
		requests int     // how many were sent
		methods  []string
	}{
		{name: "committed at once", answers: []scripted{{200, "", txnCommitted}}, requests: 1},
		{name: "503 then committed", answers: []scripted{{503, "0", txnRetriable}, {200, "", txnCommitted}}, requests: 2},
		{name: "429 then committed", answers: []scripted{{429, "0", errBusy}, {200, "", txnCommitted}}, requests: 2},
		{name: "503 until the attempts are spent", answers: []scripted{{503, "0", txnRetriable}}, opts: []Option{WithRetries(3)},
			want: []error{ErrUnavailable}, requests: 3},
		{name: "aborted is not retried", answers: []scripted{{409, "", txnAborted}}, want: []error{ErrAborted}, requests: 1},
		{name: "invalid is not retried", answers: []scripted{{400, "", errInvalid}}, want: []error{ErrInvalid}, requests: 1},
		{name: "id conflict", answers: []scripted{{422, "", `{"error":{"class":"id_conflict","message":"used"}}`}}, want: []error{ErrConflict}, requests: 1},
		{name: "202 then polled to committed", answers: []scripted{{202, "", txnPrepared}, {200, "", txnPrepared}, {200, "", txnCommitted}},
			requests: 3, methods: []string{"POST", "GET", "GET"}},
		{name: "202 then polled to aborted", answers: []scripted{{202, "", txnPrepared}, {200, "", txnAborted}},
			want: []error{ErrAborted}, requests: 2},
		{name: "202 heuristic is not polled", answers: []scripted{{202, "", txnHeuristic}}, want: []error{ErrInDoubt, ErrHeuristic}, requests: 1},
		{name: "polling goes on after a busy answer", answers: []scripted{{202, "", txnPrepared}, {429, "0", errBusy}, {200, "", txnCommitted}}, requests: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, url := serve(t, tc.answers...)
			c := newClient(t, url, tc.opts...)
			txn, err := c.Submit(context.Background(), order)
			got := s.requests()
			require.Len(t, got, tc.requests)
			if tc.want == nil {
				require.NoError(t, err)
				assert.Equal(t, StateCommitted, txn.State)
				assert.Equal(t, int64(9007199254740993), txn.Kafka.ProducerID)
				assert.JSONEq(t, txnCommitted, string(txn.Raw))
			} else {
				require.Error(t, err)
				for _, w := range tc.want {
					assert.ErrorIs(t, err, w)
				}
				var e *Error
				require.ErrorAs(t, err, &e)
				t.Logf("error: %v", err)
			}
			// Every POST carries the same body, with the same generated id.
			var first string
			for i, r := range got {
				if tc.methods != nil {
					assert.Equal(t, tc.methods[i], r.method)
				}
				if r.method != http.MethodPost {
					assert.Regexp(t, `^/v1/transactions/[0-9a-f]{32}$`, r.path)
					continue
				}
				var body TransactionRequest
				require.NoError(t, json.Unmarshal([]byte(r.body), &body))
				assert.Regexp(t, `^[0-9a-f]{32}$`, body.ID)
				if first == "" {
					first = r.body
				}
				assert.Equal(t, first, r.body, "a retry sends the same body and id")
			}
		})
	}
}

func TestErrorFields(t *testing.T) {
	t.Parallel()
	t.Run("an aborted outcome", func(t *testing.T) {
		t.Parallel()
		_, url := serve(t, scripted{409, "", txnAborted})
		_, err := newClient(t, url).Submit(context.Background(), TransactionRequest{ID: "x", SQL: order.SQL})
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, 409, e.Status)
		assert.Equal(t, "abortable", e.Class)
		assert.Equal(t, "sql", e.Participant)
		assert.Equal(t, "23505", e.SQLState)
		require.NotNil(t, e.Transaction)
		assert.Equal(t, StateAborted, e.Transaction.State)
		assert.NotErrorIs(t, err, ErrNotAllowed)
		assert.Equal(t, "409 abortable: transaction x aborted: sql: duplicate key [SQLSTATE 23505]", e.Error())
	})
	t.Run("a refused field", func(t *testing.T) {
		t.Parallel()
		_, url := serve(t, scripted{400, "", errInvalid})
		_, err := newClient(t, url).Submit(context.Background(), order)
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, "sql[0].statement", e.Field)
		assert.Equal(t, "invalid_request", e.Class)
		assert.Nil(t, e.Transaction)
		assert.Equal(t, "400 invalid_request: sql[0].statement: COMMIT ends the transaction", e.Error())
	})
	t.Run("an operator action refused", func(t *testing.T) {
		t.Parallel()
		_, url := serve(t, scripted{409, "", `{"error":{"class":"not_allowed","message":"prepared: Kafka decides"}}`})
		_, err := newClient(t, url).Abort(context.Background(), "x", "stuck")
		assert.ErrorIs(t, err, ErrNotAllowed)
		assert.NotErrorIs(t, err, ErrAborted)
		assert.EqualError(t, err, "409 not_allowed: prepared: Kafka decides")
	})
	t.Run("a body that is not JSON", func(t *testing.T) {
		t.Parallel()
		_, url := serve(t, scripted{502, "", "bad gateway"})
		_, err := newClient(t, url).Get(context.Background(), "x")
		assert.EqualError(t, err, "502 Bad Gateway: bad gateway")
	})
}

// TestRetryAfter: the pause before sending again is the server's Retry-After.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	s, url := serve(t, scripted{503, "1", txnRetriable}, scripted{200, "", txnCommitted})
	c := newClient(t, url, WithBackoff(time.Millisecond, time.Minute))
	_, err := c.Submit(context.Background(), order)
	require.NoError(t, err)
	require.Len(t, s.requests(), 2, "sent again after the 503")
}

// TestBackoffHonoursRetryAfter: the wait before sending again is the server's Retry-After
// (bounded by the largest backoff), otherwise an exponential backoff with jitter.
func TestBackoffHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	c := &Client{minBackoff: 10 * time.Millisecond, maxBackoff: 5 * time.Second}
	assert.Equal(t, time.Second, c.backoff(1, time.Second), "Retry-After: 1")
	assert.Equal(t, 5*time.Second, c.backoff(1, time.Hour), "bounded by the largest backoff")
	for attempt := 1; attempt <= 12; attempt++ {
		d := c.backoff(attempt, 0)
		full := min(10*time.Millisecond<<(attempt-1), 5*time.Second)
		assert.GreaterOrEqual(t, d, full/2, "attempt %d", attempt)
		assert.LessOrEqual(t, d, full, "attempt %d", attempt)
	}
	assert.Equal(t, 3*time.Second, retryAfter("3"))
	assert.Zero(t, retryAfter("soon"))
}

// TestContext: a context that ends stops the retries and the polling.
func TestContext(t *testing.T) {
	t.Parallel()
	t.Run("while waiting to retry", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, scripted{503, "3600", txnRetriable})
		// A window past the Retry-After: the resend it waits for is still allowed.
		c := newClient(t, url, WithBackoff(time.Millisecond, 2*time.Hour), WithRetryWindow(2*time.Hour))
		ctx, cancel := context.WithCancel(context.Background())
		var waited time.Duration
		c.pause = func(ctx context.Context, d time.Duration) error {
			waited = d
			cancel() // the context ends while the client waits for the Retry-After
			return sleep(ctx, d)
		}
		_, err := c.Submit(ctx, order)
		assert.Equal(t, time.Hour, waited, "the server's Retry-After, not the client's backoff")
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, ErrUnavailable)
		assert.Len(t, s.requests(), 1)
	})
	t.Run("while polling", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, scripted{202, "", txnPrepared}, scripted{200, "", txnPrepared})
		c := newClient(t, url)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for len(s.requests()) < 3 {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		_, err := c.Submit(ctx, order)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, ErrInDoubt)
		var e *Error
		require.ErrorAs(t, err, &e)
		require.NotNil(t, e.Transaction)
		assert.Equal(t, StatePrepared, e.Transaction.State)
	})
}

// TestRequests checks what is sent: the token, the paths and queries, the bodies.
func TestRequests(t *testing.T) {
	t.Parallel()
	s, url := serve(t, scripted{200, "", `{"transactions":[],"next":""}`})
	c := newClient(t, url+"/", WithToken("s3cret-token-0123"))
	ctx := context.Background()
	_, _ = c.List(ctx, ListOptions{State: StatePrepared, Limit: 5, OlderThan: 30 * time.Second, After: "abc"})
	_, _ = c.ListInDoubt(ctx, ListOptions{})
	_, _ = c.Get(ctx, "a/b?c")
	_, _ = c.Retry(ctx, "x", "")
	_, _ = c.Abort(ctx, "x", "why not")
	_, _ = c.Resolve(ctx, "x", StateAborted, "checked by hand")
	_, _ = c.RunRecovery(ctx)
	want := []seen{
		{method: "GET", path: "/v1/transactions?after=abc&limit=5&older_than=30s&state=prepared"},
		{method: "GET", path: "/v1/transactions?state=in-doubt"},
		{method: "GET", path: "/v1/transactions/a%2Fb%3Fc"},
		{method: "POST", path: "/v1/transactions/x/retry"},
		{method: "POST", path: "/v1/transactions/x/abort", body: `{"reason":"why not"}`},
		{method: "POST", path: "/v1/transactions/x/resolve", body: `{"outcome":"aborted","reason":"checked by hand"}`},
		{method: "POST", path: "/v1/recovery/run"},
	}
	got := s.requests()
	require.Len(t, got, len(want))
	for i := range want {
		assert.Equal(t, want[i].method, got[i].method)
		assert.Equal(t, want[i].path, got[i].path)
		assert.Equal(t, want[i].body, got[i].body)
		assert.Equal(t, "Bearer s3cret-token-0123", got[i].auth)
	}
	_, err := c.List(ctx, ListOptions{State: InDoubt})
	assert.ErrorContains(t, err, "ListInDoubt")
}

// TestAll pages through with the Next cursor.
func TestAll(t *testing.T) {
	t.Parallel()
	s, url := serve(t,
		scripted{200, "", `{"transactions":[` + txnCommitted + `,` + txnAborted + `],"next":"p2"}`},
		scripted{200, "", `{"transactions":[` + txnPrepared + `]}`})
	c := newClient(t, url)
	var states []State
	for txn, err := range c.All(context.Background(), ListOptions{Limit: 2}) {
		require.NoError(t, err)
		states = append(states, txn.State)
	}
	assert.Equal(t, []State{StateCommitted, StateAborted, StatePrepared}, states)
	got := s.requests()
	require.Len(t, got, 2)
	assert.Equal(t, "/v1/transactions?after=p2&limit=2", got[1].path)
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "localhost:8080", "ftp://x", "http://"} {
		_, err := New(bad)
		assert.Error(t, err, bad)
	}
	_, err := New("http://x", WithRetries(0))
	assert.Error(t, err)
	_, err = New("https://x", WithCAFile("/nonexistent/ca.pem"))
	assert.ErrorContains(t, err, "CA file")
	_, err = New("http://x", WithHTTPClient(nil))
	assert.Error(t, err)
	assert.False(t, errors.Is(&Error{Status: 500}, ErrInDoubt))
}
