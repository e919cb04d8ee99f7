package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kpgtx/coordinator/client"
)

// TestShowWaiting: a transaction waiting for its caller says until when, and once decide_by
// is reached, that recovery aborts it; other transactions say nothing of it.
func TestShowWaiting(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	by := now.Add(20 * time.Second)
	assert.Equal(t, "", waitingLine(false, &by, now))
	assert.Equal(t, "for its caller's commit or rollback until 2026-01-02T15:00:20Z (in 20s; not in doubt: then recovery aborts it)",
		waitingLine(true, &by, now))
	assert.Contains(t, waitingLine(true, &by, by), "deadline reached (decide_by 2026-01-02T15:00:20Z)")

	var out bytes.Buffer
	c := &txnClient{stdout: &out}
	future := time.Now().Add(time.Minute).UTC()
	c.printTransaction(client.Transaction{ID: "w1", State: client.StatePrepared, Waiting: true, DecideBy: &future}, "show")
	assert.Contains(t, out.String(), "waiting:")
	assert.Contains(t, out.String(), "for its caller's commit or rollback until "+future.Format(time.RFC3339))

	e := client.InDoubtEntry{ID: "w1", Issue: "waiting", Log: &client.InDoubtLog{Transaction: client.Transaction{DecideBy: &future}}}
	assert.True(t, strings.HasPrefix(evidence(e), "waiting for its caller until "+future.Format(time.RFC3339)))
}
