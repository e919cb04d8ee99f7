package kafkatxn

import (
	"context"
	"testing"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAbortEvidence: an EndTxn(commit) answer that asks for an abort counts as an abort only
// when Kafka's transaction state confirms it for this very transaction.
func TestAbortEvidence(t *testing.T) {
	t.Parallel()
	ids := txntype.KafkaIDs{TransactionalID: "x-1", ProducerID: 7, ProducerEpoch: 4}
	tests := []struct {
		name  string
		seen  OpenTxn
		want  string // "aborted", "committed", or the class of an unknown outcome
		asked error
	}{
		{"complete abort at e+1", OpenTxn{State: stateCompleteAbort, ProducerID: 7, ProducerEpoch: 5}, "aborted", kerr.InvalidTxnState},
		{"prepare abort at e+1", OpenTxn{State: statePrepareAbort, ProducerID: 7, ProducerEpoch: 5}, "aborted", kerr.TransactionAbortable},
		{"timeout abort fenced to e+2", OpenTxn{State: stateCompleteAbort, ProducerID: 7, ProducerEpoch: 6}, "aborted", kerr.InvalidTxnState},
		{"complete commit at e+1", OpenTxn{State: stateCompleteCommit, ProducerID: 7, ProducerEpoch: 5}, "committed", kerr.InvalidTxnState},
		{"prepare commit at e+1", OpenTxn{State: statePrepareCommit, ProducerID: 7, ProducerEpoch: 5}, "committed", kerr.TransactionAbortable},
		// TRANSACTION_ABORTABLE while the transaction is still open: an instruction, no outcome.
		{"still ongoing", OpenTxn{State: stateOngoing, ProducerID: 7, ProducerEpoch: 4}, string(txntype.ClassRetriable), kerr.TransactionAbortable},
		// Transactions v1 (no epoch bump): the state could be another transaction's.
		{"abort at the same epoch (v1)", OpenTxn{State: stateCompleteAbort, ProducerID: 7, ProducerEpoch: 4}, string(txntype.ClassFenced), kerr.InvalidTxnState},
		{"abort of a later transaction", OpenTxn{State: stateCompleteAbort, ProducerID: 7, ProducerEpoch: 8}, string(txntype.ClassFenced), kerr.InvalidTxnState},
		{"commit at e+2", OpenTxn{State: stateCompleteCommit, ProducerID: 7, ProducerEpoch: 6}, string(txntype.ClassFenced), kerr.InvalidTxnState},
		{"another producer id", OpenTxn{State: stateCompleteAbort, ProducerID: 8, ProducerEpoch: 5}, string(txntype.ClassFenced), kerr.InvalidTxnState},
		{"re-initialised (Empty)", OpenTxn{State: "Empty", ProducerID: 7, ProducerEpoch: 6}, string(txntype.ClassFenced), kerr.InvalidTxnState},
		{"unknown id", OpenTxn{TransactionalID: "x-1"}, string(txntype.ClassFenced), kerr.InvalidTxnState},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := abortEvidence(ids, tt.seen, tt.asked)
			switch tt.want {
			case "committed":
				assert.NoError(t, err)
			case "aborted":
				require.Error(t, err)
				assert.ErrorIs(t, err, txntype.ErrKafkaAborted)
				assert.ErrorIs(t, err, tt.asked, "the answer stays in the chain")
			default:
				require.Error(t, err)
				assert.NotErrorIs(t, err, txntype.ErrKafkaAborted, "not confirmed: never an abort")
				assert.ErrorIs(t, err, errAbortUnconfirmed)
				assert.Equal(t, txntype.Class(tt.want), txntype.AsFailure(err).Class)
			}
		})
	}
}

// TestCheckWriters: a transaction is prepared only when every record was written by the
// producer id and epoch that would be logged.
func TestCheckWriters(t *testing.T) {
	t.Parallel()
	ids := txntype.KafkaIDs{TransactionalID: "x-1", ProducerID: 7, ProducerEpoch: 4}
	w := func(pid int64, epoch int16) writer { return writer{producerID: pid, epoch: epoch, written: true} }
	tests := []struct {
		name string
		ws   []writer
		ok   bool
	}{
		{"none", nil, true},
		{"one", []writer{w(7, 4)}, true},
		{"all the same", []writer{w(7, 4), w(7, 4), w(7, 4)}, true},
		{"re-initialised mid-transaction (epoch)", []writer{w(7, 3), w(7, 4)}, false},
		{"re-initialised mid-transaction (later epoch)", []writer{w(7, 4), w(7, 5)}, false},
		{"another producer id", []writer{w(7, 4), w(9, 4)}, false},
		{"a record without a result", []writer{w(7, 4), {}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkWriters(ids, tt.ws)
			if tt.ok {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, errMixedWriters)
			f := classify(err)
			assert.Equal(t, txntype.ClassRetriable, f.Class, "nothing was prepared; a new attempt may succeed")
			assert.False(t, f.Unavailable)
		})
	}
}

// kfakePool starts an in-process Kafka with one topic and a pool on it.
func kfakePool(t *testing.T, topic string, partitions int32) (*Pool, *kfake.Cluster) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := NewPool(ctx, Config{Brokers: c.ListenAddrs(), IDPrefix: "ut", Instance: "i", PoolSize: 2,
		TransactionTimeout: 10 * time.Second}, nil)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p, c
}

func key(s string) *txntype.Payload { return txntype.Text(s) }

// TestPrepareChecksWriters: a real transaction's records are all written by the ids Prepare
// returns, and those ids commit it.
func TestPrepareChecksWriters(t *testing.T) {
	t.Parallel()
	p, _ := kfakePool(t, "orders", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kt, err := p.Acquire(ctx)
	require.NoError(t, err)
	txn := kt.(*Txn)
	require.NoError(t, txn.Begin(ctx, []txntype.Record{{Topic: "orders", Key: key("a")}, {Topic: "orders", Key: key("b")},
		{Topic: "orders", Key: key("c")}}))
	ks, err := txn.Prepare(ctx)
	require.NoError(t, err)
	require.Len(t, txn.writers, 3)
	for i, w := range txn.writers {
		assert.Equal(t, writer{producerID: ks.ProducerID, epoch: ks.ProducerEpoch, written: true}, w, "record %d", i)
	}
	require.NoError(t, txn.Commit(ctx))
	txn.Release(true)
}

// TestEndTxnAbortAskedIsNotAnAbort: a broker that answers EndTxn(commit) with
// TRANSACTION_ABORTABLE while the transaction is still open has not aborted it; the answer is
// an unknown outcome, never ErrKafkaAborted. Once Kafka really aborted it, the same answer is
// confirmed.
func TestEndTxnAbortAskedIsNotAnAbort(t *testing.T) {
	t.Parallel()
	p, c := kfakePool(t, "orders", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kt, err := p.Acquire(ctx)
	require.NoError(t, err)
	txn := kt.(*Txn)
	require.NoError(t, txn.Begin(ctx, []txntype.Record{{Topic: "orders", Key: key("a")}}))
	ks, err := txn.Prepare(ctx)
	require.NoError(t, err)

	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if !r.Commit {
			return nil, nil, false // let aborts through
		}
		c.KeepControl()
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.TransactionAbortable.Code
		return resp, nil, true
	})
	err = p.EndTxn(ctx, ks.KafkaIDs, true)
	require.Error(t, err)
	assert.NotErrorIs(t, err, txntype.ErrKafkaAborted, "Kafka asked for an abort; it did not abort")
	assert.ErrorIs(t, err, kerr.TransactionAbortable)
	assert.Equal(t, txntype.ClassRetriable, txntype.AsFailure(err).Class, "still open: unknown, retried")
	o, open, err := p.DescribeTransaction(ctx, ks.TransactionalID)
	require.NoError(t, err)
	assert.True(t, open, "the transaction is still open: %+v", o)

	// Kafka aborts it (here: an abort by the same ids). kfake then reports the id Empty, which
	// does not name this transaction: still no abort, but fenced (the oracle reads it back).
	require.NoError(t, p.EndTxn(ctx, ks.KafkaIDs, false))
	err = p.EndTxn(ctx, ks.KafkaIDs, true)
	require.Error(t, err)
	assert.NotErrorIs(t, err, txntype.ErrKafkaAborted)
	assert.Equal(t, txntype.ClassFenced, txntype.AsFailure(err).Class)

	// A broker that reports the abort of exactly this transaction (transactions v2: the epoch
	// after ours) confirms it.
	c.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = ks.TransactionalID
		st.State = stateCompleteAbort
		st.ProducerID = ks.ProducerID
		st.ProducerEpoch = ks.ProducerEpoch + 1
		resp.TransactionStates = append(resp.TransactionStates, st)
		return resp, nil, true
	})
	err = p.EndTxn(ctx, ks.KafkaIDs, true)
	assert.ErrorIs(t, err, txntype.ErrKafkaAborted)
	txn.Release(false)
}
