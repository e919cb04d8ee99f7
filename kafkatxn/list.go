package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// stateOngoing is the broker's name of an open transaction (ListTransactions,
// DescribeTransactions). The Prepare*/Complete* states come after an EndTxn: Kafka has decided.
const stateOngoing = "Ongoing"

// OpenTxn is a Kafka transaction that the broker reports open (Ongoing) on a transactional id
// with this coordinator's prefix.
type OpenTxn struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16 // -1 when the broker could not describe it
	State           string
	// StartedAt is when the broker saw the transaction begin; zero when it does not say.
	StartedAt time.Time
	Timeout   time.Duration
	// Owned: the id is one of this pool's. InUse: a request of this process held the id at
	// some moment while the listing ran (it is in flight, not in doubt). Quarantined: the pool
	// withholds the id because its transaction is in doubt (I1).
	Owned, InUse, Quarantined bool
}

// leaseBook remembers which ids this process has leased, and when each was last given back,
// so that a listing can tell an open transaction a live request is running from one that
// nothing runs. Its zero value is ready to use.
type leaseBook struct {
	mu       sync.Mutex
	leased   map[string]bool
	returned map[string]time.Time
}

func (b *leaseBook) take(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.leased == nil {
		b.leased = map[string]bool{}
	}
	b.leased[id] = true
}

func (b *leaseBook) give(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.leased, id)
	if b.returned == nil {
		b.returned = map[string]time.Time{}
	}
	b.returned[id] = time.Now()
}

// inUseSince reports whether the id is leased now or was given back at or after since.
func (b *leaseBook) inUseSince(id string, since time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.leased[id] {
		return true
	}
	at, ok := b.returned[id]
	return ok && !at.Before(since)
}

// IDPrefix is the prefix every transactional id of this coordinator starts with ("<prefix>-").
func (p *Pool) IDPrefix() string { return p.cfg.IDPrefix + "-" }

// OpenTransactions lists the Kafka transactions open (Ongoing) on transactional ids that start
// with this coordinator's prefix — this instance's pool and the other instances sharing the
// prefix — with their producer id, epoch and start time (ListTransactions, then
// DescribeTransactions). Each says whether a request of this process was using the id while
// the listing ran. A partial answer (a broker did not respond) comes back with an error.
func (p *Pool) OpenTransactions(ctx context.Context) ([]OpenTxn, error) {
	start := time.Now()
	prefix := p.IDPrefix()
	// The pattern needs ListTransactions v2 (Kafka 4.1+); older brokers ignore it, so the
	// prefix is checked here as well. The broker matches the whole id (Java's matches(), hence
	// the ".*"); kfake finds the pattern anywhere in it.
	listed, err := p.adm.ListTransactionsByTxPattern(ctx, nil, []string{stateOngoing}, "^"+regexp.QuoteMeta(prefix)+".*")
	var errs error
	if err != nil {
		if len(listed) == 0 {
			return nil, fmt.Errorf("kafka: list transactions: %w", err)
		}
		errs = fmt.Errorf("kafka: list transactions (partial): %w", err)
	}
	var ids []string
	for id, l := range listed {
		if strings.HasPrefix(id, prefix) && l.State == stateOngoing {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, errs
	}
	sort.Strings(ids)
	described, err := p.adm.DescribeTransactions(ctx, ids...)
	if err != nil {
		errs = errors.Join(errs, fmt.Errorf("kafka: describe transactions: %w", err))
	}
	out := make([]OpenTxn, 0, len(ids))
	for _, id := range ids {
		o := OpenTxn{TransactionalID: id, ProducerID: listed[id].ProducerID, ProducerEpoch: -1, State: stateOngoing}
		if d, ok := described[id]; ok && d.Err == nil {
			if d.State != stateOngoing {
				continue // decided since it was listed
			}
			o.ProducerID, o.ProducerEpoch = d.ProducerID, d.ProducerEpoch
			o.Timeout = time.Duration(d.TimeoutMillis) * time.Millisecond
			if d.StartTimestamp > 0 {
				o.StartedAt = time.UnixMilli(d.StartTimestamp)
			}
		}
		out = append(out, o)
	}
	p.mu.Lock()
	for i := range out {
		out[i].Quarantined = p.quarantined[out[i].TransactionalID]
	}
	p.mu.Unlock()
	for i := range out {
		out[i].Owned = p.Owns(out[i].TransactionalID)
		out[i].InUse = out[i].Owned && p.leases.inUseSince(out[i].TransactionalID, start)
	}
	return out, errs
}

// DescribeTransaction tells whether a transaction is open (Ongoing) on the id right now, and
// with which producer id and epoch. open=false with a nil error means Kafka has nothing open
// on the id: whatever ran on it has been decided.
func (p *Pool) DescribeTransaction(ctx context.Context, id string) (OpenTxn, bool, error) {
	described, err := p.adm.DescribeTransactions(ctx, id)
	if err != nil {
		return OpenTxn{}, false, fmt.Errorf("kafka: describe transaction %s: %w", id, err)
	}
	d, ok := described[id]
	if !ok {
		return OpenTxn{}, false, fmt.Errorf("kafka: describe transaction %s: no answer", id)
	}
	if errors.Is(d.Err, kerr.TransactionalIDNotFound) {
		return OpenTxn{TransactionalID: id}, false, nil
	}
	if d.Err != nil {
		return OpenTxn{}, false, fmt.Errorf("kafka: describe transaction %s: %w", id, d.Err)
	}
	o := OpenTxn{TransactionalID: id, ProducerID: d.ProducerID, ProducerEpoch: d.ProducerEpoch,
		State: d.State, Timeout: time.Duration(d.TimeoutMillis) * time.Millisecond, Owned: p.Owns(id)}
	if d.StartTimestamp > 0 {
		o.StartedAt = time.UnixMilli(d.StartTimestamp)
	}
	return o, d.State == stateOngoing, nil
}
