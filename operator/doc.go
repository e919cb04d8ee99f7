// Package operator is what an operator sees of this coordinator and can do to it: the read
// models behind GET /v1/transactions?state=in-doubt (indoubt.go), GET /v1/kafka/hanging
// (hanging.go) and GET /v1/status (status.go), and the actions on one transaction, retry, abort
// and resolve (actions.go, POST /v1/transactions/{id}/retry, /abort, /resolve). One Desk, made
// by New, serves them all; the API only speaks HTTP around it.
//
// The desk decides nothing the protocol decides: an action runs the recovery loop's rules on one
// row (recovery.Loop.ResolveOne over coord.Rules), the hanging view shows the loop's own repair
// decision (recovery.HangingPlan, H2), and the loop (package recovery) goes on resolving,
// sweeping and repairing in the background whatever an operator does.
//
// # State Model
//
// The in-doubt view reconciles the log, every database's pg_prepared_xacts and Kafka's open and
// hanging transactions. An entry is listed, with its issue, when:
//
//	in_doubt    a log row active, aborting, prepared or committing that no request of this
//	            process runs (another instance's row only once older than foreignGrace: it may
//	            be a request in flight there)
//	waiting     a row waiting for its caller's commit or rollback until its decide_by (X1):
//	            not in doubt; listed (at once, whatever its instance) so that an operator sees
//	            what it holds and may abort it; past decide_by the recovery loop aborts it
//	            (X4, presumed abort), and its hint says "deadline reached"
//	heuristic   a row heuristic or heuristic_mixed: the coordinator could not decide
//	orphan      a gid prepared with this log's prefix and no log row (or a shared gid no
//	            registration names, once no batch can still be on its way, S3)
//	leftover    a gid still prepared whose row is final
//	kafka_open  a Kafka transaction open on one of this coordinator's ids, no row in doubt
//	            names it and no request of this process runs it
//	hanging     a partition holds a transaction of ours open that Kafka's coordinator completed
//
// Only in_doubt, waiting and heuristic entries have actions; the others are the loop's to finish (the
// entry's hint says how). The actions granted, by the row's state:
//
//	active      retry, abort   (presumed abort, I5; a visible one-phase marker means committed)
//	aborting    retry, abort   (retry only for a one-phase row: its marker decides)
//	prepared    retry; abort only once Kafka no longer has the transaction open under the
//	            logged producer id and its outcome is aborted (I3: Kafka decides)
//	committing  retry          (commit is decided)
//	waiting     abort          (the caller's rollback's claim, X3, recovery.Loop.AbortWaiting,
//	                           from any instance; a commit that lands first wins); retry and
//	                           resolve are refused (ErrWaiting): it is not in doubt
//	heuristic, heuristic_mixed  resolve, with an outcome and a reason (an operator's decision)
//	committed, aborted          nothing: retry and abort return the row as it is (abort of a
//	                            committed row is refused)
//
// A row of another instance is acted on only while that instance's lock is free, held
// meanwhile and its epoch bumped as in a takeover (I8, recovery.LockFor); a row this process is
// running is left to its request. Every action claims the row first (I9): of two resolvers
// acting at once only one touches the participants.
//
// # Failure Handling
//
// A refusal wraps one of the sentinels of errors.go (each wraps txntype.ErrNotAllowed; the API
// answers 409) and changes nothing unless its message says what happened instead (an abort that
// found the transaction committed by Kafka reports it committed). An attempt that fails is
// recorded on the row like any recovery attempt and wraps txntype.ErrUnavailable (503): the loop
// retries it after backoff. A resolve finishes the SQL gids still prepared the operator's way
// first, then records the decision with who and why in one compare-and-set; if that write is
// lost to someone else it says so, and a gid it finished stays finished (the operator's decision
// accepts it).
//
// The views are read afresh on every call and never block the loop. A source that cannot be
// read (a database, Kafka, the instances) is named in the view's warnings and the view is
// partial; only the log is required.
package operator
