package operator

import "github.com/kpgtx/coordinator/txntype"

// Sentinels of the operator actions. Each is a refusal: nothing was changed (unless the
// message says what happened instead), and each wraps txntype.ErrNotAllowed, so that a caller
// asking only "was it refused?" still can. Their text is txntype.ErrNotAllowed's: a refusal
// reads as it always has, and the sentinel says which guard refused it.
var (
	// ErrNotAbortable: abort would break atomicity (the decision is commit, or Kafka may still
	// commit), or there is nothing to abort.
	ErrNotAbortable error = &refusal{"not abortable"}
	// ErrHeuristic: the row ended heuristic; only an operator's decision (resolve) ends it.
	ErrHeuristic error = &refusal{"heuristic"}
	// ErrNotHeuristic: resolve records a decision only on a heuristic row.
	ErrNotHeuristic error = &refusal{"not heuristic"}
	// ErrInFlight: a request of this process runs the transaction: it decides it.
	ErrInFlight error = &refusal{"in flight"}
	// ErrInstanceAlive: the row belongs to another instance that holds its lock (or whose lock
	// this desk cannot take): that instance resolves it (I8).
	ErrInstanceAlive error = &refusal{"instance alive"}
	// ErrMovedOn: someone else resolved or claimed the row meanwhile.
	ErrMovedOn error = &refusal{"moved on"}
	// ErrWaiting: the transaction waits for its caller's commit or rollback until its
	// decide_by (X1): it is not in doubt, so there is nothing to retry or resolve; its caller
	// decides it, an operator may abort it, and recovery aborts it once decide_by is reached.
	ErrWaiting error = &refusal{"waiting"}
)

// refusal is a sentinel of this package: its own identity, txntype.ErrNotAllowed's text and class.
type refusal struct{ guard string }

func (r *refusal) Error() string { return txntype.ErrNotAllowed.Error() }
func (r *refusal) Unwrap() error { return txntype.ErrNotAllowed }
