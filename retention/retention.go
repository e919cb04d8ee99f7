package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// Defaults of Config.
const (
	// DefaultBatch rows are checked and removed per statement.
	DefaultBatch = 1000
	// DefaultPause is the wait between two batches: with DefaultBatch, at most 10,000 rows a
	// second, several times the coordinator's highest measured rate (docs/decisions.md).
	DefaultPause = 100 * time.Millisecond
	// DefaultInterval is the period of the passes.
	DefaultInterval = time.Minute
)

// Config tunes the retention.
type Config struct {
	// Retention: final rows whose last change is older are removed; 0 keeps everything.
	Retention time.Duration
	// Batch is how many rows a batch checks and removes; Pause the wait between batches.
	Batch int
	Pause time.Duration
	// Interval is the period of the passes; the size sample is taken at each.
	Interval time.Duration
	Logger   *slog.Logger
}

func (c *Config) defaults() {
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.Pause <= 0 {
		c.Pause = DefaultPause
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Log is what the retention needs of the coordinator log (txlog.Log).
type Log interface {
	Expired(ctx context.Context, age time.Duration, after txlog.RetentionCursor, limit int) ([]txlog.Expired, txlog.RetentionCursor, bool, error)
	Remove(ctx context.Context, gids []string, age time.Duration) (rows, events int64, err error)
	Size(ctx context.Context) (txlog.Size, error)
}

// Databases is what the retention asks the participant databases (sqltxn.Databases).
type Databases interface {
	Names() []string
	Referenced(ctx context.Context, database string, gids []string) ([]string, error)
}

// Kafka asks partitions which transactions they hold open (kafkatxn.Pool); nil without Kafka.
type Kafka interface {
	OpenOnPartitions(ctx context.Context, parts []kafkatxn.TopicPartition) (open map[kafkatxn.TopicPartition][]kafkatxn.OpenOnPartition, unasked map[kafkatxn.TopicPartition]error)
}

// Service removes expired rows in the background. One shape for every background service:
// New, Start(ctx) (stops when ctx is done), Wait.
type Service struct {
	cfg   Config
	log   Log
	sql   Databases
	kafka Kafka
	done  chan struct{}

	passes, failures atomic.Int64
	removed, events  atomic.Int64
	kept             atomic.Int64 // candidates kept for a participant's reference
	keptKafka        atomic.Int64 // of them, kept for Kafka (R2: open, or not asked)
	batches          atomic.Int64
	sampleMu         sync.Mutex
	sample           txlog.Size
	sampled          bool
	sampledAt        time.Time
}

// New returns the service; Start runs it. kafka is nil without Kafka: rows naming Kafka records
// are then kept (nothing can tell whether their transactions are still open).
func New(cfg Config, log Log, sql Databases, kafka Kafka) *Service {
	cfg.defaults()
	return &Service{cfg: cfg, log: log, sql: sql, kafka: kafka, done: make(chan struct{})}
}

// Retention is the configured retention (0: everything is kept).
func (s *Service) Retention() time.Duration { return s.cfg.Retention }

// Start runs a pass at once and then every Interval until ctx is done. With a retention of 0
// the passes only sample the log's size.
func (s *Service) Start(ctx context.Context) {
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			if _, err := s.RunOnce(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("retention pass failed; the next pass starts again from the oldest rows", "error", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Wait blocks until the service started by Start has stopped.
func (s *Service) Wait() { <-s.done }

// Stats counts one pass.
type Stats struct {
	Removed int // rows removed
	Events  int // their events
	Kept    int // candidates kept: a participant still references them
	// KeptKafka counts the candidates of Kept kept for Kafka (R2): a transaction of their
	// producer still open on a partition their records went to, or a partition not asked.
	KeptKafka int
	Batches   int
}

// RunOnce is one pass: batches of expired rows until none is left (or ctx is done), then a
// sample of the log's size.
func (s *Service) RunOnce(ctx context.Context) (Stats, error) {
	s.passes.Add(1)
	var st Stats
	var err error
	if s.cfg.Retention > 0 {
		err = s.removeExpired(ctx, &st)
	}
	if serr := s.sampleSize(ctx); serr != nil {
		err = errors.Join(err, serr)
	}
	if err != nil {
		s.failures.Add(1)
	}
	if st.Removed > 0 {
		s.cfg.Logger.Info("retention pass", "removed", st.Removed, "events", st.Events, "kept", st.Kept, "kept_kafka", st.KeptKafka,
			"batches", st.Batches, "retention", s.cfg.Retention.String())
	}
	return st, err
}

// sampleSize takes a sample of the log's size for the metrics.
func (s *Service) sampleSize(ctx context.Context) error {
	size, err := s.log.Size(ctx)
	if err != nil {
		return err
	}
	s.sampleMu.Lock()
	s.sample, s.sampled, s.sampledAt = size, true, time.Now()
	s.sampleMu.Unlock()
	return nil
}

func (s *Service) removeExpired(ctx context.Context, st *Stats) error {
	var after txlog.RetentionCursor
	for first := true; ; first = false {
		s.sampleMu.Lock()
		stale := time.Since(s.sampledAt) >= s.cfg.Interval
		s.sampleMu.Unlock()
		if stale {
			// A long pass (a backlog) keeps the metrics current: a sample every Interval.
			_ = s.sampleSize(ctx) // the pass's own sample, at its end, reports a failure
		}
		if !first {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(s.cfg.Pause):
			}
		}
		page, next, done, err := s.log.Expired(ctx, s.cfg.Retention, after, s.cfg.Batch)
		if err != nil || done {
			return err
		}
		after = next
		gids, err := s.unreferenced(ctx, page)
		if err != nil {
			return err
		}
		gids, kafkaKept := s.closedOnKafka(ctx, page, gids)
		st.KeptKafka += kafkaKept
		s.keptKafka.Add(int64(kafkaKept))
		st.Kept += len(page) - len(gids)
		s.kept.Add(int64(len(page) - len(gids)))
		rows, events, err := s.log.Remove(ctx, gids, s.cfg.Retention)
		if err != nil {
			return err
		}
		st.Removed += int(rows)
		st.Events += int(events)
		st.Batches++
		s.removed.Add(rows)
		s.events.Add(events)
		s.batches.Add(1)
	}
}

// unreferenced returns the gids of the page that no participant database references (R1): no
// marker or prepared transaction of any of its SQL gids on any database. A database that cannot
// be asked keeps the whole page (the error).
func (s *Service) unreferenced(ctx context.Context, page []txlog.Expired) ([]string, error) {
	names := s.sql.Names()
	configured := map[string]bool{}
	for _, db := range names {
		configured[db] = true
	}
	owner := map[string][]string{} // SQL gid → the rows that name it
	byDB := map[string][]string{}
	keep := map[string]bool{}
	for _, e := range page {
		for _, db := range names {
			g := txntype.SQLGIDFor(e.GID, db) // a marker or prepared gid the row's list may not name
			owner[g] = append(owner[g], e.GID)
			byDB[db] = append(byDB[db], g)
		}
		for _, g := range e.SQLGIDs {
			switch {
			case !configured[g.Database]:
				keep[e.GID] = true // a database no longer configured cannot be asked
			case g.GID != txntype.SQLGIDFor(e.GID, g.Database):
				owner[g.GID] = append(owner[g.GID], e.GID) // a shared transaction's gid
				byDB[g.Database] = append(byDB[g.Database], g.GID)
			}
		}
	}
	for db, gids := range byDB {
		refs, err := s.sql.Referenced(ctx, db, gids)
		if err != nil {
			return nil, fmt.Errorf("retention: rows kept, database %q not asked: %w", db, err)
		}
		for _, g := range refs {
			for _, gid := range owner[g] {
				keep[gid] = true
			}
		}
	}
	out := make([]string, 0, len(page))
	for _, e := range page {
		if !keep[e.GID] {
			out = append(out, e.GID)
		}
	}
	return out, nil
}

// Totals are the counters since start, for the metrics.
type Totals struct {
	Passes, Failures, Removed, Events, Kept, KeptKafka, Batches int64
}

// Totals returns the counters since start.
func (s *Service) Totals() Totals {
	return Totals{Passes: s.passes.Load(), Failures: s.failures.Load(), Removed: s.removed.Load(),
		Events: s.events.Load(), Kept: s.kept.Load(), KeptKafka: s.keptKafka.Load(), Batches: s.batches.Load()}
}

// LastSize is the log's size at the last pass (ok=false before the first).
func (s *Service) LastSize() (txlog.Size, bool) {
	s.sampleMu.Lock()
	defer s.sampleMu.Unlock()
	return s.sample, s.sampled
}
