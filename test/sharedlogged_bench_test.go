package test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// sharedLogged is the floor of the coordinator's shared path at c ≥ 16 (the row
// inline-shared-logged): inline-shared (sharedinline_bench_test.go) with the log writes the
// coordinator's guarantees need, each made for a whole group in one statement, and in the best
// order the protocol allows. No HTTP, no JSON, no statement policy or guards (I13), no
// per-member session statements: what is left when only the promise is kept.
//
//   - the requests' rows, durable before their work (docs/decisions.md, "The active row stays
//     durable"; I6: before any PREPARE): one multi-row insert per group, by a stage of its own
//     that gathers the requests arriving while the previous insert runs, as the log's group
//     commit does, so that the rows of the next group are logged while a group runs;
//   - the prepared write with the Kafka ids, before EndTxn (I2, B2): one update of the group's
//     rows, after both sides are prepared;
//   - the final write behind the answer (I1), one update of the group's rows.
//
// A leader runs one group's phase 1 and prepared write at a time; EndTxn, COMMIT PREPARED, the
// answers and the final write run behind it, so the next group's phase 1 overlaps them, as the
// coordinator's slot allows (docs/batching.md, "Sealing"). Not atomic under crashes (nothing
// recovers it); it only shows what the shape costs with its writes.
type sharedLogged struct {
	db        *pgxpool.Pool
	topic     string
	value     string
	producers chan *kgo.Client
	arrive    chan *sharedReq // requests, before their rows are logged
	// overlap: the rows are logged beside the group's work, and the PREPARE waits for them (the
	// retired I14's shape: I5 and I6 need the row before a PREPARE, not before the work).
	overlap bool
	ready   chan []*sharedReq
	wg      sync.WaitGroup
	behind  sync.WaitGroup // the groups' second halves
	stop    chan struct{}
}

func newSharedLogged(b *testing.B, db *pgxpool.Pool, producers chan *kgo.Client, topic, value string, overlap bool) *sharedLogged {
	b.Helper()
	s := &sharedLogged{db: db, topic: topic, value: value, producers: producers, overlap: overlap,
		arrive: make(chan *sharedReq, 1024), ready: make(chan []*sharedReq, 1024), stop: make(chan struct{})}
	if overlap {
		s.wg.Go(s.leadArrivals)
	} else {
		s.wg.Go(s.logBegins)
		s.wg.Go(s.lead) // one: two and three leaders measured slower (docs/decisions.md)
	}
	b.Cleanup(func() { close(s.stop); s.wg.Wait(); s.behind.Wait() })
	return s
}

// do runs one request through a group and waits for its outcome.
func (s *sharedLogged) do(_ int, id string) error { return submit(s.arrive, id) }

// logBegins logs the rows of the requests that arrived, one insert for all of them, and hands
// them to the leader.
func (s *sharedLogged) logBegins() {
	ctx := context.Background()
	for {
		var first *sharedReq
		select {
		case first = <-s.arrive:
		case <-s.stop:
			return
		}
		group := gather(first, s.arrive)
		if err := s.logRows(ctx, rowIDs(group)); err != nil {
			answer(group, err)
			continue
		}
		s.ready <- group
	}
}

// lead runs the logged groups: all the requests whose rows are logged form one group.
func (s *sharedLogged) lead() {
	for {
		var group []*sharedReq
		select {
		case g := <-s.ready:
			group = g
		case <-s.stop:
			return
		}
	fill:
		for len(group) < sharedInlineMax {
			select {
			case g := <-s.ready:
				group = append(group, g...)
			default:
				break fill
			}
		}
		s.run(group)
	}
}

// leadArrivals runs the requests as they arrive, their rows logged beside their work (overlap).
func (s *sharedLogged) leadArrivals() {
	for {
		select {
		case r := <-s.arrive:
			s.run(gather(r, s.arrive))
		case <-s.stop:
			return
		}
	}
}

// rowIDs are the log rows' keys of a group's requests.
func rowIDs(group []*sharedReq) []string {
	ids := make([]string, len(group))
	for i, r := range group {
		ids[i] = "row_" + r.id
	}
	return ids
}

// logRows logs the group's rows active, one insert for all of them.
func (s *sharedLogged) logRows(ctx context.Context, ids []string) error {
	_, err := s.db.Exec(ctx, "INSERT INTO bench_log (gid, kafka) SELECT unnest($1::text[]), 'active'", ids)
	return err
}

// run prepares one group on both sides and logs it prepared, then leaves EndTxn, COMMIT
// PREPARED, the answers and the final write to a goroutine of their own.
func (s *sharedLogged) run(group []*sharedReq) {
	ctx := context.Background()
	cl := <-s.producers
	gid := "bench_g_" + group[0].id
	ids := rowIDs(group)
	fail := func(err error) {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		s.producers <- cl
		answer(group, fmt.Errorf("group of %d: %w", len(group), err))
	}
	errc := make(chan error, 1)
	go func() { errc <- s.prepare(ctx, group, ids, gid) }()
	if err := cl.BeginTransaction(); err != nil {
		<-errc
		fail(err)
		return
	}
	recs := make([]*kgo.Record, len(group))
	for i, r := range group {
		recs[i] = &kgo.Record{Topic: s.topic, Key: []byte(r.id), Value: []byte(s.value)}
	}
	perr := cl.ProduceSync(ctx, recs...).FirstErr()
	if err := <-errc; err != nil || perr != nil {
		fail(fmt.Errorf("phase 1: %w", errors.Join(err, perr)))
		return
	}
	// I2: the ids durable before EndTxn, every member's in one write.
	pid, epoch, _ := cl.ProducerID(ctx)
	kafka := fmt.Sprintf("prepared %d/%d %s", pid, epoch, gid)
	if _, err := s.db.Exec(ctx, "UPDATE bench_log SET kafka = $2 WHERE gid = ANY($1)", ids, kafka); err != nil {
		fail(err)
		return
	}
	s.behind.Go(func() {
		defer func() { s.producers <- cl }()
		err := cl.EndTransaction(ctx, kgo.TryCommit)
		if err == nil {
			_, err = s.db.Exec(ctx, "COMMIT PREPARED '"+gid+"'")
		}
		answer(group, err)
		if err == nil {
			_, _ = s.db.Exec(ctx, "UPDATE bench_log SET kafka = 'committed' WHERE gid = ANY($1)", ids)
		}
	})
}

// prepare runs the group's statements and prepares them: in one round trip after the rows
// are logged, or with overlap beside the rows' insert and the PREPARE in a second round trip
// once they are durable.
func (s *sharedLogged) prepare(ctx context.Context, group []*sharedReq, ids []string, gid string) error {
	b := sharedWork(group, gid)
	prepare := "PREPARE TRANSACTION '" + gid + "'"
	if !s.overlap {
		b.Queue(prepare)
		return s.db.SendBatch(ctx, b).Close()
	}
	rows := make(chan error, 1)
	go func() { rows <- s.logRows(ctx, ids) }()
	conn, err := s.db.Acquire(ctx)
	if err != nil {
		return errors.Join(err, <-rows)
	}
	defer conn.Release()
	err = conn.SendBatch(ctx, b).Close()
	if err = errors.Join(err, <-rows); err != nil {
		_, _ = conn.Exec(ctx, "ROLLBACK")
		return err
	}
	_, err = conn.Exec(ctx, prepare)
	return err
}

// answer gives every request of group the outcome err.
func answer(group []*sharedReq, err error) {
	for _, r := range group {
		r.done <- err
	}
}
