package txntype

// Decision is what is asked of a transaction its caller decides, while it waits (X2-X4 in
// docs/design.md): the caller's commit (with the prepared_state it was answered) or rollback,
// an operator's abort, or the deadline's presumed abort. Log.DecideWaiting takes it in one
// conditional write.
type Decision struct {
	Commit        bool
	PreparedState string
	// Deadline: the presumed abort of X4, taken only once decide_by is reached.
	Deadline bool
	// Reason is the error message of a rollback (who rolled it back).
	Reason string
	By     Fence
}
