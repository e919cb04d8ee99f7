package test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// sharedInline is the throughput benchmark's bound for sharing the SQL transaction as well as
// the Kafka one (docs/batching.md section 11), measured rather than argued: inline2PC's
// statements for every request in flight, gathered by a leader into one PostgreSQL transaction
// (a savepoint per request, one marker, one PREPARE, one COMMIT PREPARED) and one Kafka
// transaction (one EndTxn), without a log and without HTTP. It is not atomic under crashes
// (nothing is logged); it only shows what the shared shape costs.
type sharedInline struct {
	db        *pgxpool.Pool
	topic     string
	value     string
	producers chan *kgo.Client
	reqs      chan *sharedReq
	wg        sync.WaitGroup
	stop      chan struct{}
}

type sharedReq struct {
	id   string
	done chan error
}

// sharedInlineMax caps the requests of one group, as KAFKA_SHARED_MAX caps a shared transaction.
const sharedInlineMax = 128

// newSharedInline starts leaders goroutines, each running one group at a time.
func newSharedInline(b *testing.B, db *pgxpool.Pool, producers chan *kgo.Client, topic, value string, leaders int) *sharedInline {
	b.Helper()
	s := &sharedInline{db: db, topic: topic, value: value, producers: producers,
		reqs: make(chan *sharedReq, 1024), stop: make(chan struct{})}
	for range leaders {
		s.wg.Go(s.lead)
	}
	b.Cleanup(func() { close(s.stop); s.wg.Wait() })
	return s
}

// do runs one request through a group and waits for the group's outcome.
func (s *sharedInline) do(_ int, id string) error { return submit(s.reqs, id) }

// submit hands request id to a shared floor's queue and waits for its group's outcome.
func submit(queue chan<- *sharedReq, id string) error {
	r := &sharedReq{id: id, done: make(chan error, 1)}
	queue <- r
	return <-r.done
}

func (s *sharedInline) lead() {
	for {
		var group []*sharedReq
		select {
		case r := <-s.reqs:
			group = gather(r, s.reqs)
		case <-s.stop:
			return
		}
		err := s.run(group)
		for _, r := range group {
			r.done <- err
		}
	}
}

// run commits one group: the SQL side prepared ∥ the records produced, then EndTxn, then
// COMMIT PREPARED.
func (s *sharedInline) run(group []*sharedReq) error {
	ctx := context.Background()
	cl := <-s.producers
	defer func() { s.producers <- cl }()
	gid := "bench_g_" + group[0].id
	errc := make(chan error, 1)
	go func() {
		b := sharedWork(group, gid)
		b.Queue("PREPARE TRANSACTION '" + gid + "'")
		errc <- s.db.SendBatch(ctx, b).Close()
	}()
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	recs := make([]*kgo.Record, len(group))
	for i, r := range group {
		recs[i] = &kgo.Record{Topic: s.topic, Key: []byte(r.id), Value: []byte(s.value)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		<-errc
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		return err
	}
	if err := <-errc; err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		return fmt.Errorf("group of %d: %w", len(group), err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, "COMMIT PREPARED '"+gid+"'")
	return err
}

// sharedWork is a group's SQL transaction up to its PREPARE: each request's insert under a
// savepoint of its own, then the group's marker row.
func sharedWork(group []*sharedReq, gid string) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for _, r := range group {
		b.Queue("SAVEPOINT member")
		b.Queue("INSERT INTO orders (id, total) VALUES ($1, $2)", r.id, 1)
		b.Queue("RELEASE SAVEPOINT member")
	}
	b.Queue("INSERT INTO bench_markers (gid) VALUES ($1)", gid)
	return b
}

// gather takes first and every request waiting behind it in ch, up to sharedInlineMax.
func gather[T any](first T, ch <-chan T) []T {
	group := []T{first}
	for len(group) < sharedInlineMax {
		select {
		case r := <-ch:
			group = append(group, r)
		default:
			return group
		}
	}
	return group
}
