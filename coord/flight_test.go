package coord_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txntype"
)

// beginHeldLog holds every Begin until release is closed, telling entered when one arrives.
type beginHeldLog struct {
	fakeLog
	entered chan struct{}
	release chan struct{}
}

func (l beginHeldLog) Begin(ctx context.Context, t *txntype.Transaction) (*txntype.Transaction, bool, error) {
	l.entered <- struct{}{}
	<-l.release
	return l.fakeLog.Begin(ctx, t)
}

// A second request with an id whose first run is still logging its row is never answered "not
// found" (the row is not there yet) nor "safe to retry": it waits for the first run's outcome
// within its own budget, and answers in doubt when that budget ends first. Another body is 422
// at once.
func TestSecondSubmitWhileBeginInFlight(t *testing.T) {
	t.Parallel()
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld()
			log := beginHeldLog{fakeLog: fakeLog{w}, entered: make(chan struct{}, 4), release: make(chan struct{})}
			var k txntype.Kafka
			if len(sh.req.Kafka) > 0 {
				k = fakeKafka{w}
			}
			c := coord.New(coord.Config{Instance: "a", GIDPrefix: "p", Logger: slog.New(slog.DiscardHandler),
				DefaultTimeout: 5 * time.Second, Ownership: ownership{txntype.Fence{Instance: "a", Epoch: 1}}},
				log, k, fakeSQL{w})
			req := sh.req
			req.ID = "x"
			type result struct {
				t   *txntype.Transaction
				err error
			}
			first := make(chan result, 1)
			go func() {
				t, err := c.Execute(context.Background(), cloneReq(req))
				first <- result{t, err}
			}()
			<-log.entered // the first run's Begin is on its way; no row yet

			// Its budget ends while the first run is in flight: in doubt.
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, err := c.Execute(ctx, cloneReq(req))
			cancel()
			require.ErrorIs(t, err, txntype.ErrInDoubt)
			assert.NotErrorIs(t, err, txntype.ErrUnavailable)
			var oe *txntype.OutcomeError
			require.ErrorAs(t, err, &oe)
			require.NotNil(t, oe.Txn, "a 202 carries the transaction")
			assert.Equal(t, txntype.StateActive, oe.Txn.State)
			assert.Equal(t, "p_x", oe.Txn.GID)

			// Another body under the same id: 422 at once.
			other := cloneReq(req)
			other.SQL = append(other.SQL, stmt("INSERT INTO t VALUES (2)"))
			_, err = c.Execute(context.Background(), other)
			require.ErrorIs(t, err, txntype.ErrIDConflict)

			// It waits for the first run's outcome, and answers it.
			second := make(chan result, 1)
			go func() {
				t, err := c.Execute(context.Background(), cloneReq(req))
				second <- result{t, err}
			}()
			select {
			case <-log.entered:
				t.Fatal("the second run logged a Begin of its own while the first was in flight")
			case r := <-second:
				t.Fatalf("answered before the first run's outcome: %v, %v", r.t, r.err)
			case <-time.After(100 * time.Millisecond):
			}
			close(log.release)
			r1 := <-first
			require.NoError(t, r1.err)
			r2 := <-second
			require.NoError(t, r2.err)
			assert.Equal(t, txntype.StateCommitted, r2.t.State)
			assert.Equal(t, r1.t.GID, r2.t.GID)
			require.NoError(t, c.WaitFinals(context.Background()))
			assert.False(t, c.InFlight("p_x"))
		})
	}
}

// cloneReq is a request of its own (Validate fills in defaults).
func cloneReq(r txntype.Request) txntype.Request {
	r.SQL = append([]txntype.Statement(nil), r.SQL...)
	r.Kafka = append([]txntype.Record(nil), r.Kafka...)
	return r
}
