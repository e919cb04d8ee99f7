// Package txntype is the vocabulary of a global transaction, below the protocol engine (coord)
// and shared by every package around it: what the API decodes, what the log stores, what the
// participants are asked to do, and what can go wrong.
//
//   - States and rows: State (the states of docs/design.md section 2; which transitions the
//     protocol takes lives in coord), Transaction (one row of the log, and what the API returns),
//     Fence, KafkaIDs, SQLGID, SharedGID and the gid names (SQLGIDFor, NewSharedGID).
//   - Requests and their wire form: Request, Statement, Record with its Payload, Headers and
//     Timestamp, OffsetCommit, AnswerMode. The JSON of a request is declared here once: the
//     API's strict walk (api/strict.go) follows these types, and a test checks them, and the Go
//     client's own copy, against api/openapi.yaml. Request.Validate checks what the values mean
//     (P1: every byte that names no statement result is known before anything runs).
//   - Errors: the sentinels the API maps to statuses (ErrInvalidRequest, ErrAborted, ErrInDoubt,
//     ErrUnavailable, …), Failure with its KIP-1050 Class, OutcomeError (errors.go).
//   - Ports: the participant and log interfaces the engine drives (participant.go: Kafka,
//     KafkaTxn, SQL, Log, Oracle, Ownership), implemented by kafkatxn, sqltxn and txlog, which
//     therefore depend on this package and not on the engine.
//
// # State Model
//
// The states and the transitions between them are drawn in coord's package documentation; here
// a State is only a name with its wire form (ParseState) and whether it is final (State.Final).
//
// # Failure Handling
//
// Nothing here does I/O. Validation errors are *InvalidError values naming the field
// (ErrInvalidRequest, 400, nothing run); the classification of a participant's errors into
// KIP-1050 classes is done by each participant (kafkatxn, sqltxn) into a *Failure.
package txntype
