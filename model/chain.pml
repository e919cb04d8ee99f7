/*
 * chain.pml: a pipeline member's batches in flight (O4), as a Promela model checked with SPIN
 * (model/check.sh).
 *
 * A focused model beside kpgtx.pml, which checks one request's protocol (O1-O3 included); here
 * NB batches of one consumer-group member are in flight at once, batch i naming batch i-1 as
 * its predecessor (kafka_offsets.after). Each batch is its own request on its own Kafka
 * transaction: it logs its row active, begins its Kafka transaction, sends its offsets
 * (TxnOffsetCommit: a record appended to __consumer_offsets, pending until the transaction's
 * marker), logs prepared, sends EndTxn(commit) and logs its final state. Batch i carries the
 * offsets i+1 (the next offset to read after it), so the group's offset after the run must be
 * that of the last batch committed.
 *
 * The rules under test (coord/chain.go):
 *   O4a  a batch sends its offsets only once its predecessor's were appended: its flight's
 *        mark while it is in flight, otherwise its row (prepared or later: the offsets are
 *        sent before prepared is logged); a predecessor ended without them aborts it.
 *   O4b  a batch commits only if its predecessor committed: before its prepared write it waits
 *        for its predecessor's decision to commit (the flight's mark, or a committing/committed
 *        row); any other end (aborted, active and not in flight, prepared and not in flight:
 *        its Kafka transaction may still time out) aborts it.
 *
 * The world around them, interleaved with every step:
 *   Kafka's group coordinator materializes a committed transaction's offsets when its marker
 *   reaches __consumer_offsets, and only if their record sits after the group's current one
 *   (the two transactions have their own transaction coordinators: markers land in any order).
 *   Faults, MAXF per run: the coordinator running a batch crashes at any step (the batch leaves
 *   flight; recovery takes its row over later: an active row is presumed aborted, a prepared one
 *   is decided by EndTxn(commit) by its ids, which Kafka answers with the transaction's own
 *   outcome); Kafka aborts an open transaction (its timeout); a rebalance fences the member's
 *   generation (every later TxnOffsetCommit of the batches is refused). kpgtx.pml checks
 *   recovery's own steps (claim before act, fencing); here it is one atomic step.
 *
 * Properties, checked once every batch, recovery and marker is done:
 *   atomic   a batch's row is committed exactly when its Kafka transaction committed
 *   chain    a batch committed only if its predecessor committed (so no refused batch is
 *            committed past)
 *   offsets  the group's offset is that of the last batch committed (never an earlier one's)
 *
 * Mutants (each must make SPIN report a violation):
 *   M_OFFSETS_EARLY       O4a left out: a batch sends its offsets at once
 *   M_NO_COMMIT_WAIT      O4b left out: a batch commits without its predecessor's decision
 *   M_PREPARED_IS_COMMIT  O4b takes a predecessor's prepared row for a decision to commit
 */

#ifndef NB
#define NB 2
#endif
#ifndef MAXF
#define MAXF 2
#endif

mtype = { NONE, ACTIVE, PREPARED, COMMITTED, ABORTED };
mtype = { K_NONE, K_OPEN, K_COMMITTED, K_ABORTED };

/* Three slots whatever NB (unused ones stay NONE / K_NONE): the checks name them directly. */
mtype row[3] = NONE;
mtype ktx[3] = K_NONE;
byte opos[3];       /* the position of its offsets' record in __consumer_offsets; 0: none */
bool appended[3];   /* its flight's marks (O4a, O4b) */
bool decided[3];
bool inflight[3];
bool landed[3];     /* its commit marker reached __consumer_offsets */
byte apos;          /* records appended to __consumer_offsets so far */
byte gOff;          /* the group's committed offset (batch i's is i+1) */
byte gPos;          /* the position of the record that gOff came from */
bool fenced;
byte faults;
byte ended;         /* batches whose request and recovery are done */

#define FAULT (faults < MAXF)

/* The predecessor's row shows the stage (the successor reads it once the predecessor left
 * flight). */
#define APPENDED_ROW(p) (row[p] == PREPARED || row[p] == COMMITTED)
#ifdef M_PREPARED_IS_COMMIT
#define COMMITTED_ROW(p) (row[p] == COMMITTED || row[p] == PREPARED)
#else
#define COMMITTED_ROW(p) (row[p] == COMMITTED)
#endif

/* A crash may end the request before any step. */
#define STEP if :: atomic { FAULT -> faults++; inflight[i] = false }; goto crashed :: true fi

inline kafkaAbort(i) {
	if
	:: ktx[i] == K_OPEN -> ktx[i] = K_ABORTED
	:: else -> skip
	fi
}

proctype Batch(byte i) {
	STEP;
	row[i] = ACTIVE;
	STEP;
	ktx[i] = K_OPEN;
	STEP;
	/* O4a */
	if
	:: i == 0 -> skip
	:: else ->
#ifndef M_OFFSETS_EARLY
		if
		:: appended[i-1] -> skip
		:: atomic { !inflight[i-1] && !appended[i-1] && APPENDED_ROW(i-1) } -> skip
		:: atomic { !inflight[i-1] && !appended[i-1] && !APPENDED_ROW(i-1) } -> goto abort
		fi
#else
		skip
#endif
	fi;
	STEP;
	/* TxnOffsetCommit: refused for a fenced generation or a transaction Kafka aborted. */
	if
	:: atomic { ktx[i] == K_OPEN && !fenced -> apos++; opos[i] = apos; appended[i] = true }
	:: atomic { ktx[i] != K_OPEN || fenced } -> goto abort
	fi;
	STEP;
	/* O4b, at the end of phase 1 */
	if
	:: i == 0 -> skip
	:: else ->
#ifndef M_NO_COMMIT_WAIT
		if
		:: decided[i-1] -> skip
		:: atomic { !inflight[i-1] && !decided[i-1] && COMMITTED_ROW(i-1) } -> skip
		:: atomic { !inflight[i-1] && !decided[i-1] && !COMMITTED_ROW(i-1) } -> goto abort
		fi
#else
		skip
#endif
	fi;
	STEP;
	row[i] = PREPARED;          /* I2: before EndTxn(commit) */
	STEP;
	atomic {                    /* EndTxn(commit): Kafka's answer decides */
		if
		:: ktx[i] == K_OPEN -> ktx[i] = K_COMMITTED; decided[i] = true
		:: else -> skip
		fi
	}
	STEP;
	atomic {
		if
		:: ktx[i] == K_COMMITTED -> row[i] = COMMITTED
		:: else -> row[i] = ABORTED
		fi;
		inflight[i] = false
	}
	goto done;
abort:
	atomic { kafkaAbort(i) };
	atomic { row[i] = ABORTED; inflight[i] = false };
	goto done;
crashed:
	/* Recovery, once it takes the row over (any time later). */
	atomic {
		if
		:: row[i] == ACTIVE -> kafkaAbort(i); row[i] = ABORTED
		:: row[i] == PREPARED ->
			if
			:: ktx[i] == K_OPEN -> ktx[i] = K_COMMITTED
			:: else -> skip
			fi;
			if
			:: ktx[i] == K_COMMITTED -> row[i] = COMMITTED
			:: else -> row[i] = ABORTED
			fi
		:: row[i] == NONE -> kafkaAbort(i)   /* never logged: Kafka's timeout ends it */
		:: else -> skip
		fi
	}
done:
	ended++
}

/* Kafka's group coordinator: a commit marker lands; the offsets become the group's only when
 * their record is later than the current one's. */
inline land(j) {
	landed[j] = true;
	if
	:: opos[j] > gPos -> gOff = j + 1; gPos = opos[j]
	:: else -> skip
	fi
}

#define LANDABLE(j) (ktx[j] == K_COMMITTED && !landed[j] && opos[j] > 0)
#define SETTLED(j) (!LANDABLE(j))

proctype World() {
	do
	:: atomic { LANDABLE(0) -> land(0) }
	:: atomic { LANDABLE(1) -> land(1) }
	:: atomic { LANDABLE(2) -> land(2) }
	:: atomic { FAULT && ktx[0] == K_OPEN -> faults++; ktx[0] = K_ABORTED }
	:: atomic { FAULT && ktx[1] == K_OPEN -> faults++; ktx[1] = K_ABORTED }
	:: atomic { FAULT && ktx[2] == K_OPEN -> faults++; ktx[2] = K_ABORTED }
	:: atomic { FAULT && !fenced -> faults++; fenced = true }
	:: atomic { ended == NB && SETTLED(0) && SETTLED(1) && SETTLED(2) } -> break
	od
}

/* The group's offset the committed batches leave: the last committed one's. */
#define LAST_COMMITTED (row[2] == COMMITTED -> 3 : (row[1] == COMMITTED -> 2 : (row[0] == COMMITTED -> 1 : 0)))

init {
	byte k;
	atomic {
		for (k : 0 .. NB - 1) {
			inflight[k] = true
		}
		for (k : 0 .. NB - 1) {
			run Batch(k)
		}
		run World()
	}
	(ended == NB && SETTLED(0) && SETTLED(1) && SETTLED(2));
	for (k : 0 .. NB - 1) {
		assert((row[k] == COMMITTED) == (ktx[k] == K_COMMITTED));      /* atomic */
		assert(k == 0 || row[k] != COMMITTED || row[k - 1] == COMMITTED) /* chain */
	}
	assert(gOff == LAST_COMMITTED)                                     /* offsets */
}
