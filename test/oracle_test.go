package test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/service"
)

// reinitID initialises a transactional id from outside, as another owner would: it aborts
// whatever is open on it and bumps the epoch, so the logged epoch is fenced.
func (e *env) reinitID(t *testing.T, id string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.TransactionalID(id))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _, err = cl.ProducerID(ctx)
	require.NoError(t, err)
}

func (e *env) loggedTransactionalID(t *testing.T, id string) string {
	t.Helper()
	var tid string
	require.NoError(t, e.db.QueryRow(context.Background(),
		`SELECT transactional_id FROM coordinator_transactions WHERE request_id = $1`, id).Scan(&tid))
	return tid
}

// TestOracle: when EndTxn's answer is ambiguous because someone re-initialised the
// transactional id (PRODUCER_FENCED), recovery reads the logged offsets back with
// read_committed and follows what the records say (I7), on both sides.
func TestOracle(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fault string
		want  string // the records' fate decides
	}{
		// Killed before EndTxn: the re-initialisation aborts the open transaction.
		{"after_log_prepared", "aborted"},
		// Killed after EndTxn committed: the re-initialisation finds nothing open.
		{"after_endtxn", "committed"},
	}
	for _, tc := range cases {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			e := newStore(t, envOpts{})
			n := e.startNode(t, "a", "COORDINATOR_FAULT="+tc.fault)
			assert.Zero(t, n.post(e.orderBody("o1", "order")))
			n.waitExit(30 * time.Second)
			e.reinitID(t, e.loggedTransactionalID(t, "o1"))

			n2 := e.startNode(t, "a")
			e.waitResolved(t, time.Minute)
			r := call(t, http.MethodGet, n2.base+"/v1/transactions/o1", "")
			require.Equal(t, tc.want, r.str("state"), "%s", r.Raw)
			if tc.want == "aborted" && !useKfake() {
				// The real broker answers the stale epoch with PRODUCER_FENCED, which only the
				// oracle can settle (kfake answers INVALID_TXN_STATE: aborted, plainly).
				assert.Contains(t, r.str("error", "message"), "read back with read_committed")
			}
			e.verify(t, n2.base, map[string]sent{"o1": {kind: "order"}})
		})
	}
}

// TestTransactionTimeoutAboveBrokerMax: a Kafka transaction timeout the broker would refuse is
// refused at startup, naming both settings.
func TestTransactionTimeoutAboveBrokerMax(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{configure: func(c *service.Config) {
		c.KafkaTxnTimeout = 16 * time.Minute // the broker allows 15 minutes
	}})
	_, err := service.Open(context.Background(), e.cfg, nil)
	require.ErrorIs(t, err, kafkatxn.ErrTimeoutTooLarge)
	assert.True(t, strings.Contains(err.Error(), "KAFKA_TRANSACTION_TIMEOUT=16m0s") &&
		strings.Contains(err.Error(), "transaction.max.timeout.ms=900000"), err.Error())
}
