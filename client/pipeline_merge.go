package client

import (
	"encoding/json"
	"errors"
	"fmt"

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

// pendingBatch is one or more polls transformed and not sent yet: the member's next batch. Each
// poll's statements and records are encoded once, as it joins, and its request's body is built
// from them (body): they used to be encoded to count their bytes and then again to be sent,
// which together took a sixth of a pipeline member's CPU.
type pendingBatch struct {
	batch []*kgo.Record
	sql   []Statement
	kafka []Record
	// sqlJSON and kafkaJSON are sql's and kafka's elements as encoding/json writes them, comma
	// separated, without the brackets; err: a part that cannot be encoded, which then joins
	// nothing, and whose request fails as Submit's would.
	sqlJSON, kafkaJSON []byte
	err                error
	alone              bool // named statements: no other poll joins it
}

func newPending(batch []*kgo.Record, sql []Statement, kafka []Record) *pendingBatch {
	b := &pendingBatch{batch: batch, sql: sql, kafka: kafka, alone: named(sql)}
	var err1, err2 error
	b.sqlJSON, err1 = elements(sql, len(sql))
	b.kafkaJSON, err2 = elements(kafka, len(kafka))
	b.err = errors.Join(err1, err2)
	return b
}

// elements is the JSON of the slice v of n elements without its brackets: nothing when empty.
func elements(v any, n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b[1 : len(b)-1], nil
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
	return !b.alone && b.err == nil && len(b.batch) < maxRecords && len(b.sql) < l.Statements && len(b.kafka) < l.Records
}

// join adds the poll p to b when the merged batch stays within maxRecords and l; ok false: p
// stays a batch of its own.
func (b *pendingBatch) join(p *pendingBatch, maxRecords int, l RequestLimits) bool {
	if b.alone || b.err != nil || p.alone || p.err != nil || len(b.batch)+len(p.batch) > maxRecords ||
		len(b.sql)+len(p.sql) > l.Statements || len(b.kafka)+len(p.kafka) > l.Records {
		return false
	}
	if b.size()+p.size()+bodyReserve > l.BodyBytes {
		return false
	}
	b.batch = append(b.batch, p.batch...)
	b.sql = append(b.sql, p.sql...)
	b.kafka = append(b.kafka, p.kafka...)
	b.sqlJSON = appendElements(b.sqlJSON, p.sqlJSON)
	b.kafkaJSON = appendElements(b.kafkaJSON, p.kafkaJSON)
	return true
}

// size is the bytes b's statements and records take in a request's body.
func (b *pendingBatch) size() int {
	return len(`,"sql":[],"kafka":[]`) + len(b.sqlJSON) + len(b.kafkaJSON)
}

func appendElements(to, more []byte) []byte {
	if len(to) > 0 && len(more) > 0 {
		to = append(to, ',')
	}
	return append(to, more...)
}

// batchEnvelope is what a batch's request carries besides its id, statements and records, in
// TransactionRequest's order.
type batchEnvelope struct {
	TimeoutMS    *int64        `json:"timeout_ms,omitempty"`
	KafkaOffsets *OffsetCommit `json:"kafka_offsets,omitempty"`
}

// body is the request of b with the id id: the bytes encoding/json writes for
// TransactionRequest{ID: id, SQL: b.sql, Kafka: b.kafka, TimeoutMS: timeout, KafkaOffsets: oc}
// (TestPendingBody), from the parts encoded as the polls joined.
func (b *pendingBatch) body(id string, timeout *int64, oc *OffsetCommit) (encodedBody, error) {
	if b.err != nil {
		return nil, fmt.Errorf("client: encode the request: %w", b.err)
	}
	idJSON, err := json.Marshal(id)
	if err != nil {
		return nil, fmt.Errorf("client: encode the request: %w", err)
	}
	rest, err := json.Marshal(batchEnvelope{TimeoutMS: timeout, KafkaOffsets: oc})
	if err != nil {
		return nil, fmt.Errorf("client: encode the request: %w", err)
	}
	out := make([]byte, 0, len(idJSON)+b.size()+len(rest)+8)
	out = append(append(out, `{"id":`...), idJSON...)
	if len(b.sqlJSON) > 0 {
		out = append(append(append(out, `,"sql":[`...), b.sqlJSON...), ']')
	}
	if len(b.kafkaJSON) > 0 {
		out = append(append(append(out, `,"kafka":[`...), b.kafkaJSON...), ']')
	}
	if len(rest) > len("{}") {
		return append(append(out, ','), rest[1:]...), nil
	}
	return append(out, '}'), nil
}
