package test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOffsetsInDoubtAndConsole: a request with offsets killed after its prepared write stays
// in doubt with its offsets logged: GET, the in-doubt view and the console's transaction page
// show the group and its offsets; recovery then commits them with the rest (O3).
func TestOffsetsInDoubtAndConsole(t *testing.T) {
	t.Parallel()
	if useKfake() {
		t.Skip("needs the real broker's group coordinator (KAFKA_BROKERS)")
	}
	b := newBrowser(t)
	e := newStore(t, envOpts{})
	input := e.prefix + "-in"
	e.createTopic(input, 2)
	n := e.startNode(t, "a", append(noRecoveryLoop, "COORDINATOR_FAULT=after_log_prepared")...)
	body := fmt.Sprintf(`{"id":"prep","sql":[{"statement":"INSERT INTO orders (id, total) VALUES ('prep', 1)"}],`+
		`"kafka_offsets":{"group_id":"g-prep","offsets":[{"topic":%q,"partition":1,"offset":17,"metadata":"batch-3"}]}}`, input)
	assert.Zero(t, n.post(body), "the fault point kills the process")
	n.waitExit(30 * time.Second)
	e.postponeRecovery(t)
	_, has := e.groupOffsets("g-prep", input)[1]
	require.False(t, has, "prepared, not committed: the group has no offset yet")

	e.serveAs(t, "a", nil)
	base := e.srv.URL
	g := call(t, http.MethodGet, base+"/v1/transactions/prep", "")
	require.Equal(t, http.StatusOK, g.Status, "%s", g.Raw)
	require.Equal(t, "prepared", g.str("state"))
	assert.Equal(t, "g-prep", g.str("kafka_offsets", "group_id"))

	v := call(t, http.MethodGet, base+"/v1/transactions?state=in-doubt", "")
	require.Equal(t, http.StatusOK, v.Status, "%s", v.Raw)
	found := false
	for _, it := range v.get("transactions").([]any) {
		if entryKey(it.(map[string]any)) == "prep" {
			found = true
			assert.Equal(t, "g-prep", response{Body: it.(map[string]any)}.str("log", "kafka_offsets", "group_id"), "the in-doubt view shows the offsets")
		}
	}
	assert.True(t, found, "prep is in doubt: %s", v.Raw)

	b.navigate(base + "/ui/#/txn/prep")
	b.visible("#txn-offsets")
	card := b.text("#txn-offsets")
	for _, want := range []string{"g-prep", "unfenced", input, "17", "batch-3"} {
		assert.Contains(t, card, want)
	}
	// No records: the Kafka card says so, and not that there are no offsets beside the card
	// that shows them.
	kafka := b.text("#txn-kafka")
	assert.Equal(t, "No records: the Kafka transaction commits the consumer group's offsets only.", b.text("#kafka-records-empty"))
	assert.NotContains(t, kafka, "offsets logged")
	assert.Zero(t, eval[int](b, `document.querySelectorAll('#kafka-records').length`), "no records table")
	assert.Equal(t, 1, eval[int](b, `document.querySelectorAll('#txn-offsets tbody tr').length`), "the offsets card shows the offset")
	assert.LessOrEqual(t, eval[int](b, `document.documentElement.scrollWidth - innerWidth`), 0, "the cards fit the page's width")
	b.screenshot("offsets-no-records")

	r := call(t, http.MethodPost, base+"/v1/transactions/prep/retry", "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	assert.Equal(t, "committed", r.str("state"))
	assert.Equal(t, int64(17), e.waitOffsets("g-prep", input, map[int32]int64{1: 17})[1], "recovery committed the offsets by the stored ids")
	assert.Equal(t, 1, countRows(t, e.db, "prep"))
}
