package client

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// txnActive is a 202 of a request whose row's insert was sent and its answer lost.
const txnActive = `{"id":"x","gid":"kpgtx_x","state":"active","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`

// An id is sent again only within the retry window after its first send: past it the server
// may have forgotten the id and would run it as a new transaction. Submit and the pipeline
// helper stop with ErrRetryWindow (and the last answer) instead.
func TestRetryWindow(t *testing.T) {
	t.Parallel()
	const window = 80 * time.Millisecond

	t.Run("default", func(t *testing.T) {
		t.Parallel()
		c, err := New("http://127.0.0.1:1")
		require.NoError(t, err)
		assert.Equal(t, time.Hour, DefaultRetryWindow)
		assert.Equal(t, DefaultRetryWindow, c.retryWindow)
		_, err = New("http://127.0.0.1:1", WithRetryWindow(0))
		require.Error(t, err)
	})

	t.Run("submit", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, scripted{503, "0", txnRetriable})
		c := newClient(t, url, WithRetries(1_000_000), WithRetryWindow(window))
		clock := fakeClock(c)
		_, err := c.Submit(context.Background(), order)
		require.ErrorIs(t, err, ErrRetryWindow)
		assert.ErrorIs(t, err, ErrUnavailable, "the last answer")
		require.Greater(t, len(s.requests()), 1, "sent again within the window")
		assert.Len(t, clock.sends(), len(s.requests()))
		assert.LessOrEqual(t, clock.last(), window, "never sent after the window")
	})

	t.Run("pipeline", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, scripted{503, "0", txnRetriable})
		c := newClient(t, url, WithRetries(2), WithRetryWindow(window))
		clock := fakeClock(c)
		p := Pipeline{Group: "g", Topics: []string{"in"},
			Transform: func(context.Context, []*kgo.Record) ([]Statement, []Record, error) {
				return []Statement{{Statement: "INSERT INTO t VALUES (1)"}}, nil, nil
			}}
		r := &pipelineRun{c: c, p: p}
		b := r.send(context.Background(), poll(7), "m", 1)
		<-b.done
		err := b.err
		require.ErrorIs(t, err, ErrRetryWindow)
		got := s.requests()
		require.Greater(t, len(got), 1)
		assert.LessOrEqual(t, clock.last(), window, "never sent after the window")
		for _, r := range got {
			assert.Equal(t, got[0].body, r.body, "the same id and body")
		}
	})
}

// testClock is a client's clock that moves only when the client pauses, so that a retry
// window is judged by the client's own steps, not by how busy the machine is.
type testClock struct {
	mu    sync.Mutex
	at    time.Duration   // since the start
	moves []time.Duration // the clock after each pause: when the next request goes out
}

func fakeClock(c *Client) *testClock {
	k := &testClock{}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time {
		k.mu.Lock()
		defer k.mu.Unlock()
		return start.Add(k.at)
	}
	c.pause = func(ctx context.Context, d time.Duration) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.at += d
		k.moves = append(k.moves, k.at)
		return ctx.Err()
	}
	return k
}

// sends are the clock's readings at each request: the first at 0, then after each pause.
func (k *testClock) sends() []time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]time.Duration{0}, k.moves...)
}

// last is the clock when the last request went out.
func (k *testClock) last() time.Duration {
	s := k.sends()
	return s[len(s)-1]
}

// After 202 the transaction is polled; a 404 there means nothing of it was logged (the row's
// insert did not land), so it is sent again with the same id.
func TestSubmitAgainWhenInDoubtLeftNoRow(t *testing.T) {
	t.Parallel()
	s, url := serve(t, scripted{202, "", txnActive}, scripted{404, "", `{"error":{"class":"not_found","message":"transaction not found"}}`},
		scripted{200, "", txnCommitted})
	c := newClient(t, url)
	txn, err := c.Submit(context.Background(), order)
	require.NoError(t, err)
	assert.Equal(t, StateCommitted, txn.State)
	got := s.requests()
	require.Len(t, got, 3)
	assert.Equal(t, []string{"POST", "GET", "POST"}, []string{got[0].method, got[1].method, got[2].method})
	assert.Equal(t, got[0].body, got[2].body, "the same id and body")
}

// The pipeline helper sends an aborted batch again only when a new attempt can get past the
// abort; a refusal for good (a record too large, an authorization failure, a statement's
// error) stops it at once.
func TestAgainAfterAbort(t *testing.T) {
	t.Parallel()
	aborted := func(participant, class, message string) error {
		return &Error{Status: http.StatusConflict, Participant: participant, Class: class, Message: message,
			Transaction: &Transaction{ID: "x", State: StateAborted}}
	}
	for _, tc := range []struct {
		name  string
		err   error
		again bool
	}{
		{"recovery's presumed abort", aborted("coordinator", "abortable", "presumed abort: the coordinator restarted before prepared"), true},
		{"budget ran out while the prepare waited for its row", aborted("coordinator", "abortable", "the time budget ran out while the PREPARE waited"), true},
		{"retriable", aborted("kafka", "retriable", "NOT_ENOUGH_REPLICAS: Messages are rejected since there are fewer in-sync replicas than required."), true},
		{"kafka aborted the transaction", aborted("kafka", "abortable", "INVALID_TXN_STATE: The producer attempted a transactional operation in an invalid state."), true},
		{"kafka retries spent", aborted("kafka", "abortable", "NOT_ENOUGH_REPLICAS_AFTER_APPEND: Messages are written to the log, but to fewer in-sync replicas than required."), true},
		{"kafka record timeout", aborted("kafka", "abortable", "records have timed out before they were able to be produced"), true},
		{"record too large", aborted("kafka", "abortable", "MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept."), false},
		{"record batch too large", aborted("kafka", "abortable", "RECORD_LIST_TOO_LARGE: The request included message batch larger than the configured segment size on the server."), false},
		{"unknown topic", aborted("kafka", "abortable", "UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition."), false},
		{"topic authorization, abortable", aborted("kafka", "abortable", "TOPIC_AUTHORIZATION_FAILED: Not authorized to access topics: [Topic authorization failed.]"), false},
		{"transactional id authorization", aborted("kafka", "invalid_configuration", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Transactional Id authorization failed."), false},
		{"coordinator's own fault", aborted("coordinator", "internal", "bug"), false},
		{"statement", aborted("sql", "abortable", "duplicate key value violates unique constraint"), false},
		{"fenced member", aborted(ParticipantKafkaGroup, "fenced", "ILLEGAL_GENERATION"), false},
		{"not an abort", &Error{Status: http.StatusServiceUnavailable, Class: "unavailable"}, false},
		{"not an answer", errors.New("dial tcp: refused"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.again, againAfterAbort(tc.err))
		})
	}
}

// TestPipelineChainsTheWindow (O4): a batch sent while another is in flight names the last one
// sent, and its id differs from the same batch's unchained one; a batch sent with nothing in
// flight names none.
func TestPipelineChainsTheWindow(t *testing.T) {
	t.Parallel()
	_, url := serve(t, scripted{200, "", txnCommitted}, scripted{200, "", txnCommitted})
	c := newClient(t, url)
	p := Pipeline{Group: "g", Topics: []string{"in"},
		Transform: func(context.Context, []*kgo.Record) ([]Statement, []Record, error) {
			return []Statement{{Statement: "INSERT INTO t VALUES (1)"}}, nil, nil
		}}
	r := &pipelineRun{c: c, p: p}
	first := r.send(context.Background(), poll(7), "m", 1)
	assert.Empty(t, first.req.KafkaOffsets.After, "nothing in flight: no predecessor")
	r.window = append(r.window, first)
	second := r.send(context.Background(), poll(8), "m", 1)
	assert.Equal(t, first.req.ID, second.req.KafkaOffsets.After, "chained after the last batch sent")
	unchained := *second.req.KafkaOffsets
	unchained.After = ""
	assert.NotEqual(t, BatchID(&unchained), BatchID(second.req.KafkaOffsets), "the predecessor is part of the id")
	<-first.done
	<-second.done
	require.NoError(t, first.err)
	require.NoError(t, second.err)
}

// poll is one polled record of partition in/0 at offset, transformed into one insert.
func poll(offset int64) *pendingBatch {
	return newPending([]*kgo.Record{{Topic: "in", Partition: 0, Offset: offset}},
		[]Statement{{Statement: "INSERT INTO t VALUES (1)"}}, nil)
}
