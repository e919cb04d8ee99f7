package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txntype"
)

// batchAnswer is the answer to a pipeline batch of n statements and n records.
func batchAnswer(n int) *txntype.Transaction {
	now := time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
	t := &txntype.Transaction{ID: "txn-1", GID: "kpgtx-txn-1", Instance: "a", State: txntype.StateCommitted,
		CreatedAt: now, UpdatedAt: now, Kafka: &txntype.KafkaState{}}
	for i := range n {
		t.SQL = append(t.SQL, txntype.SQLResult{Database: "default", RowsAffected: 1})
		t.Kafka.Records = append(t.Kafka.Records, txntype.RecordOffset{Topic: "orders", Partition: 3, Offset: int64(i), Timestamp: now})
	}
	return t
}

// An answer, small or past net/http's buffer, goes out whole with its Content-Length (not
// chunked), and its body is the JSON the encoder writes.
func TestWriteJSONSendsContentLength(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 500} {
		v := batchAnswer(n)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusConflict, v)
		}))
		t.Cleanup(srv.Close)
		resp, err := http.Get(srv.URL)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		var want bytes.Buffer
		require.NoError(t, json.NewEncoder(&want).Encode(v))
		assert.Equal(t, http.StatusConflict, resp.StatusCode)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		assert.Equal(t, int64(want.Len()), resp.ContentLength, "n=%d", n)
		assert.Empty(t, resp.TransferEncoding, "n=%d", n)
		assert.Equal(t, want.String(), string(body))
	}
}

// A buffer grown by a large answer is not pooled; a small one is, emptied.
func TestAnswerBuffersBounded(t *testing.T) {
	t.Parallel()
	big := bytes.NewBufferString(strings.Repeat("x", maxPooledAnswer+1))
	putAnswerBuffer(big)
	assert.Positive(t, big.Len(), "a buffer past the bound is left as it is")
	small := bytes.NewBufferString("{}")
	putAnswerBuffer(small)
	assert.Zero(t, small.Len(), "a pooled buffer is emptied")
}

// BenchmarkWriteJSON is a pipeline batch's answer (100 results and offsets) over a loopback
// connection, written by writeJSON against the answer streamed as it was before (chunked past
// net/http's buffer), in the same run.
func BenchmarkWriteJSON(b *testing.B) {
	v := batchAnswer(100)
	streamed := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	for _, bb := range []struct {
		name  string
		write func(http.ResponseWriter, int, any)
	}{{"streamed", streamed}, {"writeJSON", writeJSON}} {
		b.Run(bb.name, func(b *testing.B) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				bb.write(w, http.StatusOK, v)
			}))
			defer srv.Close()
			client := srv.Client()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
}
