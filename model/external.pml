/*
 * external.pml: prepare now, decide later (X1-X4 of docs/decisions.md, "Designed: a
 * transaction its caller decides"), as a Promela model checked with SPIN (model/check.sh).
 *
 * DESIGN MODEL: the rules are written down and checked here before the code is built.
 *
 * One transaction with "decision": "external". The preparing instance logs its row active,
 * prepares the database, leaves its Kafka transaction open with its records flushed, logs the
 * row waiting with the Kafka ids, the prepared_state and decide_by (X1), and answers
 * "prepared". Then, interleaved with every step of each other:
 *
 *   Caller     commits with the prepared_state it was given, commits with a stale one,
 *              rolls back, or stays silent; a decision may reach any instance, and the
 *              instance handling it may crash at any step (the caller sends it again, once).
 *   Commit     X2: one conditional log write takes the decision: waiting, decide_by not
 *              reached (the log's clock, in the same statement) and the prepared_state
 *              matching -> prepared (the existing state: decided to commit, EndTxn(commit)
 *              by the stored ids follows, I5 rolls it forward). A stale prepared_state claims
 *              the abort instead (the draft's completeTransaction); decide_by reached: the
 *              handler claims the abort itself. Any other state: the handler follows the row.
 *   Rollback   X3: claims the abort (waiting -> aborting), then aborts both sides.
 *   Deadline   X4: recovery claims a waiting row whose decide_by is reached (waiting ->
 *              aborting, in one conditional write), then aborts both sides: presumed abort,
 *              claim before act (I9). Until decide_by a waiting row is not in doubt: recovery
 *              leaves it alone, also after the preparing instance crashed.
 *   Operator   may abort a waiting row at any time, by the same claim.
 *   Recovery   I5 as today: an active row not in flight is presumed aborted; an aborting row
 *              is aborted; a prepared row is committed by EndTxn(commit) by its ids and
 *              follows Kafka's answer.
 *   Kafka      aborts the open transaction at its transaction timeout, which decide_by stays
 *              below (a decide_within_ms above the bound is refused), so only once decide_by
 *              has passed; a commit claimed just before decide_by may still meet it.
 *   Clock      decide_by passes once, at any time.
 *
 * Properties, once every actor is done:
 *   atomic    the database committed exactly when Kafka committed, and nothing is left
 *             prepared or open
 *   truthful  every answer matches the outcome: a commit answered committed (or aborted), a
 *             rollback answered aborted
 *   state     Kafka committed only if a commit with the prepared_state it was given was
 *             accepted
 *
 * Mutants (each must make SPIN report a violation):
 *   M_COMMIT_AFTER_ABORT   the commit's write also accepts a row the deadline (or an operator)
 *                          has claimed for abort
 *   M_STALE_STATE          the commit ignores the prepared_state
 *   M_ABORT_WITHOUT_CLAIM  the deadline's (and the operator's) abort acts on the participants
 *                          before its claim
 */

mtype = { NONE, ACTIVE, WAITING, PREPARED, ABORTING, COMMITTED, ABORTED };
mtype = { S_NONE, S_PREPARED, S_COMMITTED, S_ABORTED };
mtype = { K_NONE, K_OPEN, K_COMMITTED, K_ABORTED };
mtype = { A_NONE, A_COMMITTED, A_ABORTED };

mtype row = NONE;
mtype sql = S_NONE;
mtype kafka = K_NONE;
bool inflight = true;   /* the preparing instance runs the request */
bool answered;          /* the caller was told "prepared" with the prepared_state */
bool expired;           /* decide_by has passed */
bool accepted;          /* ghost: a commit with the right prepared_state was accepted */
bool operatorDone;
mtype commitAnswer = A_NONE;
mtype rollbackAnswer = A_NONE;
byte done;              /* actors finished: preparer, caller */

/* The participants follow a decided row; every step is idempotent (EndTxn by the ids, COMMIT
 * or ROLLBACK PREPARED by the gid). */
inline settleAbort() {
	atomic { if :: kafka == K_OPEN -> kafka = K_ABORTED :: else -> skip fi };
	atomic { if :: sql == S_PREPARED -> sql = S_ABORTED :: else -> skip fi };
	atomic { if :: row == ABORTING -> row = ABORTED :: else -> skip fi }
}

inline settleCommit() {
	atomic { if :: kafka == K_OPEN -> kafka = K_COMMITTED :: else -> skip fi };
	atomic {
		if
		:: kafka == K_COMMITTED && sql == S_PREPARED -> sql = S_COMMITTED
		:: kafka == K_ABORTED && sql == S_PREPARED -> sql = S_ABORTED
		:: else -> skip
		fi
	};
	atomic {
		if
		:: row == PREPARED && kafka == K_COMMITTED -> row = COMMITTED
		:: row == PREPARED && kafka == K_ABORTED -> row = ABORTED
		:: else -> skip
		fi
	}
}

/* Whatever the row says, carried out (a handler that follows the row, or recovery). */
inline settle() {
	if
	:: row == ABORTING -> settleAbort()
	:: row == PREPARED -> settleCommit()
	:: else -> skip
	fi
}

/* X3, X4 and the operator: claim before act. */
inline claimAbort(cond) {
#ifndef M_ABORT_WITHOUT_CLAIM
	if
	:: atomic { row == WAITING && cond -> row = ABORTING }; settleAbort()
	:: else -> skip
	fi
#else
	if
	:: atomic { row == WAITING && cond } ->
		atomic { if :: kafka == K_OPEN -> kafka = K_ABORTED :: else -> skip fi };
		atomic { if :: sql == S_PREPARED -> sql = S_ABORTED :: else -> skip fi };
		row = ABORTING;
		settleAbort()
	:: else -> skip
	fi
#endif
}

#define FINAL (row == COMMITTED || row == ABORTED)

proctype Preparer() {
	row = ACTIVE;
	if :: inflight = false; goto out :: skip fi;
	sql = S_PREPARED;
	if :: inflight = false; goto out :: skip fi;
	kafka = K_OPEN;
	if :: inflight = false; goto out :: skip fi;
	row = WAITING;                   /* X1: the ids, prepared_state and decide_by durable */
	if :: inflight = false; goto out :: skip fi;
	atomic { answered = true; inflight = false };
out:
	done++
}

#ifdef M_STALE_STATE
#define GOOD(g) true
#else
#define GOOD(g) (g)
#endif

/* X2: the commit, sent up to twice (the first handler may crash). */
inline commit(good) {
	atomic {
		if
#ifndef M_COMMIT_AFTER_ABORT
		:: row == WAITING && !expired && GOOD(good) -> row = PREPARED; accepted = accepted || good
#else
		:: (row == WAITING || row == ABORTING) && !expired && GOOD(good) -> row = PREPARED; accepted = accepted || good
#endif
		:: row == WAITING && !GOOD(good) -> row = ABORTING
		:: row == WAITING && expired -> row = ABORTING
		:: else -> skip
		fi
	};
	if :: goto crashed :: skip fi;   /* the handler's instance crashes */
	settle();
	if :: goto crashed :: skip fi;
	FINAL;
	atomic { if :: row == COMMITTED -> commitAnswer = A_COMMITTED :: else -> commitAnswer = A_ABORTED fi }
}

proctype Caller() {
	bool retried, good;
	answered;
	if
	:: skip                                         /* silence: the deadline decides */
	:: good = true; goto send                       /* the prepared_state it was given */
	:: good = false; goto send                      /* a stale one */
	:: atomic { row == WAITING -> row = ABORTING }; /* X3: the rollback claims ... */
		settleAbort();
		FINAL;
		atomic { if :: row == ABORTED -> rollbackAnswer = A_ABORTED :: else -> skip fi }
	:: atomic { row != WAITING } -> skip            /* ... or finds it decided: answered from the row */
	fi;
	goto out;
send:
	commit(good);
	goto out;
crashed:
	if
	:: !retried -> retried = true; goto send
	:: else -> skip
	fi;
out:
	done++
}

proctype World() {
	do
	:: atomic { !expired -> expired = true }
	:: atomic { expired && kafka == K_OPEN -> kafka = K_ABORTED }     /* Kafka's timeout, past decide_by */
	:: atomic { row == ACTIVE && !inflight -> row = ABORTING }          /* I5: presumed abort */
	:: atomic { (row == ABORTING || row == PREPARED) && !inflight } -> settle()   /* I5 */
	:: expired -> claimAbort(expired)                                 /* X4: the deadline */
	:: !operatorDone -> operatorDone = true; claimAbort(true)         /* an operator's abort */
	:: atomic { done == 2 && (FINAL || row == NONE) } -> break
	od
}

init {
	atomic {
		run Preparer();
		run Caller();
		run World()
	}
	(done == 2 && (FINAL || row == NONE));
	/* the participants settle behind a final row; a row never logged leaves its prepared
	 * gid to the orphan sweep (I6) and its Kafka transaction to Kafka's timeout */
	assert(row != COMMITTED || (kafka == K_COMMITTED && sql == S_COMMITTED));
	assert(row != ABORTED || (kafka != K_COMMITTED && sql != S_COMMITTED));
	assert((kafka == K_COMMITTED) == (sql == S_COMMITTED));            /* atomic */
	assert(commitAnswer != A_COMMITTED || row == COMMITTED);           /* truthful */
	assert(commitAnswer != A_ABORTED || row == ABORTED);
	assert(rollbackAnswer != A_ABORTED || row == ABORTED);
	assert(kafka != K_COMMITTED || accepted)                           /* state */
}
