/*
 * retention.pml: retention of final rows (R1-R3) against the repair of hanging Kafka
 * transactions (H1, H2), as a Promela model checked with SPIN (model/check.sh).
 *
 * A focused model beside kpgtx.pml: one transactional id, NT transactions on it one after
 * another, NP partitions. Each transaction produces records (phase 1), logs its row `prepared`
 * with its Kafka producer ids, sends EndTxn(commit) by those ids, and logs the row final from
 * Kafka's answer (committed, or aborted after Kafka aborted it: I3, I5). The decision is the
 * row: once final it says what the records must become. Kafka's transaction coordinator then
 * writes the marker on each partition, except that a marker may not be written (a broker
 * completes the transaction without a leader for the partition): the records stay open there,
 * a *hanging transaction*, while Kafka and the row are final. A transaction may also never log
 * its row: its coordinator is killed after producing (the never-logged path); Kafka aborts it
 * (timeout, or the next InitProducerId), and its abort marker may be lost the same way.
 *
 * Three actors run beside the transactions, every step of each interleaving with every other:
 *
 *   Retention (R1-R3)  R2 Kafka evidence before removal: a final row naming Kafka ids is
 *                      removed only after a check, started after the row became final, found
 *                      no transaction of its producer open on the partitions its records went
 *                      to. The check and the removal are separate atomic steps.
 *                      R3 removal leaves a mark: the removal records, in the same step, per
 *                      partition of its records the mark (transactional id, partition, highest
 *                      offset of its records); a later mark never lowers it.
 *   Repair (H1, H2)    for a hanging transaction (open on a partition, complete at Kafka's
 *                      coordinator): the rows naming its producer ids with records from its
 *                      start offset (txlog.TransactionsOnPartition) are read, then the mark.
 *                      A row committed: COMMIT marker; aborted: ABORT marker; prepared: wait
 *                      (recovery decides the row first, I5). No row: H2 absence is evidence
 *                      only above the mark: mark >= start offset -> cannot_repair (nothing
 *                      written, left to an operator); otherwise ABORT (never logged prepared,
 *                      so never decided: I2, I3). The marker is written in a later step; a
 *                      marker for a transaction no longer open on the partition does nothing.
 *   Kafka              aborts an ongoing transaction (timeout, InitProducerId), writes a
 *                      completed transaction's markers, or loses one (a fault, MAXF per run).
 *
 * Flags:
 *   NT        transactions on the one id, one after another: 1 to 3
 *   NP        partitions: 1 or 2 (a transaction writes to partition 0, and maybe to 1)
 *   MAXF      markers lost per run
 *   RETGUARD  1 (default): R2 is in force; 0: retention removes final rows without the check,
 *             and H2 alone must keep atomicity
 *
 * Properties (every reachable state):
 *   atomicity  a transaction whose row was committed never has its records aborted on any
 *              partition; one whose row was aborted never has them committed; records of a
 *              transaction never logged prepared never commit. Ghost dec[] keeps the row's final
 *              state after the row is removed.
 *   repairable (RETGUARD=1) a decided transaction (its row was committed or aborted) never
 *              ends cannot_repair.
 *
 * Mutants (each must make SPIN report a violation):
 *   M_RETAIN_NO_GUARD          retention removes final rows without the R2 check (caught with
 *                              RETGUARD=1: a committed hanging transaction ends cannot_repair)
 *   M_REPAIR_ABORT_ON_MISSING  the repair aborts records no row explains, ignoring the mark
 *                              (caught with RETGUARD=0: H2 alone keeps atomicity there)
 *   M_CHECK_BEFORE_FINAL       the R2 check also clears rows not final when it started (a
 *                              clean check remembered for rows decided later)
 *   M_MARK_AFTER_REMOVE        R3's mark is written in a step after the removal (RETGUARD=0)
 *   M_MARK_BEFORE_ROWS         the repair reads the mark before the rows (RETGUARD=0)
 *
 * Probes (each must be violated, showing the path is reachable, so the checks are not vacuous):
 *   PROBE_REMOVE_AFTER_HANG    a row whose transaction hung is removed (after its repair)
 *   PROBE_ABORT_ABOVE_MARK     the repair aborts never-logged records above a mark
 *   PROBE_CANNOT_REPAIR        the repair ends cannot_repair (RETGUARD=0)
 *
 * Left out (model/README.md): an id's next transaction adding records to a span its
 * predecessor left open (the id is held while anything of it is open: see the gate in Txn);
 * producer-id changes of the id; several instances; the expiry age of rows.
 */

#ifndef NT
#define NT 2
#endif
#ifndef NP
#define NP 2
#endif
#ifndef MAXF
#define MAXF 2
#endif
#ifndef RETGUARD
#define RETGUARD 1
#endif

#define NTP  (NT * NP)
#define TP(t, p) ((t) * NP + (p))

/* ---- Kafka's transaction coordinator, per transaction ---- */
#define C_NONE    0
#define C_ONGOING 1
#define C_COMMIT  2
#define C_ABORT   3
byte kc[NT];

/* ---- a transaction's records on a partition ---- */
#define R_NONE   0      /* no records there */
#define R_OPEN   1
#define R_COMMIT 2
#define R_ABORT  3
byte kp[NTP];
byte lo[NTP];           /* offset of its first record there (offsets start at 1) */
byte hi[NTP];           /* offset of its highest record there */
bit  lost[NTP];         /* its marker there was not written: hanging until repaired */
byte nexto[NP] = 1;     /* next offset of each partition */
#define HANGING(t, p) (kp[TP(t, p)] == R_OPEN && kc[t] >= C_COMMIT)

/* ---- the coordinator log ---- */
#define L_NONE      0
#define L_PREPARED  2
#define L_COMMITTED 5
#define L_ABORTED   6
#define L_REMOVED   8
#define FINAL(s)    ((s) == L_COMMITTED || (s) == L_ABORTED)
byte row[NT];           /* row t names transaction t's producer ids (prepared) */
byte dec[NT];           /* ghost: the final state the row reached (kept after removal) */
bit  ok[NT];            /* R2: a check started after the row was final found nothing open */
byte mark[NP];          /* R3: the id's mark on each partition (0: none) */
#ifdef M_MARK_AFTER_REMOVE
byte pendmark[NP];      /* the mutant's marks not written yet */
#endif
bit  done[NT];          /* the transaction's coordinator is finished with it (final or killed) */
bit  cr[NT];            /* ghost: the repair ended cannot_repair on t's records */

byte nf;                /* faults spent (lost markers) */

#define OUTC(t) (kc[t] == C_COMMIT -> R_COMMIT : R_ABORT)

/* atomicity on (t, p) */
#define AGREE(t, p) (!(dec[t] == L_COMMITTED && kp[TP(t, p)] == R_ABORT) && \
                     !(dec[t] == L_ABORTED && kp[TP(t, p)] == R_COMMIT) && \
                     !(kp[TP(t, p)] == R_COMMIT && kc[t] != C_COMMIT))

/* the transactions 1 and 2 (0 when there are fewer) and partition 1 (0 when there is one):
 * every macro below that ranges over them stays inside the arrays */
#define T1 (NT > 1 -> 1 : 0)
#define T2 (NT > 2 -> 2 : 0)
#define P1 (NP - 1)
#define AGREET(t) (AGREE(t, 0) && AGREE(t, P1))
#define ATOMICITY (AGREET(0) && AGREET(T1) && AGREET(T2))

active proctype Atomicity() {
	bit atomicity;      /* named for the report: false once the invariant is broken */
	atomic { !ATOMICITY -> assert(atomicity) }
}

/* ---- a transaction: phase 1, prepared, EndTxn(commit), the final write ---- */
proctype Txn(byte t) {
	byte p;
	/* I1, and the pool's hold of an id while anything of it is open on a partition: the id's
	 * previous transaction is complete at Kafka, its coordinator done, none of its records open */
	if
	:: t == 0
	:: t > 0 -> atomic { done[t - 1] && kc[t - 1] >= C_COMMIT &&
	                     kp[TP(t - 1, 0)] != R_OPEN && kp[TP(t - 1, P1)] != R_OPEN }
	fi;
	/* Txn.Begin and the produce: records on partition 0 (one or two), maybe on partition 1 */
	atomic {
		kc[t] = C_ONGOING;
		lo[TP(t, 0)] = nexto[0];
		if
		:: nexto[0] = nexto[0] + 1
		:: nexto[0] = nexto[0] + 2
		fi;
		hi[TP(t, 0)] = nexto[0] - 1;
		kp[TP(t, 0)] = R_OPEN
	}
	p = P1;
	if
	:: p > 0 ->
		atomic { lo[TP(t, p)] = nexto[p]; hi[TP(t, p)] = nexto[p]; nexto[p] = nexto[p] + 1; kp[TP(t, p)] = R_OPEN }
	:: skip
	fi;
	if
	:: /* killed before the prepared write: never logged; Kafka aborts it */
		goto finished
	:: /* txlog.Prepared with the producer ids (I2); may land after Kafka aborted the
	    * transaction on its own */
		row[t] = L_PREPARED
	fi;
	/* EndTxn(commit) by the stored ids: commits an ongoing transaction; after Kafka's abort it
	 * answers INVALID_TXN_STATE (aborted). A killed coordinator's recovery does the same (I5). */
	atomic { if :: kc[t] == C_ONGOING -> kc[t] = C_COMMIT :: else fi };
	/* the final write follows Kafka's answer: the decision is the row */
	atomic {
		if
		:: kc[t] == C_COMMIT -> row[t] = L_COMMITTED
		:: else -> row[t] = L_ABORTED
		fi;
		dec[t] = row[t]
	};
finished:
	done[t] = 1
}

/* ---- Kafka: aborts, markers written, markers lost ---- */
#define KMARKER(t, p) \
	:: atomic { kp[TP(t, p)] == R_OPEN && kc[t] >= C_COMMIT && !lost[TP(t, p)] -> \
		if \
		:: kp[TP(t, p)] = OUTC(t) \
		:: nf < MAXF -> nf++; lost[TP(t, p)] = 1 \
		fi }

active proctype Kafka() {
	do
	:: atomic { kc[0] == C_ONGOING -> kc[0] = C_ABORT }
	:: atomic { kc[T1] == C_ONGOING -> kc[T1] = C_ABORT }
	:: atomic { kc[T2] == C_ONGOING -> kc[T2] = C_ABORT }
	KMARKER(0, 0)
	KMARKER(0, P1)
	KMARKER(T1, 0)
	KMARKER(T1, P1)
	KMARKER(T2, 0)
	KMARKER(T2, P1)
	od
}

/* ---- retention ---- */
/* the records of row t on partition p are clear: none there, or no transaction of the id
 * open on p */
#define OPENON(p) (kp[TP(0, p)] == R_OPEN || kp[TP(T1, p)] == R_OPEN || kp[TP(T2, p)] == R_OPEN)
#define CLEAR(t, p) (kp[TP(t, p)] == R_NONE || !OPENON(p))
#define CLEARALL(t) (CLEAR(t, 0) && CLEAR(t, P1))
#define NOOPEN (!OPENON(0) && !OPENON(P1))

#ifdef M_CHECK_BEFORE_FINAL
/* the mutant: a clean check of the producer clears every row, final yet or not */
#define R2CHECK(t) :: atomic { !ok[t] && NOOPEN -> ok[t] = 1 }
#else
/* R2: the check reads the row final first (it starts after the row became final), then
 * finds nothing of the producer open on the partitions its records went to */
#define R2CHECK(t) :: atomic { !ok[t] && FINAL(row[t]) && CLEARALL(t) -> ok[t] = 1 }
#endif

#if RETGUARD && !defined(M_RETAIN_NO_GUARD)
#define GUARD(t) ok[t]
#else
#define GUARD(t) 1
#endif

#define RAISE(m, v) if :: (v) > (m) -> m = v :: else fi

/* R3: the mark of each partition the row's records went to, in the removal's step */
inline leavemark(t) {
	RAISE(mark[0], hi[TP(t, 0)]);
	if :: NP > 1 && kp[TP(t, P1)] != R_NONE -> RAISE(mark[P1], hi[TP(t, P1)]) :: else fi
}

#ifdef PROBE_REMOVE_AFTER_HANG
#define PROBE_REMOVE(t) assert(!(lost[TP(t, 0)] || lost[TP(t, P1)]))
#else
#define PROBE_REMOVE(t) skip
#endif

#ifdef M_MARK_AFTER_REMOVE
#define REMOVE(t) :: atomic { FINAL(row[t]) && GUARD(t) -> row[t] = L_REMOVED; PROBE_REMOVE(t); \
	RAISE(pendmark[0], hi[TP(t, 0)]); \
	if :: NP > 1 && kp[TP(t, P1)] != R_NONE -> RAISE(pendmark[P1], hi[TP(t, P1)]) :: else fi }
#else
#define REMOVE(t) :: atomic { FINAL(row[t]) && GUARD(t) -> row[t] = L_REMOVED; PROBE_REMOVE(t); leavemark(t) }
#endif

active proctype Retention() {
	do
	R2CHECK(0)
	REMOVE(0)
#if NT > 1
	R2CHECK(1)
	REMOVE(1)
#endif
#if NT > 2
	R2CHECK(2)
	REMOVE(2)
#endif
#ifdef M_MARK_AFTER_REMOVE
	:: atomic { pendmark[0] > mark[0] -> mark[0] = pendmark[0] }
	:: atomic { pendmark[P1] > mark[P1] -> mark[P1] = pendmark[P1] }
#endif
	od
}

/* ---- the repair of hanging transactions (H1, H2) ---- */
#define A_COMMIT  1
#define A_ABORT   2
#define A_WAIT    3
#define A_MISSING 4
#define A_CANNOT  5

active proctype Repair() {
	byte t, p, act, mk;
	bit  repairable;    /* named for the report */
	do
	:: /* the scan: a transaction open on a partition and complete at Kafka's coordinator */
		atomic {
			if
			:: HANGING(0, 0) -> t = 0; p = 0
			:: HANGING(0, P1) -> t = 0; p = P1
			:: HANGING(T1, 0) -> t = T1; p = 0
			:: HANGING(T1, P1) -> t = T1; p = P1
			:: HANGING(T2, 0) -> t = T2; p = 0
			:: HANGING(T2, P1) -> t = T2; p = P1
			fi
		};
#ifdef M_MARK_BEFORE_ROWS
		mk = mark[p];
#endif
		/* txlog.TransactionsOnPartition: the rows naming its producer ids from its start offset */
		atomic {
			if
			:: row[t] == L_COMMITTED -> act = A_COMMIT
			:: row[t] == L_ABORTED -> act = A_ABORT
			:: row[t] == L_PREPARED -> act = A_WAIT
			:: else -> act = A_MISSING
			fi
		};
#ifndef M_MARK_BEFORE_ROWS
		mk = mark[p];     /* H2: the mark, read after the rows */
#endif
		if
		:: act == A_MISSING ->
#ifdef M_REPAIR_ABORT_ON_MISSING
			act = A_ABORT
#else
			if
			:: mk >= lo[TP(t, p)] -> act = A_CANNOT
			:: else -> act = A_ABORT
			fi
#endif
		:: else
		fi;
		/* the marker (WriteTxnMarkers), or the status */
		atomic {
			if
			:: act == A_COMMIT -> if :: kp[TP(t, p)] == R_OPEN -> kp[TP(t, p)] = R_COMMIT :: else fi
			:: act == A_ABORT ->
#ifdef PROBE_ABORT_ABOVE_MARK
				assert(!(kp[TP(t, p)] == R_OPEN && mk > 0 && dec[t] == L_NONE));
#endif
				if :: kp[TP(t, p)] == R_OPEN -> kp[TP(t, p)] = R_ABORT :: else fi
			:: act == A_CANNOT ->
				cr[t] = 1;
#ifdef PROBE_CANNOT_REPAIR
				assert(false);
#endif
				/* a decided transaction never ends cannot_repair while R2 is in force: its
				 * records still open (a scan's entry may be stale by now: its marker written
				 * meanwhile, and the row then removed; the status of such an entry goes with
				 * the next scan, which no longer lists it) */
				repairable = !RETGUARD || dec[t] == L_NONE || kp[TP(t, p)] != R_OPEN;
				assert(repairable)
			:: act == A_WAIT
			fi;
			t = 0; p = 0; act = 0; mk = 0; repairable = 0
		}
	od
}

init {
	atomic {
		run Txn(0);
#if NT > 1
		run Txn(1);
#endif
#if NT > 2
		run Txn(2)
#endif
	}
}
