package kafkatxn

import (
	"context"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Transactions that wait for their caller's decision (X1 in docs/design.md): the transaction
// stays open under its id, which is quarantined (I1) until its row is final. The producer that
// opened it is kept (parked) rather than closed, so that a decision taken on this instance ends
// the transaction through it, as any request's commit does, and the id then returns to the pool
// with that producer: no new client and no InitProducerId per decision. A decision taken
// elsewhere ends the transaction by its ids (EndTxn), and the parked producer, whose own view of
// the transaction is then stale, is closed when the id is released.

// parked is a producer whose transaction waits for its caller.
type parked struct {
	pr  *producer
	ids txntype.KafkaIDs
	// ended: the transaction was ended through this producer, which can serve the next one.
	ended bool
}

// Park leaves the transaction open for its caller's decision: the id is quarantined, as with
// Release(false), and the producer is kept for the decision (Pool.EndTxn). A transaction of
// offsets alone, or one not prepared, is released quarantined instead: kgo ends only
// transactions it produced to.
func (t *Txn) Park() {
	if t.ids == nil || !t.began || t.offsetsOnly() { // offsetsOnly takes t.mu
		t.Release(false)
		return
	}
	t.mu.Lock()
	if t.released {
		t.mu.Unlock()
		return
	}
	t.released = true
	t.mu.Unlock()
	t.wg.Wait()
	p := t.pool
	p.leases.give(t.p.id)
	p.mu.Lock()
	p.quarantined[t.p.id], p.since[t.p.id] = true, time.Now()
	p.waiting[t.p.id] = &parked{pr: t.p, ids: *t.ids}
	p.mu.Unlock()
}

// takeParked removes and returns the parked producer of ids' transaction, if this pool holds
// it and nobody uses it now.
func (p *Pool) takeParked(ids txntype.KafkaIDs) *parked {
	p.mu.Lock()
	defer p.mu.Unlock()
	pk := p.waiting[ids.TransactionalID]
	if pk == nil || pk.ended || pk.pr.broken || pk.ids != ids {
		return nil
	}
	delete(p.waiting, ids.TransactionalID)
	return pk
}

// endParked ends a waiting transaction through its parked producer. ok=false: this pool holds
// no usable producer for it, or ending through it failed (the producer is marked broken): the
// caller ends it by its ids.
func (p *Pool) endParked(ctx context.Context, ids txntype.KafkaIDs, commit bool) (ok bool) {
	pk := p.takeParked(ids)
	if pk == nil {
		return false
	}
	how := kgo.TryAbort
	if commit {
		how = kgo.TryCommit
	} else if err := pk.pr.cl.AbortBufferedRecords(ctx); err != nil {
		pk.pr.broken = true
	}
	if !pk.pr.broken {
		if err := pk.pr.cl.EndTransaction(ctx, how); err != nil {
			pk.pr.broken = true
		} else {
			pk.ended = true
		}
	}
	p.mu.Lock()
	if cur, taken := p.waiting[ids.TransactionalID]; taken && cur != pk {
		// Cannot happen while the id is quarantined; keep the newer one.
		p.mu.Unlock()
		pk.pr.cl.Close()
		return pk.ended
	}
	p.waiting[ids.TransactionalID] = pk
	p.mu.Unlock()
	return pk.ended
}

// unpark returns the parked producer of id for Unquarantine: reusable when the transaction was
// ended through it; otherwise it is closed and nil returned.
func (p *Pool) unpark(id string) *producer {
	p.mu.Lock()
	pk := p.waiting[id]
	delete(p.waiting, id)
	p.mu.Unlock()
	if pk == nil {
		return nil
	}
	if pk.ended && !pk.pr.broken {
		return pk.pr
	}
	pk.pr.cl.Close()
	return nil
}

// closeParked closes every parked producer (Close). Their transactions stay open.
func (p *Pool) closeParked() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, pk := range p.waiting {
		pk.pr.cl.Close()
		delete(p.waiting, id)
	}
}
