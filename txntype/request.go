package txntype

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kpgtx/coordinator/sqlpolicy"
)

// Request is one atomic write: SQL statements and Kafka records that commit together or not at all.
type Request struct {
	ID      string        `json:"id,omitempty"`
	SQL     []Statement   `json:"sql,omitempty"`
	Kafka   []Record      `json:"kafka,omitempty"`
	Timeout time.Duration `json:"-"`
	// KafkaOffsets are a consumer group's offsets committed by the request's Kafka transaction
	// (offsets.go): visible to the group exactly when the rows and records commit.
	KafkaOffsets *OffsetCommit `json:"kafka_offsets,omitempty"`
	// Answer is when a commit is answered (decided.go); not part of the request's meaning: a
	// retry that asks otherwise is the same request.
	Answer AnswerMode `json:"-"`
	// External: the caller decides (X1-X4): phase 1 runs, the row waits for the caller's
	// commit or rollback, within DecideWithin (0: the longest the coordinator can hold).
	External     bool          `json:"-"`
	DecideWithin time.Duration `json:"-"`
}

// RequestBody is the JSON body of POST /v1/transactions as it is written; Request is what it
// means (RequestBody.Request).
type RequestBody struct {
	ID        string      `json:"id"`
	SQL       []Statement `json:"sql"`
	Kafka     []Record    `json:"kafka"`
	TimeoutMS *int64      `json:"timeout_ms"`
	// KafkaOffsets: a consumer group's offsets, committed with the rest (OffsetCommit).
	KafkaOffsets *OffsetCommit `json:"kafka_offsets"`
	// Answer: "committed" (the default) or "decided" (AnswerDecided, D1).
	Answer *string `json:"answer"`
	// Decision: "coordinator" (the default: decided in the same call) or "external" (the
	// caller commits or rolls back later, X1-X4).
	Decision *string `json:"decision"`
	// DecideWithinMS: how long an external decision may wait (at least MinDecideWithin).
	DecideWithinMS *int64 `json:"decide_within_ms"`
}

// MinDecideWithin is the shortest decide_within_ms accepted.
const MinDecideWithin = 100 * time.Millisecond

// MinTimeoutMS is the smallest timeout_ms accepted: a smaller budget cannot even cover
// writing the log.
const MinTimeoutMS = int64(MinTimeout / time.Millisecond)

// Request is the request the body asks for; a timeout_ms or answer that cannot be is an
// *InvalidError naming it.
func (b *RequestBody) Request() (Request, error) {
	req := Request{ID: b.ID, SQL: b.SQL, Kafka: b.Kafka, KafkaOffsets: b.KafkaOffsets}
	if b.Answer != nil {
		mode, ok := ParseAnswerMode(*b.Answer)
		if !ok {
			return Request{}, &InvalidError{Field: "answer", Reason: fmt.Sprintf(
				"must be \"committed\" (answered once every participant committed) or \"decided\" (answered once the decision is durable), not %q", *b.Answer)}
		}
		req.Answer = mode
	}
	if b.Decision != nil {
		switch *b.Decision {
		case "coordinator":
		case DecisionExternal:
			req.External = true
		default:
			return Request{}, &InvalidError{Field: "decision", Reason: fmt.Sprintf(
				"must be \"coordinator\" (decided in the same call) or \"external\" (the caller commits or rolls back later), not %q", *b.Decision)}
		}
	}
	if b.DecideWithinMS != nil {
		switch {
		case !req.External:
			return Request{}, &InvalidError{Field: "decide_within_ms", Reason: "only with \"decision\": \"external\""}
		case *b.DecideWithinMS < int64(MinDecideWithin/time.Millisecond):
			return Request{}, &InvalidError{Field: "decide_within_ms", Reason: fmt.Sprintf("must be at least %d milliseconds", MinDecideWithin/time.Millisecond)}
		case *b.DecideWithinMS > math.MaxInt64/int64(time.Millisecond):
			return Request{}, &InvalidError{Field: "decide_within_ms", Reason: "too large"}
		}
		req.DecideWithin = time.Duration(*b.DecideWithinMS) * time.Millisecond
	}
	if req.External && b.KafkaOffsets != nil && b.KafkaOffsets.After != "" {
		return Request{}, &InvalidError{Field: "kafka_offsets.after", Reason: "a chained batch (O4) cannot wait for its caller's decision: its successors wait for it"}
	}
	if b.TimeoutMS != nil {
		if *b.TimeoutMS < MinTimeoutMS {
			return Request{}, &InvalidError{Field: "timeout_ms", Reason: fmt.Sprintf(
				"must be at least %d milliseconds (a smaller budget cannot cover writing the log)", MinTimeoutMS)}
		}
		if *b.TimeoutMS > math.MaxInt64/int64(time.Millisecond) {
			return Request{}, &InvalidError{Field: "timeout_ms", Reason: "too large"}
		}
		req.Timeout = time.Duration(*b.TimeoutMS) * time.Millisecond
	}
	return req, nil
}

// AnswerMode is when a request that commits is answered.
type AnswerMode uint8

const (
	// AnswerCommitted: once every participant committed (the default).
	AnswerCommitted AnswerMode = iota
	// AnswerDecided: once the decision to commit is durable, with phase 2 following (D1).
	AnswerDecided
)

// ParseAnswerMode reads the API's name of an AnswerMode ("committed", "decided").
func ParseAnswerMode(s string) (AnswerMode, bool) {
	switch s {
	case "committed":
		return AnswerCommitted, true
	case "decided":
		return AnswerDecided, true
	}
	return 0, false
}

// Statement is one SQL statement with positional ($1, $2, …) arguments.
type Statement struct {
	Database  string `json:"database,omitempty"`
	Statement string `json:"statement"`
	// Name refers to a statement of the operator's allowlist (Limits.Statements) instead of SQL
	// text; Validate replaces it with the text.
	Name string `json:"name,omitempty"`
	Args []any  `json:"args,omitempty"`
}

// Record is one Kafka record (record.go). Key and Value nil mean a null key or value. Digest
// encodes a record through digestRecord: a field added here is added there too.
type Record struct {
	Topic     string     `json:"topic"`
	Partition *int32     `json:"partition,omitempty"`
	Key       *Payload   `json:"key"`
	Value     *Payload   `json:"value"`
	Headers   Headers    `json:"headers,omitempty"`
	Timestamp *Timestamp `json:"timestamp,omitempty"`
}

// MinTimeout is the smallest time budget a request may ask for: a smaller one cannot even cover
// writing the log.
const MinTimeout = 100 * time.Millisecond

// DefaultDatabase is the database a statement without a name runs on (DATABASE_URL).
const DefaultDatabase = "default"

// Limits bound what one request may ask for.
type Limits struct {
	MaxStatements int
	MaxRecords    int
	MaxTimeout    time.Duration
	// Statements, when not empty, is the allowlist of named SQL statements (allow.go): requests
	// refer to them by name and SQL text is refused.
	Statements map[string]string
	// Topics, when not empty, lists the topics records may go to ("prefix*" matches a prefix).
	Topics []string
	// ConfinedSQL: client statements run as a configured role (sqltxn), so statements that
	// could leave it through dynamic SQL (DO, CALL) are refused too.
	ConfinedSQL bool
	// MaxRecordBytes bounds the decoded bytes of a request's records together (their keys,
	// values and headers as Kafka carries them); 0: no bound.
	MaxRecordBytes int64
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// Validate checks what can be checked without running anything; the error names the field.
// knownDB reports whether a database name is configured.
func (r *Request) Validate(l Limits, knownDB func(string) bool) error {
	if r.ID != "" && !idPattern.MatchString(r.ID) {
		return Invalid("id", "must be 1-128 characters of [A-Za-z0-9._:-]")
	}
	if len(r.SQL) == 0 && len(r.Kafka) == 0 && r.KafkaOffsets == nil {
		return Invalid("sql", "at least one of sql and kafka must be non-empty")
	}
	if l.MaxStatements > 0 && len(r.SQL) > l.MaxStatements {
		return Invalid("sql", fmt.Sprintf("%d statements, at most %d allowed", len(r.SQL), l.MaxStatements))
	}
	if l.MaxRecords > 0 && len(r.Kafka) > l.MaxRecords {
		return Invalid("kafka", fmt.Sprintf("%d records, at most %d allowed", len(r.Kafka), l.MaxRecords))
	}
	if r.Timeout != 0 && r.Timeout < MinTimeout || (l.MaxTimeout > 0 && r.Timeout > l.MaxTimeout) {
		return Invalid("timeout_ms", fmt.Sprintf("must be between %d and %d", MinTimeout.Milliseconds(), l.MaxTimeout.Milliseconds()))
	}
	ran := map[string]bool{} // databases with a statement that is no isolation level
	for i := range r.SQL {
		s := &r.SQL[i]
		field := "sql[" + strconv.Itoa(i) + "]"
		if s.Database == "" {
			s.Database = DefaultDatabase
		}
		if !knownDB(s.Database) {
			return Invalid(field+".database", fmt.Sprintf("unknown database %q", s.Database))
		}
		if err := l.resolveStatement(field, s); err != nil {
			return err
		}
		if strings.TrimSpace(s.Statement) == "" {
			return Invalid(field+".statement", "must not be empty")
		}
		// I13: nothing a client sends can end, prepare or split the transaction it runs in,
		// outlive it as session state, or reach the coordinator's own tables. PostgreSQL's own
		// grammar decides (sqlpolicy); sqltxn keeps a protocol-level guard behind it.
		if err := sqlpolicy.Check(s.Statement, sqlpolicy.Options{Confined: l.ConfinedSQL}); err != nil {
			return Invalid(field+".statement", err.Error())
		}
		// PostgreSQL takes an isolation level only before the transaction's first query: the
		// participant runs the ones that lead a database's statements before its own.
		switch {
		case !sqlpolicy.SetsIsolation(s.Statement):
			ran[s.Database] = true
		case ran[s.Database]:
			return Invalid(field+".statement", fmt.Sprintf("it sets the isolation level (or DEFERRABLE), which PostgreSQL takes only "+
				"before the transaction's first query: put it before the other statements on database %q", s.Database))
		}
		for j, a := range s.Args {
			if !isScalar(a) {
				return Invalid(fmt.Sprintf("%s.args[%d]", field, j), "must be a string, number, boolean or null")
			}
		}
	}
	for i := range r.Kafka {
		rec := &r.Kafka[i]
		field := "kafka[" + strconv.Itoa(i) + "]"
		if err := rec.check(field, len(r.SQL)); err != nil {
			return err
		}
		if rec.Topic == "" {
			return Invalid(field+".topic", "must not be empty")
		}
		if err := l.allowTopic(field, rec.Topic); err != nil {
			return err
		}
		if rec.Partition != nil && *rec.Partition < 0 {
			return Invalid(field+".partition", "must not be negative")
		}
	}
	return r.KafkaOffsets.validate(l, r.ID)
}

func isScalar(v any) bool {
	switch v.(type) {
	case nil, string, bool, float64, json.Number, int, int32, int64:
		return true
	}
	return false
}

// Digest identifies the request's content for the idempotency check: the same id with the same
// body returns the stored outcome, with another body it is refused. Its bytes never change
// between versions (a retry after an upgrade is compared with the digest its first attempt
// logged): they are those of json.Marshal of the statements, the records as they are, the
// offsets and who decides (TestDigestKeepsItsBytes).
func (r *Request) Digest() []byte {
	// A plain string payload goes to the encoder as text (digestText), which it writes as it
	// writes Payload.MarshalJSON's output in the end (HTML characters, U+2028 and U+2029
	// escaped, invalid UTF-8 replaced), without the scan and copy it makes of a Marshaler's
	// output: the records were two thirds of the digest's time, and the digest is a tenth of
	// the coordinator's CPU in a pipeline (BenchmarkDigest: 0.6 times the legacy time).
	var recs []digestRecord // null without records, as a nil []Record is
	if r.Kafka != nil {
		recs = make([]digestRecord, len(r.Kafka))
	}
	for i, rec := range r.Kafka {
		recs[i] = digestRecord{Topic: rec.Topic, Partition: rec.Partition, Key: digestPayload(rec.Key),
			Value: digestPayload(rec.Value), Headers: rec.Headers, Timestamp: rec.Timestamp}
	}
	return digestOf(r, recs)
}

// digestOf is the SHA-256 of json.Marshal of the request's meaning, its records as given.
func digestOf[R any](r *Request, records []R) []byte {
	b, _ := json.Marshal(struct {
		SQL   []Statement `json:"sql"`
		Kafka []R         `json:"kafka"`
		// omitempty: a request without offsets keeps the digest it always had.
		KafkaOffsets *OffsetCommit `json:"kafka_offsets,omitempty"`
		// Who decides is part of the meaning: the same id asked to wait and not to is a
		// conflict. omitempty: a request the coordinator decides keeps its digest.
		External     bool  `json:"external,omitempty"`
		DecideWithin int64 `json:"decide_within_ms,omitempty"`
	}{r.SQL, records, r.KafkaOffsets, r.External, int64(r.DecideWithin / time.Millisecond)})
	// The time budget is not part of the body's meaning: a retry with another timeout_ms is
	// the same request.
	sum := sha256.Sum256(b)
	return sum[:]
}

// digestRecord is a Record as Digest encodes it: the same fields in the same order, a plain
// payload as text.
type digestRecord struct {
	Topic     string     `json:"topic"`
	Partition *int32     `json:"partition,omitempty"`
	Key       any        `json:"key"`
	Value     any        `json:"value"`
	Headers   Headers    `json:"headers,omitempty"`
	Timestamp *Timestamp `json:"timestamp,omitempty"`
}

// digestPayload is a key or value as Digest encodes it: nil (null), the text of a plain
// string (digestText), or the payload (its MarshalJSON).
func digestPayload(p *Payload) any {
	switch {
	case p == nil:
		return nil
	case p.bare:
		return digestText(p.bytes)
	}
	return p
}

// digestText is a plain payload's text, which encoding/json writes as a JSON string.
type digestText []byte

func (t digestText) MarshalText() ([]byte, error) { return t, nil }

// Databases lists the databases the request touches, in first-use order.
func (r *Request) Databases() []string {
	var dbs []string
	seen := map[string]bool{}
	for _, s := range r.SQL {
		if !seen[s.Database] {
			seen[s.Database] = true
			dbs = append(dbs, s.Database)
		}
	}
	return dbs
}

func formatPreparedState(pid int64, epoch int16) string {
	return strconv.FormatInt(pid, 10) + ":" + strconv.Itoa(int(epoch))
}
