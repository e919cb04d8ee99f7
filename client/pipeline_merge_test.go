package client

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/twmb/franz-go/pkg/kgo"
)

// part is a transformed poll of n records, n statements and n records, each value v.
func part(n int, v string, name string) *pendingBatch {
	var in []*kgo.Record
	var sql []Statement
	var out []Record
	for i := range n {
		in = append(in, &kgo.Record{Topic: "in", Offset: int64(i)})
		sql = append(sql, Statement{Statement: "INSERT INTO t VALUES ($1)", Name: name, Args: []any{v}})
		out = append(out, Record{Topic: "out", Value: Text(v)})
	}
	return newPending(in, sql, out)
}

// TestPendingJoin: a poll joins the batch pending before it only while the merged batch keeps
// within the member's MaxBatchRecords and every request limit, and never when either has named
// statements.
func TestPendingJoin(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 4000)
	limits := RequestLimits{Statements: 1000, Records: 1000, BodyBytes: 1 << 20}
	cases := []struct {
		name     string
		a, b     *pendingBatch
		gather   int
		limits   RequestLimits
		want     bool
		openLeft bool // the merged (or first) batch may still gather
	}{
		{"fits", part(10, "v", ""), part(10, "v", ""), 40, limits, true, true},
		{"fills the batch exactly", part(10, "v", ""), part(10, "v", ""), 20, limits, true, false},
		{"over the member's records", part(10, "v", ""), part(11, "v", ""), 20, limits, false, true},
		{"over the statements", part(10, "v", ""), part(10, "v", ""), 100, RequestLimits{Statements: 15, Records: 1000, BodyBytes: 1 << 20}, false, true},
		{"over the records", part(10, "v", ""), part(10, "v", ""), 100, RequestLimits{Statements: 1000, Records: 19, BodyBytes: 1 << 20}, false, true},
		{"over the body", part(100, big, ""), part(100, big, ""), 1000, limits, false, true},
		{"named before", part(1, "v", "n"), part(1, "v", ""), 100, limits, false, false},
		{"named after", part(1, "v", ""), part(1, "v", "n"), 100, limits, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			na, nb := len(c.a.batch), len(c.b.batch)
			got := c.a.join(c.b, c.gather, c.limits)
			assert.Equal(t, c.want, got)
			if got {
				assert.Len(t, c.a.batch, na+nb)
				assert.Len(t, c.a.sql, na+nb)
				assert.Len(t, c.a.kafka, na+nb)
				assert.GreaterOrEqual(t, c.a.bytes, jsonSize(c.a.sql, c.a.kafka), "the size counted is never below the size sent")
			} else {
				assert.Len(t, c.a.batch, na, "a refused join leaves the batch as it was")
			}
			assert.Equal(t, c.openLeft, c.a.open(c.gather, c.limits))
		})
	}
}

// TestPendingQueue: the member's pending polls gather into one batch while it is open, start a
// second one when the next poll does not fit, and gathering stops then.
func TestPendingQueue(t *testing.T) {
	t.Parallel()
	r := &pipelineRun{gather: 25, limits: DefaultRequestLimits}
	assert.True(t, r.gathering(), "nothing pending")
	r.add(part(10, "v", ""))
	r.add(part(10, "v", ""))
	assert.Len(t, r.pending, 1)
	assert.True(t, r.gathering(), "20 of 25")
	r.add(part(10, "v", ""))
	assert.Len(t, r.pending, 2, "30 would be over 25: a batch of its own")
	assert.False(t, r.gathering(), "two batches wait: poll no more")
	assert.Len(t, r.dropPending(), 30)
	assert.Empty(t, r.pending)
}
