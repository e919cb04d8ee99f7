package txntype

import (
	"encoding/json"
	"time"
)

// State is where a global transaction stands in the protocol. See doc.go for the diagram.
type State string

const (
	StateActive State = "active" // begun; participants may hold work, nothing decided
	// StateAborting: a resolver claimed the row before it was prepared; the outcome is fixed
	// (abort; for a one-phase row, whatever its marker proves) and the participants may still
	// hold work to roll back.
	StateAborting State = "aborting"
	// StateWaiting: every participant prepared and the Kafka ids durable, and the decision is
	// its caller's (X1): it waits for a commit or a rollback until DecideBy, then is presumed
	// aborted (X4). The API shows it as prepared, with Waiting set.
	StateWaiting    State = "waiting"
	StatePrepared   State = "prepared"   // every participant prepared; Kafka ids durable (I2)
	StateCommitting State = "committing" // decided commit without Kafka; SQL phase 2 pending
	StateCommitted  State = "committed"  // final: both sides committed
	StateAborted    State = "aborted"    // final: both sides aborted
	// StateHeuristic is an outcome the coordinator could not decide; an operator must look.
	StateHeuristic State = "heuristic"
	// StateHeuristicMixed means someone resolved a participant by hand against the decision.
	StateHeuristicMixed State = "heuristic_mixed"
)

// Final reports whether no further protocol step will change the state.
func (s State) Final() bool {
	switch s {
	case StateCommitted, StateAborted, StateHeuristic, StateHeuristicMixed:
		return true
	}
	return false
}

// ParseState accepts the wire names of the states.
func ParseState(s string) (State, bool) {
	switch st := State(s); st {
	case StateActive, StateAborting, StateWaiting, StatePrepared, StateCommitting, StateCommitted, StateAborted,
		StateHeuristic, StateHeuristicMixed:
		return st, true
	}
	return "", false
}

// Transaction is the coordinator's record of one global transaction: what the log stores and
// what the API returns.
type Transaction struct {
	ID       string `json:"id"`
	GID      string `json:"gid"`
	Instance string `json:"instance"`
	State    State  `json:"state"`
	// Owner and OwnerEpoch are who may write the row now (the fencing token): the instance
	// that runs or resolves it and the epoch of that instance's lock when it took the row.
	Owner      string `json:"owner,omitempty"`
	OwnerEpoch int64  `json:"owner_epoch,omitempty"`
	// OnePhase: one database and no Kafka; its COMMIT is the decision (the marker proves it).
	OnePhase  bool         `json:"one_phase,omitempty"`
	Kafka     *KafkaState  `json:"kafka,omitempty"`
	SQL       []SQLResult  `json:"sql,omitempty"`
	SQLGIDs   []SQLGID     `json:"sql_gids,omitempty"`
	Error     *ErrorDetail `json:"error,omitempty"`
	CreatedAt time.Time    `json:"created_at"`
	UpdatedAt time.Time    `json:"updated_at"`
	// PreparedAt and FinishedAt are set when the transaction reached those points.
	PreparedAt *time.Time `json:"prepared_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`

	// KafkaOffsets are the consumer group's offsets the Kafka transaction commits (offsets.go):
	// logged with prepared, with the ids of the transaction that commits them.
	KafkaOffsets *OffsetCommit `json:"kafka_offsets,omitempty"`

	// DecideBy is set on a transaction its caller decides (X1): the log's time after which,
	// without a decision, it is presumed aborted (X4).
	DecideBy *time.Time `json:"decide_by,omitempty"`
	// Decision is "external" on a transaction its caller decides, empty otherwise.
	Decision string `json:"decision,omitempty"`
	// Waiting and PreparedState are the API's view of a waiting row (Public): it shows as
	// prepared, waiting for its caller's commit (with this prepared_state) or rollback.
	Waiting       bool   `json:"waiting,omitempty"`
	PreparedState string `json:"prepared_state,omitempty"`

	// Digest identifies the request body (idempotency); not part of the API.
	Digest []byte `json:"-"`
	// RowDeferred: the request joined its batch with no row (S8, docs/batching.md section
	// 12.7); the batch's prepared write inserts it (Log.PreparedBatch). Not part of the API.
	RowDeferred bool `json:"-"`

	// logged is what the log last stored of the results and records (logged.go).
	logged loggedDetail
}

// DecisionExternal is Transaction.Decision of a transaction its caller decides.
const DecisionExternal = "external"

// NoKafkaPreparedState is the prepared_state of a transaction its caller decides that has no
// Kafka side (KIP-939's "no producer id, no epoch").
const NoKafkaPreparedState = "-1:-1"

// CallerPreparedState is the prepared_state a caller must present to commit t (X2): its Kafka
// transaction's "producerId:epoch", or NoKafkaPreparedState without one.
func (t *Transaction) CallerPreparedState() string {
	if t.Kafka == nil || t.Kafka.TransactionalID == "" {
		return NoKafkaPreparedState
	}
	if t.Kafka.PreparedState != "" {
		return t.Kafka.PreparedState
	}
	return t.Kafka.KafkaIDs.PreparedState()
}

// Public is t as the transaction API shows it: a row its caller decides says so (Decision),
// and while it waits it shows as prepared, with Waiting set and the prepared_state to commit
// with. Other rows are returned as they are.
func (t *Transaction) Public() *Transaction {
	if t == nil || t.DecideBy == nil {
		return t
	}
	p := *t
	p.Decision = DecisionExternal
	if p.State == StateWaiting {
		p.State, p.Waiting, p.PreparedState = StatePrepared, true, t.CallerPreparedState()
	}
	return &p
}

// Fence is a writer's claim to log rows: its instance and the epoch of that instance's lock.
// Every log write names the writer's fence and succeeds only while the row's owner is that
// fence and the instance still holds that epoch.
type Fence struct {
	Instance string
	Epoch    int64
}

// Fence is the row's current owner.
func (t *Transaction) Fence() Fence { return Fence{Instance: t.Owner, Epoch: t.OwnerEpoch} }

// KafkaIDs are what it takes to finish an open Kafka transaction from anywhere: the
// transactional.id and the producer id and epoch that EndTxn must carry.
type KafkaIDs struct {
	TransactionalID string `json:"transactional_id"`
	ProducerID      int64  `json:"producer_id"`
	ProducerEpoch   int16  `json:"producer_epoch"`
}

// PreparedState is the "producerId:epoch" form KIP-939 uses for PreparedTxnState.
func (k KafkaIDs) PreparedState() string {
	return formatPreparedState(k.ProducerID, k.ProducerEpoch)
}

// KafkaState is the Kafka side of a transaction.
type KafkaState struct {
	KafkaIDs
	PreparedState string         `json:"prepared_state,omitempty"`
	Records       []RecordOffset `json:"records"`
}

// RecordOffset is where one produced record landed, and its timestamp as Kafka stored it (the
// request's, or the producer's time; zero in rows logged before timestamps were kept).
type RecordOffset struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Timestamp time.Time `json:"timestamp,omitzero"`
}

// SQLResult is the outcome of one statement, in request order.
type SQLResult struct {
	Database     string           `json:"database"`
	RowsAffected int64            `json:"rows_affected"`
	Rows         []map[string]any `json:"rows,omitempty"`
}

// SQLGID names one prepared PostgreSQL transaction of a global transaction.
type SQLGID struct {
	Database string `json:"database"`
	GID      string `json:"gid"`
}

// ErrorDetail says which participant refused and why.
type ErrorDetail struct {
	Participant string `json:"participant"`
	Class       Class  `json:"class"`
	Message     string `json:"message"`
	SQLState    string `json:"sqlstate,omitempty"`
}

// Event is one entry of a transaction's audit trail.
type Event struct {
	State     State           `json:"state"`
	Detail    json.RawMessage `json:"detail,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
}

// ValidID reports whether id can be a request id (Request.Validate's rule): a lookup by any
// other string cannot find anything.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// SQLGIDFor is the PostgreSQL gid of a global transaction on one database: gids are
// server-wide, and two configured databases may share a server.
func SQLGIDFor(gid, database string) string { return gid + "@" + database }
