package coord

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/kpgtx/coordinator/txntype"
)

// How the members of a shared Kafka transaction hold its id (B3) and how a quarantined shared id
// goes back (B4); batch.go runs the batches.

// sharedTxn is a batch's leased transaction as its members hold it (B3): the id goes back to
// the pool when the last member releases it, quarantined if any member asked so.
type sharedTxn struct {
	ktx   txntype.KafkaTxn
	left  atomic.Int32
	keep  atomic.Bool
	lease *quarantineLease
}

func newSharedTxn(ktx txntype.KafkaTxn, members int) *sharedTxn {
	s := &sharedTxn{ktx: ktx, lease: &quarantineLease{id: ktx.TransactionalID()}}
	s.left.Store(int32(members))
	s.lease.left.Store(int32(members))
	s.keep.Store(true)
	return s
}

func (s *sharedTxn) member() *memberTxn { return &memberTxn{s: s} }

// memberTxn is one member's handle on a shared transaction. The leader ran its Kafka steps; a
// member only releases it (its Abort is the leader's, already done).
type memberTxn struct {
	s    *sharedTxn
	once sync.Once
}

var errSharedStep = errors.New("coord: a member of a shared Kafka transaction does not run its steps")

func (m *memberTxn) TransactionalID() string                       { return m.s.ktx.TransactionalID() }
func (m *memberTxn) Begin(context.Context, []txntype.Record) error { return errSharedStep }
func (m *memberTxn) Add(context.Context, []txntype.Record) error   { return errSharedStep }
func (m *memberTxn) Prepare(context.Context) (txntype.KafkaState, error) {
	return txntype.KafkaState{}, errSharedStep
}
func (m *memberTxn) Commit(context.Context) error { return errSharedStep }

// CommitOffsets is never a member's step: a request with offsets does not share (B5, batch.go).
func (m *memberTxn) CommitOffsets(context.Context, *txntype.OffsetCommit) error { return errSharedStep }

// Abort is a no-op: a member is rolled back alone only after the batch's prepared write was
// refused, and then the leader has aborted the shared transaction already.
func (m *memberTxn) Abort(context.Context) error { return nil }

// Release counts the member out; the last one releases the id (kept only if every member kept
// it). A member that keeps the id will never hand its quarantine lease to recovery, so it is
// counted out of that too.
func (m *memberTxn) Release(keep bool) {
	m.once.Do(func() {
		if keep {
			m.s.lease.left.Add(-1)
		} else {
			m.s.keep.Store(false)
		}
		if m.s.left.Add(-1) == 0 {
			m.s.ktx.Release(m.s.keep.Load())
		}
	})
}

// quarantineLease is a quarantined id as recovery may release it (B4): once per member that
// remembered it, and only the last take returns it. A lease that never reaches zero (a member
// that ended otherwise) leaves the id to the pool's healing after its grace period.
type quarantineLease struct {
	id   string
	left atomic.Int32
}

// leaseOf is the quarantine lease of a request's transaction: a batch's shared one, or a fresh
// one for a transaction of its own.
func leaseOf(ktx txntype.KafkaTxn) *quarantineLease {
	if m, ok := ktx.(*memberTxn); ok {
		return m.s.lease
	}
	l := &quarantineLease{id: ktx.TransactionalID()}
	l.left.Store(1)
	return l
}
