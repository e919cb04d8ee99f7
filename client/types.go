package client

import (
	"encoding/json"
	"time"
)

// The types below mirror the schemas of api/openapi.yaml field for field (spec_test.go checks
// every JSON name against the spec's properties). The comment of each names its schema.

// State is a transaction's state (schema State).
type State string

// The states of a transaction.
const (
	StateActive         State = "active"
	StateAborting       State = "aborting"
	StatePrepared       State = "prepared"
	StateCommitting     State = "committing"
	StateCommitted      State = "committed"
	StateAborted        State = "aborted"
	StateHeuristic      State = "heuristic"
	StateHeuristicMixed State = "heuristic_mixed"
	// StateWaiting is only an Event's: the transaction prepared and began to wait for its
	// caller's decision (Prepare). The transaction shows as StatePrepared with Waiting set.
	StateWaiting State = "waiting"
)

// Final reports whether the state is an outcome: committed or aborted.
func (s State) Final() bool { return s == StateCommitted || s == StateAborted }

// Heuristic reports whether the state waits for an operator's decision (Client.Resolve).
func (s State) Heuristic() bool { return s == StateHeuristic || s == StateHeuristicMixed }

// TransactionRequest is the body of POST /v1/transactions (schema TransactionRequest). At least
// one of SQL and Kafka must be non-empty. Submit fills ID when it is empty.
type TransactionRequest struct {
	// ID is the idempotency key: 1-128 characters of [A-Za-z0-9._:-].
	ID    string      `json:"id,omitempty"`
	SQL   []Statement `json:"sql,omitempty"`
	Kafka []Record    `json:"kafka,omitempty"`
	// TimeoutMS is the time budget in milliseconds (at least 100); nil: the server's default.
	TimeoutMS *int64 `json:"timeout_ms,omitempty"`

	// KafkaOffsets are a consumer group's offsets committed with the rest (offsets.go).
	KafkaOffsets *OffsetCommit `json:"kafka_offsets,omitempty"`

	// Answer is when a commit is answered: AnswerCommitted (empty: the server's default) or
	// AnswerDecided, which answers as soon as the decision to commit is durable, with the
	// state StateCommitting: the records are committed, the rows may not be visible yet.
	Answer string `json:"answer,omitempty"`

	// Decision is who decides the outcome: DecisionCoordinator (empty: the default; the
	// coordinator commits in the same call) or DecisionExternal (phase 1 only: the transaction
	// waits prepared for its caller's Commit or Rollback). Client.Prepare sets it.
	Decision string `json:"decision,omitempty"`
	// DecideWithinMS is, with DecisionExternal only, the window to decide in, in milliseconds
	// (at least 100, at most what the coordinator can hold); 0: that bound itself.
	DecideWithinMS int64 `json:"decide_within_ms,omitempty"`
}

// The values of TransactionRequest.Decision and Transaction.Decision.
const (
	DecisionCoordinator = "coordinator"
	DecisionExternal    = "external"
)

// The values of TransactionRequest.Answer.
const (
	AnswerCommitted = "committed"
	AnswerDecided   = "decided"
)

// Statement is one SQL statement (TransactionRequest.sql[]): exactly one of Statement (SQL text
// with $1, $2, … placeholders) and Name (a statement of the server's allowlist).
type Statement struct {
	// Database is a configured database's name; empty: "default" (DATABASE_URL).
	Database  string `json:"database,omitempty"`
	Statement string `json:"statement,omitempty"`
	Name      string `json:"name,omitempty"`
	// Args are scalars: string, number, bool or nil.
	Args []any `json:"args,omitempty"`
}

// Record is one Kafka record (TransactionRequest.kafka[]). A nil Key or Value is a null one (a
// nil Value is a tombstone); a nil Partition lets the partitioner choose; a nil Timestamp is the
// producer's time. Text, Binary, JSON, Avro, Protobuf, JSONSchema and FromResult make the key
// and value (data.go).
type Record struct {
	Topic     string     `json:"topic"`
	Partition *int32     `json:"partition,omitempty"`
	Key       *Data      `json:"key,omitempty"`
	Value     *Data      `json:"value,omitempty"`
	Headers   []Header   `json:"headers,omitempty"`
	Timestamp *time.Time `json:"timestamp,omitempty"`
}

// Ptr returns a pointer to v: Partition: client.Ptr[int32](0), TimeoutMS: client.Ptr[int64](500).
func Ptr[T any](v T) *T { return &v }

// Transaction is a transaction as the log holds it (schemas Transaction and
// TransactionWithEvents: Events is filled by Get and the operator actions).
type Transaction struct {
	ID       string `json:"id"`
	GID      string `json:"gid"`
	Instance string `json:"instance,omitempty"`
	// Owner is the instance allowed to write the row now, OwnerEpoch the epoch of its lock
	// when it took the row (the fencing token).
	Owner      string `json:"owner,omitempty"`
	OwnerEpoch int64  `json:"owner_epoch,omitempty"`
	// OnePhase: one database and no Kafka; the database's COMMIT is the decision.
	OnePhase   bool          `json:"one_phase,omitempty"`
	State      State         `json:"state"`
	Kafka      *KafkaState   `json:"kafka,omitempty"`
	SQL        []SQLResult   `json:"sql,omitempty"`
	SQLGIDs    []SQLGID      `json:"sql_gids,omitempty"`
	Error      *OutcomeError `json:"error,omitempty"`
	CreatedAt  time.Time     `json:"created_at"`
	UpdatedAt  time.Time     `json:"updated_at"`
	PreparedAt *time.Time    `json:"prepared_at,omitempty"`
	FinishedAt *time.Time    `json:"finished_at,omitempty"`
	// Events is the event history, oldest first.
	Events []Event `json:"events,omitempty"`

	// KafkaOffsets are the group's offsets the Kafka transaction commits (logged with prepared).
	KafkaOffsets *OffsetCommit `json:"kafka_offsets,omitempty"`

	// Decision is DecisionExternal on a transaction its caller decides (Client.Prepare), empty
	// otherwise.
	Decision string `json:"decision,omitempty"`
	// Waiting: the transaction is prepared on every participant (State is StatePrepared) and
	// waits for its caller's Commit (with PreparedState) or Rollback, until DecideBy.
	Waiting bool `json:"waiting,omitempty"`
	// DecideBy is, on a transaction its caller decides, when it is aborted without a decision.
	DecideBy *time.Time `json:"decide_by,omitempty"`
	// PreparedState is what a waiting transaction's Commit must present: its Kafka
	// transaction's "producerId:epoch", or "-1:-1" without Kafka.
	PreparedState string `json:"prepared_state,omitempty"`

	// Raw is the server's JSON of this transaction as received, for callers that print it.
	Raw json.RawMessage `json:"-"`
}

// KafkaState is the Kafka side of a transaction (Transaction.kafka).
type KafkaState struct {
	TransactionalID string `json:"transactional_id"`
	ProducerID      int64  `json:"producer_id"`
	ProducerEpoch   int16  `json:"producer_epoch"`
	// PreparedState is "producerId:epoch" (KIP-939 PreparedTxnState).
	PreparedState string         `json:"prepared_state,omitempty"`
	Records       []RecordOffset `json:"records"`
}

// RecordOffset is where one produced record landed (Transaction.kafka.records[]), with its
// timestamp as Kafka stored it.
type RecordOffset struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Timestamp time.Time `json:"timestamp,omitzero"`
}

// SQLResult is what one statement did (Transaction.sql[]).
type SQLResult struct {
	Database     string           `json:"database"`
	RowsAffected int64            `json:"rows_affected"`
	Rows         []map[string]any `json:"rows,omitempty"`
}

// SQLGID is a PostgreSQL prepared-transaction id of the transaction (Transaction.sql_gids[]).
type SQLGID struct {
	Database string `json:"database"`
	GID      string `json:"gid"`
}

// OutcomeError says which participant refused and why (Transaction.error).
type OutcomeError struct {
	Participant string `json:"participant"`
	// Class is retriable, abortable, fenced, invalid_configuration or internal.
	Class    string `json:"class"`
	Message  string `json:"message"`
	SQLState string `json:"sqlstate,omitempty"`
}

// Event is one entry of a transaction's history (schema Event). Detail holds a state change's
// error, or an operator action: action, by, reason, result, outcome, error, ….
type Event struct {
	State     State           `json:"state"`
	Detail    json.RawMessage `json:"detail,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
}

// AdminRequest is the body of the retry and abort actions (schema AdminRequest).
type AdminRequest struct {
	Reason string `json:"reason,omitempty"`
}

// CommitRequest is the body of a caller's commit (schema CommitRequest).
type CommitRequest struct {
	// PreparedState is the waiting transaction's prepared_state, as Prepare answered it.
	PreparedState string `json:"prepared_state"`
}

// ResolveRequest is the body of the resolve action (schema ResolveRequest).
type ResolveRequest struct {
	// Outcome is StateCommitted or StateAborted.
	Outcome State `json:"outcome"`
	// Reason is required: why this outcome is right.
	Reason string `json:"reason"`
}

// Page is one page of GET /v1/transactions with a state (or none).
type Page struct {
	Transactions []Transaction `json:"transactions"`
	// Next is the cursor of the next page (ListOptions.After); empty on the last page.
	Next string `json:"next,omitempty"`

	Raw json.RawMessage `json:"-"`
}

// InDoubtPage is one page of the in-doubt view (GET /v1/transactions?state=in-doubt).
type InDoubtPage struct {
	Entries []InDoubtEntry `json:"transactions"`
	Next    string         `json:"next,omitempty"`
	// Warnings name the sources that could not be read; the view is then partial.
	Warnings []string `json:"warnings,omitempty"`

	Raw json.RawMessage `json:"-"`
}

// InDoubtEntry is one global transaction or stray participant of the in-doubt view (schema
// InDoubtEntry).
type InDoubtEntry struct {
	ID    string `json:"id,omitempty"`
	GID   string `json:"gid,omitempty"`
	State State  `json:"state,omitempty"`
	// Issue is in_doubt, heuristic, orphan, leftover or kafka_open.
	Issue string `json:"issue"`
	// Sources are where it was found: log, postgres, kafka.
	Sources    []string  `json:"sources"`
	Instance   string    `json:"instance,omitempty"`
	Since      time.Time `json:"since"`
	AgeSeconds float64   `json:"age_seconds"`
	// Actions are the operator actions that apply: retry, abort, resolve.
	Actions  []string       `json:"actions"`
	Hint     string         `json:"hint"`
	Log      *InDoubtLog    `json:"log,omitempty"`
	Postgres []PreparedXact `json:"postgres,omitempty"`
	Kafka    *OpenKafkaTxn  `json:"kafka,omitempty"`
}

// InDoubtLog is the log row of an in-doubt entry with its recovery bookkeeping
// (InDoubtEntry.log).
type InDoubtLog struct {
	Transaction
	Attempts      int        `json:"attempts"`
	LastError     string     `json:"last_error,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
}

// PreparedXact is a prepared transaction found in pg_prepared_xacts (InDoubtEntry.postgres[]).
type PreparedXact struct {
	Database   string    `json:"database"`
	GID        string    `json:"gid"`
	PreparedAt time.Time `json:"prepared_at"`
}

// OpenKafkaTxn is what Kafka reports about an open transaction (InDoubtEntry.kafka).
type OpenKafkaTxn struct {
	TransactionalID string     `json:"transactional_id"`
	ProducerID      int64      `json:"producer_id"`
	ProducerEpoch   int16      `json:"producer_epoch"`
	State           string     `json:"state"`
	StartedAt       *time.Time `json:"started_at,omitempty"`
	TimeoutMS       int64      `json:"timeout_ms,omitempty"`
	Owner           string     `json:"owner,omitempty"`
	Quarantined     bool       `json:"quarantined"`
}

// RecoveryResult is what one recovery pass did (POST /v1/recovery/run).
type RecoveryResult struct {
	Resolved  int    `json:"resolved"`
	Failed    int    `json:"failed"`
	Orphans   int    `json:"orphans"`
	Markers   int    `json:"markers"`
	TakenOver int    `json:"taken_over"`
	Error     string `json:"error,omitempty"`
}

// Readiness is the answer of /readyz (schema Readiness).
type Readiness struct {
	// Status is ready or not_ready.
	Status string           `json:"status"`
	Failed []string         `json:"failed,omitempty"`
	Checks map[string]Check `json:"checks"`
}

// Check is one readiness check: whether it passed, and the error when it did not.
type Check struct {
	Ok    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// errorBody is the schema Error.
type errorBody struct {
	Error struct {
		Class   string `json:"class"`
		Field   string `json:"field,omitempty"`
		Message string `json:"message"`
	} `json:"error"`
}
