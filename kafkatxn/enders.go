package kafkatxn

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Raw EndTxn requests (EndTxn by ids: recovery resuming prepared rows, a request's retry after
// an unclear answer) go out over a few connections of their own, taken in turn.
//
// A Kafka broker handles one request per connection at a time: it reads the next only once it
// has answered the last, however many the client pipelines. An EndTxn is answered once the
// transaction coordinator wrote PrepareCommit to its log, so on one connection the EndTxn
// requests of a recovery pass, however parallel, were answered one after the other. With
// endTxnConns clients they overlap. On a 2-core machine the pass is bound by CPU instead (about
// 3 ms per transaction of the loop, PostgreSQL and the broker together), and eight connections
// took 10,000 rows from 17.7 to 16.6 s (BenchmarkRecovery, endtxn-conns=1 against 8).

// defaultEndTxnConns is how many clients carry raw EndTxn requests (Config.EndTxnConns).
const defaultEndTxnConns = 8

// enders are the clients raw EndTxn requests take turns on; made at first use, so that a pool
// that never sends one opens no more connections.
type enders struct {
	once    sync.Once
	clients []*kgo.Client
	err     error
	next    atomic.Uint64
	conns   atomic.Int64 // SetEndTxnConns; 0: Config.EndTxnConns
}

// SetEndTxnConns changes how many clients carry raw EndTxn requests from now on (n <= 0: the
// default; 1: the admin client alone), for benchmarks that compare the two in one run. The
// clients are made once: a later larger n does not add any.
func (p *Pool) SetEndTxnConns(n int) { p.enders.conns.Store(int64(n)) }

// ender returns the client the next raw EndTxn goes out on.
func (p *Pool) ender() *kgo.Client {
	n := int(p.enders.conns.Load())
	if n == 0 {
		n = p.cfg.EndTxnConns
	}
	if n <= 0 {
		n = defaultEndTxnConns
	}
	if n == 1 {
		return p.admin
	}
	e := &p.enders
	e.once.Do(func() {
		for range n {
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.cfg.Brokers...),
				kgo.ConnIdleTimeout(time.Minute)}, p.cfg.ClientOpts...)...)
			if err != nil {
				e.err = fmt.Errorf("kafka: a client for EndTxn: %w", err)
				return
			}
			e.clients = append(e.clients, cl)
		}
	})
	if e.err != nil {
		return p.admin // the admin client's connection still carries them, one at a time
	}
	return e.clients[e.next.Add(1)%uint64(len(e.clients))]
}

// close closes the clients ender made.
func (e *enders) close() {
	for _, cl := range e.clients {
		cl.Close()
	}
}
