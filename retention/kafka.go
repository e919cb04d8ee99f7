package retention

import (
	"context"
	"sort"
	"strings"

	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/txlog"
)

// closedOnKafka returns the gids of candidates (a subset of the page's) whose Kafka records no
// transaction holds open any more (R2 in docs/design.md), and how many it kept.
//
// R2, Kafka evidence before removal: a final row naming Kafka records is removed only after
// Kafka was asked, after the row became final (every candidate is final when its page is read),
// whether a transaction of its producer is open on a partition its records went to, starting at
// or before the row's highest offset there, and every such partition answered "none". Such a
// transaction holds the row's records: a hanging one (a marker the broker skipped, H1) whose
// repair reads the row's decision, or the row's own, whose marker is still on its way. The
// question is asked of the partitions themselves, at removal, by whichever instance removes
// the row: nothing depends on one process's memory, on a scan having run since startup, or on
// which instance ran the row. A partition that does not answer keeps the rows that wrote to it
// (nothing is removed on a guess), and without Kafka to ask, every row naming records is kept.
// A transaction of the same producer opened after the row's records (a later request on the
// same id) holds none of them and keeps nothing.
func (s *Service) closedOnKafka(ctx context.Context, page []txlog.Expired, candidates []string) (out []string, kept int) {
	byGID := make(map[string]*txlog.Expired, len(page))
	need := map[kafkatxn.TopicPartition]bool{}
	for i := range page {
		e := &page[i]
		byGID[e.GID] = e
		for _, sp := range e.Spans {
			need[kafkatxn.TopicPartition{Topic: sp.Topic, Partition: sp.Partition}] = true
		}
	}
	if len(need) == 0 {
		return candidates, 0
	}
	var open map[kafkatxn.TopicPartition][]kafkatxn.OpenOnPartition
	var unasked map[kafkatxn.TopicPartition]error
	if s.kafka != nil {
		parts := make([]kafkatxn.TopicPartition, 0, len(need))
		for tp := range need {
			parts = append(parts, tp)
		}
		open, unasked = s.kafka.OpenOnPartitions(ctx, parts)
	}
	held := func(e *txlog.Expired) bool {
		for _, sp := range e.Spans {
			tp := kafkatxn.TopicPartition{Topic: sp.Topic, Partition: sp.Partition}
			txns, answered := open[tp]
			if !answered {
				return true // not asked, or no Kafka to ask
			}
			for _, o := range txns {
				if o.ProducerID == e.ProducerID && o.StartOffset <= sp.MaxOffset {
					return true
				}
			}
		}
		return false
	}
	out = candidates[:0:0]
	for _, gid := range candidates {
		if e := byGID[gid]; e != nil && held(e) {
			kept++
			continue
		}
		out = append(out, gid)
	}
	if kept > 0 {
		s.warnUnasked(unasked, kept)
	}
	return out, kept
}

// warnUnasked says why rows were kept when Kafka could not be asked.
func (s *Service) warnUnasked(unasked map[kafkatxn.TopicPartition]error, kept int) {
	if s.kafka == nil {
		s.cfg.Logger.Warn("retention keeps rows that name Kafka records: no Kafka is configured to ask whether their transactions are still open",
			"kept", kept)
		return
	}
	if len(unasked) == 0 {
		return // kept for open transactions: the repair or the marker is on its way
	}
	parts := make([]string, 0, len(unasked))
	var first error
	for tp, err := range unasked {
		parts = append(parts, tp.String())
		if first == nil {
			first = err
		}
	}
	sort.Strings(parts)
	if len(parts) > 10 {
		parts = append(parts[:10], "…")
	}
	s.cfg.Logger.Warn("retention keeps rows whose partitions did not answer; the next pass asks again",
		"kept", kept, "partitions", strings.Join(parts, ","), "error", first)
}
