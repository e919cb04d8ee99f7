package client

import (
	"encoding/json"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A member whose window is full keeps polling, and the polls it makes while it waits go out
// together as its next batch, once a slot frees: one request, one Kafka transaction, one set of
// log writes for several polls. Under load a batch grows with what arrived during the commits
// before it, as a database's group commit does; with room in the window every poll goes out
// alone, as soon as it is polled, so an idle pipeline's latency does not change.
//
// What a batch may gather is bounded by the member's MaxBatchRecords (the input records) and by
// the request limits (RequestLimits: the coordinator's most statements, records and body
// bytes), so that a merged request is never refused where its polls, sent alone, would not be.
// A poll whose statements are named (Statement.Name, referred to by FromResult) always goes out
// alone: two polls' names could collide.

// RequestLimits are the coordinator's bounds on one request, which a pipeline batch gathered
// from several polls keeps within. Zero fields: the coordinator's defaults
// (DefaultRequestLimits); set them to COORDINATOR_MAX_STATEMENTS, COORDINATOR_MAX_RECORDS and
// COORDINATOR_MAX_BODY_BYTES when the coordinator runs with lower ones.
type RequestLimits struct {
	Statements int
	Records    int
	BodyBytes  int
}

// DefaultRequestLimits are the coordinator's default request limits.
var DefaultRequestLimits = RequestLimits{Statements: 1000, Records: 1000, BodyBytes: 1 << 20}

func (l RequestLimits) orDefaults() RequestLimits {
	if l.Statements <= 0 {
		l.Statements = DefaultRequestLimits.Statements
	}
	if l.Records <= 0 {
		l.Records = DefaultRequestLimits.Records
	}
	if l.BodyBytes <= 0 {
		l.BodyBytes = DefaultRequestLimits.BodyBytes
	}
	return l
}

// bodyReserve is what a request's body holds besides its statements and records (its id, the
// offsets of every partition, the budget), counted against RequestLimits.BodyBytes with room to
// spare.
const bodyReserve = 16 << 10

// pendingBatch is one or more polls transformed and not sent yet: the member's next batch.
type pendingBatch struct {
	batch []*kgo.Record
	sql   []Statement
	kafka []Record
	bytes int  // the JSON size of sql and kafka, counted only once a second poll may join
	alone bool // named statements: no other poll joins it
}

func newPending(batch []*kgo.Record, sql []Statement, kafka []Record) *pendingBatch {
	return &pendingBatch{batch: batch, sql: sql, kafka: kafka, alone: named(sql)}
}

func named(sql []Statement) bool {
	for _, s := range sql {
		if s.Name != "" {
			return true
		}
	}
	return false
}

// open reports whether another poll may still join b.
func (b *pendingBatch) open(maxRecords int, l RequestLimits) bool {
	return !b.alone && len(b.batch) < maxRecords && len(b.sql) < l.Statements && len(b.kafka) < l.Records
}

// join adds the poll p to b when the merged batch stays within maxRecords and l; ok false: p
// stays a batch of its own.
func (b *pendingBatch) join(p *pendingBatch, maxRecords int, l RequestLimits) bool {
	if b.alone || p.alone || len(b.batch)+len(p.batch) > maxRecords ||
		len(b.sql)+len(p.sql) > l.Statements || len(b.kafka)+len(p.kafka) > l.Records {
		return false
	}
	if b.bytes == 0 {
		b.bytes = jsonSize(b.sql, b.kafka)
	}
	n := jsonSize(p.sql, p.kafka)
	if b.bytes+n+bodyReserve > l.BodyBytes {
		return false
	}
	b.batch = append(b.batch, p.batch...)
	b.sql = append(b.sql, p.sql...)
	b.kafka = append(b.kafka, p.kafka...)
	b.bytes += n
	return true
}

// jsonSize is the size of the statements and records as a request's body carries them; a part
// that cannot be encoded counts as too large to join anything (its request fails on its own).
func jsonSize(sql []Statement, kafka []Record) int {
	a, err1 := json.Marshal(sql)
	b, err2 := json.Marshal(kafka)
	if err1 != nil || err2 != nil {
		return 1 << 40
	}
	return len(a) + len(b)
}
