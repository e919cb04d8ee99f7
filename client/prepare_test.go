package client

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Prepare now, decide later: Prepare sends decision external and returns the waiting
// transaction; Commit and Rollback send the caller's decision, with Submit's retries and
// polling.

const (
	txnWaiting           = `{"id":"x","gid":"kpgtx_x","state":"prepared","waiting":true,"decision":"external","decide_by":"2026-01-01T00:00:30Z","prepared_state":"9007199254740993:3","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","kafka":{"transactional_id":"kpgtx-a-1","producer_id":9007199254740993,"producer_epoch":3,"prepared_state":"9007199254740993:3","records":[{"topic":"orders","partition":0,"offset":7}]}}`
	txnCommittedExternal = `{"id":"x","gid":"kpgtx_x","state":"committed","decision":"external","decide_by":"2026-01-01T00:00:30Z","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:01Z"}`
	txnRolledBack        = `{"id":"x","gid":"kpgtx_x","state":"aborted","decision":"external","decide_by":"2026-01-01T00:00:30Z","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:01Z","error":{"participant":"coordinator","class":"abortable","message":"rolled back by its caller"}}`
	txnStateMismatch     = `{"id":"x","gid":"kpgtx_x","state":"aborted","decision":"external","decide_by":"2026-01-01T00:00:30Z","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:01Z","error":{"participant":"coordinator","class":"abortable","message":"prepared_state 1:1 did not match 9007199254740993:3: aborted"}}`
	txnDecidedCommit     = `{"id":"x","gid":"kpgtx_x","state":"committed","decision":"external","decide_by":"2026-01-01T00:00:30Z","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:01Z","error":{"participant":"coordinator","class":"decided","message":"its commit was taken before: it cannot be rolled back"}}`
	txnCommittingExt     = `{"id":"x","gid":"kpgtx_x","state":"committing","decision":"external","decide_by":"2026-01-01T00:00:30Z","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:01Z"}`
	errNotWaiting        = `{"error":{"class":"not_allowed","message":"the transaction does not wait for its caller's decision"}}`
	errUnavailable       = `{"error":{"class":"unavailable","message":"too many transactions wait for their caller's decision"}}`
)

func TestPrepare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("prepare then commit", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, scripted{200, "", txnWaiting}, scripted{200, "", txnCommittedExternal})
		c := newClient(t, url)
		req := order
		req.ID = "x"
		p, err := c.Prepare(ctx, req, 30*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "x", p.ID)
		assert.Equal(t, "9007199254740993:3", p.PreparedState)
		assert.Equal(t, time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC), p.DecideBy.UTC())
		assert.True(t, p.Transaction.Waiting)
		assert.Equal(t, StatePrepared, p.Transaction.State)
		assert.Equal(t, DecisionExternal, p.Transaction.Decision)

		txn, err := p.Commit(ctx)
		require.NoError(t, err)
		assert.Equal(t, StateCommitted, txn.State)

		got := s.requests()
		require.Len(t, got, 2)
		assert.Equal(t, "POST", got[0].method)
		assert.Equal(t, "/v1/transactions", got[0].path)
		var body map[string]any
		require.NoError(t, json.Unmarshal([]byte(got[0].body), &body))
		assert.Equal(t, "external", body["decision"])
		assert.EqualValues(t, 30000, body["decide_within_ms"])
		assert.Equal(t, "x", body["id"])
		assert.Equal(t, "POST", got[1].method)
		assert.Equal(t, "/v1/transactions/x/commit", got[1].path)
		assert.JSONEq(t, `{"prepared_state":"9007199254740993:3"}`, got[1].body)
	})

	t.Run("prepare then rollback", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, scripted{200, "", txnWaiting}, scripted{200, "", txnRolledBack})
		c := newClient(t, url)
		p, err := c.Prepare(ctx, order, 0)
		require.NoError(t, err)
		txn, err := p.Rollback(ctx)
		require.NoError(t, err)
		assert.Equal(t, StateAborted, txn.State)

		got := s.requests()
		require.Len(t, got, 2)
		var body map[string]any
		require.NoError(t, json.Unmarshal([]byte(got[0].body), &body))
		assert.Equal(t, "external", body["decision"])
		assert.NotContains(t, body, "decide_within_ms", "0: the server's bound")
		assert.Regexp(t, `^[0-9a-f]{32}$`, body["id"], "an id is generated")
		// The id of the transaction the server answered.
		assert.Equal(t, "/v1/transactions/x/rollback", got[1].path)
		assert.Empty(t, got[1].body, "no body")
	})

	t.Run("within is rounded up to milliseconds", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, scripted{200, "", txnWaiting})
		c := newClient(t, url)
		_, err := c.Prepare(ctx, order, 1500*time.Microsecond)
		require.NoError(t, err)
		var body map[string]any
		require.NoError(t, json.Unmarshal([]byte(s.requests()[0].body), &body))
		assert.EqualValues(t, 2, body["decide_within_ms"])
		_, err = c.Prepare(ctx, order, -time.Second)
		require.Error(t, err)
	})

	t.Run("phase 1 aborted", func(t *testing.T) {
		t.Parallel()
		_, url := serve(t, scripted{409, "", txnAborted})
		c := newClient(t, url)
		p, err := c.Prepare(ctx, order, time.Second)
		require.ErrorIs(t, err, ErrAborted)
		assert.NotErrorIs(t, err, ErrDecided)
		assert.Nil(t, p)
	})

	t.Run("503 too many waiting, then prepared, same body", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, scripted{503, "0", errUnavailable}, scripted{429, "0", errBusy}, scripted{200, "", txnWaiting})
		c := newClient(t, url)
		p, err := c.Prepare(ctx, order, time.Minute)
		require.NoError(t, err)
		assert.True(t, p.Transaction.Waiting)
		got := s.requests()
		require.Len(t, got, 3)
		for _, r := range got {
			assert.Equal(t, got[0].body, r.body, "the same id and body")
		}
	})

	t.Run("503 until the attempts are spent", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, scripted{503, "0", errUnavailable})
		c := newClient(t, url, WithRetries(2))
		_, err := c.Prepare(ctx, order, time.Minute)
		require.ErrorIs(t, err, ErrUnavailable)
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, "unavailable", e.Class)
		assert.Len(t, s.requests(), 2)
	})

	t.Run("202 then polled until it waits", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, scripted{202, "", txnActive}, scripted{200, "", txnActive}, scripted{200, "", txnWaiting})
		c := newClient(t, url)
		p, err := c.Prepare(ctx, order, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, "9007199254740993:3", p.PreparedState)
		got := s.requests()
		require.Len(t, got, 3)
		assert.Equal(t, []string{"POST", "GET", "GET"}, []string{got[0].method, got[1].method, got[2].method})
	})

	t.Run("202 then aborted while polled", func(t *testing.T) {
		t.Parallel()
		_, url := serve(t, scripted{202, "", txnActive}, scripted{200, "", txnAborted})
		c := newClient(t, url)
		_, err := c.Prepare(ctx, order, time.Minute)
		require.ErrorIs(t, err, ErrAborted)
	})
}

func TestCommitRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name     string
		rollback bool
		answers  []scripted
		opts     []Option
		state    State   // the transaction returned; "" when an error is
		want     []error // errors.Is of the error
		not      []error // !errors.Is of the error
		requests []string
	}{
		{name: "commit", answers: []scripted{{200, "", txnCommittedExternal}}, state: StateCommitted,
			requests: []string{"POST /v1/transactions/x/commit"}},
		{name: "commit with a prepared_state that did not match: aborted", answers: []scripted{{409, "", txnStateMismatch}},
			want: []error{ErrAborted}, not: []error{ErrDecided, ErrNotAllowed}, requests: []string{"POST /v1/transactions/x/commit"}},
		{name: "commit after a rollback: aborted", answers: []scripted{{409, "", txnRolledBack}},
			want: []error{ErrAborted}, not: []error{ErrDecided}, requests: []string{"POST /v1/transactions/x/commit"}},
		{name: "commit of a transaction the coordinator decides", answers: []scripted{{409, "", errNotWaiting}},
			want: []error{ErrNotAllowed}, not: []error{ErrAborted, ErrDecided}, requests: []string{"POST /v1/transactions/x/commit"}},
		{name: "commit of an unknown id", answers: []scripted{{404, "", `{"error":{"class":"not_found","message":"no transaction x"}}`}},
			want: []error{ErrNotFound}, requests: []string{"POST /v1/transactions/x/commit"}},
		{name: "commit 503 then committed", answers: []scripted{{503, "0", errUnavailable}, {200, "", txnCommittedExternal}},
			state: StateCommitted, requests: []string{"POST /v1/transactions/x/commit", "POST /v1/transactions/x/commit"}},
		{name: "commit 503 until the attempts are spent", answers: []scripted{{503, "0", errUnavailable}}, opts: []Option{WithRetries(3)},
			want: []error{ErrUnavailable}, requests: []string{"POST /v1/transactions/x/commit", "POST /v1/transactions/x/commit", "POST /v1/transactions/x/commit"}},
		{name: "commit 202 then polled to committed", answers: []scripted{{202, "", txnCommittingExt}, {200, "", txnWaiting}, {200, "", txnCommittedExternal}},
			state: StateCommitted, requests: []string{"POST /v1/transactions/x/commit", "GET /v1/transactions/x", "GET /v1/transactions/x"}},
		{name: "commit 202 then polled to aborted", answers: []scripted{{202, "", txnWaiting}, {200, "", txnRolledBack}},
			want: []error{ErrAborted}, requests: []string{"POST /v1/transactions/x/commit", "GET /v1/transactions/x"}},
		{name: "rollback", rollback: true, answers: []scripted{{200, "", txnRolledBack}}, state: StateAborted,
			requests: []string{"POST /v1/transactions/x/rollback"}},
		{name: "rollback after the commit: decided", rollback: true, answers: []scripted{{409, "", txnDecidedCommit}},
			want: []error{ErrDecided}, not: []error{ErrAborted, ErrNotAllowed}, requests: []string{"POST /v1/transactions/x/rollback"}},
		{name: "rollback while the commit finishes: decided", rollback: true,
			answers: []scripted{{409, "", `{"id":"x","gid":"kpgtx_x","state":"prepared","decision":"external","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:01Z","error":{"participant":"coordinator","class":"decided","message":"its commit was taken"}}`}},
			want:    []error{ErrDecided}, not: []error{ErrAborted}, requests: []string{"POST /v1/transactions/x/rollback"}},
		{name: "rollback 429 then aborted", rollback: true, answers: []scripted{{429, "0", errBusy}, {200, "", txnRolledBack}},
			state: StateAborted, requests: []string{"POST /v1/transactions/x/rollback", "POST /v1/transactions/x/rollback"}},
		{name: "rollback 202 then polled to aborted", rollback: true, answers: []scripted{{202, "", txnWaiting}, {200, "", txnWaiting}, {200, "", txnRolledBack}},
			state: StateAborted, requests: []string{"POST /v1/transactions/x/rollback", "GET /v1/transactions/x", "GET /v1/transactions/x"}},
		{name: "rollback 202 then polled to committed: decided", rollback: true, answers: []scripted{{202, "", txnWaiting}, {200, "", txnCommittedExternal}},
			want: []error{ErrDecided}, not: []error{ErrAborted}, requests: []string{"POST /v1/transactions/x/rollback", "GET /v1/transactions/x"}},
		{name: "rollback 202 heuristic is not polled", rollback: true, answers: []scripted{{202, "", txnHeuristic}},
			want: []error{ErrInDoubt, ErrHeuristic}, requests: []string{"POST /v1/transactions/x/rollback"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, url := serve(t, tc.answers...)
			c := newClient(t, url, tc.opts...)
			var txn *Transaction
			var err error
			if tc.rollback {
				txn, err = c.Rollback(ctx, "x")
			} else {
				txn, err = c.Commit(ctx, "x", "9007199254740993:3")
			}
			if tc.state != "" {
				require.NoError(t, err)
				assert.Equal(t, tc.state, txn.State)
			} else {
				require.Error(t, err)
				var e *Error
				require.ErrorAs(t, err, &e)
				t.Logf("error: %v", err)
			}
			for _, w := range tc.want {
				assert.ErrorIs(t, err, w)
			}
			for _, w := range tc.not {
				assert.NotErrorIs(t, err, w)
			}
			var sent []string
			for _, r := range s.requests() {
				sent = append(sent, r.method+" "+r.path)
				if r.method == http.MethodPost && !tc.rollback {
					assert.JSONEq(t, `{"prepared_state":"9007199254740993:3"}`, r.body, "every send carries the prepared_state")
				}
			}
			assert.Equal(t, tc.requests, sent)
		})
	}

	t.Run("no id", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, "http://127.0.0.1:1")
		_, err := c.Commit(ctx, "", "1:1")
		require.Error(t, err)
		_, err = c.Rollback(ctx, "")
		require.Error(t, err)
	})

	t.Run("id is escaped", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, scripted{200, "", txnRolledBack})
		c := newClient(t, url)
		_, err := c.Rollback(ctx, "order 7/a")
		require.NoError(t, err)
		assert.Equal(t, "/v1/transactions/order%207%2Fa/rollback", s.requests()[0].path)
	})
}

// A decision is sent again after a failed connection: it is idempotent.
func TestCommitAgainAfterTransportError(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			require.NoError(t, err)
			_ = conn.(*net.TCPConn).SetLinger(0)
			_ = conn.Close()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(txnCommittedExternal))
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	txn, err := c.Commit(context.Background(), "x", "9007199254740993:3")
	require.NoError(t, err)
	assert.Equal(t, StateCommitted, txn.State)
	assert.EqualValues(t, 2, n.Load())
}
