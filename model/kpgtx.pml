/*
 * kpgtx.pml: the commit protocol of the coordinator, as a Promela model checked with SPIN.
 *
 * Every step below is named after the Go function that performs it (see model/README.md for
 * the table). One model, several bounded configurations (check.sh passes -D flags):
 *
 *   N2PC     two-phase global transactions (one SQL participant + one Kafka participant): 1 or 2
 *   HAS1PC   1: one more global transaction on the one-phase path (one database, no Kafka)
 *   HASB     1: a second coordinator instance (B) that takes over instance A's rows
 *   NK       transactional ids in instance A's pool (1 forces reuse, 2 lets two run at once)
 *   MAXF     faults per run: crashes, lost locks, lost answers, failed calls, expired budgets
 *   HASDEC   1: the two-phase requests are answered at their decision (D1)
 *
 * Mutants (each must make SPIN report a violation):
 *   M_ROLLBACK_BEFORE_CLAIM  presumed abort rolls back before it claims the row (before I9)
 *   M_NO_FENCE               no owner epoch: a deposed instance keeps serving and writing
 *   M_1PC_LOST_ABORTED       a one-phase COMMIT whose answer is lost is answered aborted
 *   M_RELEASE_BEFORE_FINAL   the id goes back to the pool before the final state is durable
 *   M_PREPARED_AFTER_ENDTXN  prepared is logged after EndTxn(commit) instead of before (I2)
 *   M_1PC_NO_FENCING_MARKER  presumed abort decides a one-phase row by the absence of its
 *                            marker, with no fence against a COMMIT still on its way
 *   M_REINIT_UNLOCKED        a takeover re-initialises ids after it lost the lock (finding F1)
 *   M_DECIDED_ON_UNCLEAR     (HASDEC) a commit whose EndTxn(commit) got no answer is answered
 *                            at the decision (D1) as if Kafka had confirmed it
 *   M_DUE_MISSES_ABORTING    Due lists active/prepared/committing only: a claimed row whose
 *                            resolver crashed stays aborting forever (liveness)
 *
 * Not a mutant: M_NO_ORACLE (PRODUCER_FENCED taken as "aborted") is not caught within these
 * bounds (README); PROBE_ORACLE asserts that the oracle is never reached (it is).
 */

#ifndef N2PC
#define N2PC 2
#endif
#ifndef HAS1PC
#define HAS1PC 1
#endif
#ifndef HASB
#define HASB 1
#endif
#ifndef NK
#define NK 1
#endif
#ifndef MAXF
#define MAXF 2
#endif
#ifndef HASOFF
#define HASOFF 0        /* g0 also commits a consumer group's offsets (kafka_offsets, O1-O2) */
#endif
#ifndef MAXTK
#define MAXTK 1         /* takeovers of A by B per run */
#endif
#ifndef HASDEC
#define HASDEC 0        /* the two-phase requests ask to be answered at the decision (D1) */
#endif

#define NG   3          /* g0, g1: two-phase; g2: one-phase */
#define G1P  2
#define NONE 9

/* ---- the coordinator log (txlog): one row per global transaction ---- */
#define L_NONE       0
#define L_ACTIVE     1
#define L_PREPARED   2
#define L_COMMITTING 3
#define L_ABORTING   4  /* claimed by a resolver: outcome fixed to abort unless evidence of commit */
#define L_COMMITTED  5
#define L_ABORTED    6
#define L_HMIXED     7
#define NONFINAL(s)  ((s) >= L_ACTIVE && (s) <= L_ABORTING)
#define RESOLVED_OK  10 /* resolve's own marker: this attempt logged the final state */
#define INDOUBT(s)   ((s) == L_PREPARED || (s) == L_COMMITTING)

byte row[NG];             /* state */
byte rowk[NG] = NONE;     /* logged transactional id (prepared) */
byte rowe[NG];            /* logged producer epoch (prepared) */
byte epochA;              /* owner epoch of instance A (fencing token, I10) */

/* ---- PostgreSQL participant (sqltxn): ground truth per global transaction ---- */
#define S_NONE   0        /* nothing prepared or committed */
#define S_PREP   1        /* PREPARE TRANSACTION done */
#define S_COMMIT 2
#define S_ABORT  3        /* prepared, then rolled back */
byte sql[NG];
bit  marker[NG];          /* the marker row is visible (its transaction committed) */
#define B_IDLE 0
#define B_INFL 1          /* the batch was sent; the server may still run it */
#define B_DONE 2
byte batch[NG];
bit  fmark[NG];         /* SettleOnePhase's fencing marker (aborted = true) holds the gid */

/* ---- Kafka (transaction version 2), per transactional id ---- */
#define K_NONE   0
#define K_OPEN   1
#define K_COMMIT 2
#define K_ABORT  3
byte kout[NG];            /* ground truth of each global transaction's records */
byte kep[NK];             /* the id's current producer epoch */
byte kcur[NK] = NONE;     /* the global transaction whose Kafka transaction is open on the id */
byte kuser[NK] = NONE;    /* the global transaction that began last on the id */
byte klastep[NK];         /* epoch of the last completed transaction */
bit  klastc[NK];          /* it committed */
bit  kfresh[NK];          /* nothing began or re-initialised the id since it completed */
bit  reused[NG];          /* ghost: the id of g's Kafka transaction was reused or re-initialised */
bit  dec[NG];             /* ghost: g was answered 200 at its decision (D1) */

#define R_OK      0
#define R_ABORTED 1       /* INVALID_TXN_STATE to a commit: Kafka aborted it */
#define R_FENCED  2       /* PRODUCER_FENCED */
#define R_UNCLEAR 3       /* no answer */

/* ---- a consumer group (kafka_offsets: the third kind of Kafka participation, after records
 * and EndTxn): g0 carries the offsets of a member of generation 0 (docs/design.md O1-O2) ---- */
byte ggen;                /* the group's generation: a rebalance moves it on (Group) */
bit  gpend[NG];           /* TxnOffsetCommit accepted: g's offsets are in its Kafka transaction */
bit  gzombie[NG];         /* ghost: accepted from a member the group had moved on */
#define OFFS(g) (HASOFF && (g) == 0)
/* the group's committed offsets are g's exactly when its Kafka transaction committed them */
#define OC(g) (gpend[g] && KC(g))

/* ---- instance A (serves the requests) ---- */
#define P_UNINIT 0
#define P_FREE   1
#define P_LEASED 2
#define P_QUAR   3
byte pool[NK];            /* kafkatxn.Pool: free list, leases, quarantine */
bit  broken[NK];          /* the client is recreated (InitProducerId) before the next Begin */
bit  up;                  /* the process runs */
byte inc;                 /* incarnation: bumped by a crash (kill -9) */
bit  serving;             /* starts transactions */
byte heldA;               /* the owner epoch this incarnation holds */
byte lockA;               /* A's advisory lock: 0 free, 1 held by A, 2 held by B (takeover) */
bit  inflight[NG];        /* Coordinator.inflight */
byte quar[NG] = NONE;     /* Coordinator.quarantine: id left quarantined before prepared */

/* ---- answers ---- */
#define A_NONE  0
#define A_OK    1         /* 200 */
#define A_ABORT 2         /* 409, or 503 "safe to retry" */
#define A_DOUBT 3         /* 202 */
byte ans[NG];

byte nf;                  /* faults so far */
#define FAULT (nf < MAXF) -> nf++

#define KC(g) (kout[g] == K_COMMIT)
#define SC(g) (sql[g] == S_COMMIT)

/* Properties checked after every change (SPIN evaluates them in every reachable state). */
inline check(g) {
	/* atomicity: no global transaction committed on one side and aborted (or lost) on the other */
	assert(g == G1P || !(KC(g) && (sql[g] == S_ABORT || sql[g] == S_NONE)));
	assert(g == G1P || !(SC(g) && !KC(g)));
	/* answers: a 409/503 is never followed by a commit on either side */
	assert(ans[g] != A_ABORT || (!KC(g) && !SC(g)));
	/* the log agrees with the participants (GET tells the truth) */
	assert(row[g] != L_COMMITTED || (SC(g) && (g == G1P || KC(g))));
	assert(row[g] != L_ABORTED || (!SC(g) && !KC(g)));
	/* I1: no id reused while the transaction it served is undecided in the log */
	assert(!(reused[g] && INDOUBT(row[g])));
	/* O1: a request with offsets commits only with them (its input consumed exactly when its
	 * output commits); they commit only with its Kafka transaction, which atomicity above ties
	 * to its SQL */
	assert(!(OFFS(g) && KC(g) && !gpend[g]));
	assert(ans[g] != A_ABORT || !OC(g));
	/* O2: the offsets of a member the group had moved on never commit */
	assert(!(gzombie[g] && OC(g)));
	/* D1: a 200 given at the decision is never followed by an abort on either side, nor in
	 * the log */
	assert(!dec[g] || (kout[g] != K_ABORT && sql[g] != S_ABORT && row[g] != L_ABORTED && row[g] != L_ABORTING))
}

inline mark_reuse(k) {
	if
	:: kuser[k] != NONE -> reused[kuser[k]] = 1; check(kuser[k])
	:: else
	fi
}

/* Kafka: the open transaction on k ends aborted (EndTxn(abort), the broker's transaction
 * timeout, or InitProducerId); transaction version 2 bumps the epoch. */
inline k_abort_open(k) {
	kout[kcur[k]] = K_ABORT; check(kcur[k]);
	klastep[k] = kep[k]; klastc[k] = 0; kfresh[k] = 1;
	kcur[k] = NONE; kep[k]++
}

/* Kafka: InitProducerId (NewPool.fill, Unquarantine, Reinit, a recreated client's first
 * Begin): aborts an open transaction, bumps the epoch; old epochs are fenced from now on. */
inline k_init(k) {
	if
	:: kcur[k] != NONE -> k_abort_open(k)
	:: else
	fi;
	kep[k]++; kfresh[k] = 0;
	mark_reuse(k)
}

/* Kafka: BeginTransaction + produce on a leased id. */
inline k_begin(k, g) {
	assert(kcur[k] == NONE);   /* an id serves one open transaction */
	mark_reuse(k);
	kuser[k] = g; kcur[k] = g; kout[g] = K_OPEN; kfresh[k] = 0
}

/* Kafka: EndTxn(commit) with (id, epoch) (Txn.Commit, Pool.EndTxn): transaction version 2. */
inline k_endtxn_commit(k, e, r) {
	if
	:: kcur[k] != NONE && kep[k] == e ->
		kout[kcur[k]] = K_COMMIT; check(kcur[k]);
		klastep[k] = e; klastc[k] = 1; kfresh[k] = 1; kcur[k] = NONE; kep[k]++; r = R_OK
	:: else ->
		if
		:: kfresh[k] && klastep[k] == e && klastc[k] -> r = R_OK        /* a retry after commit */
		:: kfresh[k] && klastep[k] == e && !klastc[k] -> r = R_ABORTED  /* INVALID_TXN_STATE */
		:: else -> r = R_FENCED                                         /* reused since */
		fi
	fi
}

/* sqltxn: COMMIT PREPARED / ROLLBACK PREPARED, a missing gid resolved with the marker (I4).
 * h: the gid ended the other way (ErrHeuristic). */
inline finish_prepared(g, commit, h) {
	h = 0;
	if
	:: sql[g] == S_PREP && (commit) -> sql[g] = S_COMMIT; marker[g] = 1
	:: sql[g] == S_PREP && !(commit) -> sql[g] = S_ABORT
	:: else -> h = (marker[g] != (commit))
	fi;
	check(g)
}

/* kafkatxn.Pool.release (Txn.Release): keep returns the id, otherwise it is quarantined. */
inline release(k, keep) {
	if
	:: k != NONE && keep -> pool[k] = P_FREE
	:: k != NONE && !keep -> pool[k] = P_QUAR
	:: else
	fi
}

#define LIVE (inc == myinc)
#ifdef M_NO_FENCE
#define FENCE_OK true
#else
#define FENCE_OK (epochA == myep)
#endif
/* txlog.update: compare-and-set on the state, and (I10) on the owner epoch */
#define CAS(g, s) (row[g] == (s) && FENCE_OK)

/* TransactionalIDInDoubt: a prepared or committing row names the id */
#define ID_IN_DOUBT(k) ((rowk[0] == k && INDOUBT(row[0])) || (rowk[1] == k && INDOUBT(row[1])) || (rowk[2] == k && INDOUBT(row[2])))

/* ========================= request path (coord.Coordinator) ========================= */

inline kafkaPhase1() {
	/* Pool.Acquire: a free id, or the budget runs out waiting */
	if
	:: atomic { LIVE && (pool[0] == P_FREE || (NK > 1 && pool[NK-1] == P_FREE)) ->
		if
		:: pool[0] == P_FREE -> k = 0
		:: else -> k = NK - 1
		fi;
		pool[k] = P_LEASED }
	:: atomic { LIVE && pool[0] != P_FREE && pool[NK-1] != P_FREE }; goto abort
	fi;
	/* Txn.Begin: BeginTransaction (a recreated client sends InitProducerId first), produce */
	atomic { LIVE ->
		if
		:: broken[k] -> k_init(k); broken[k] = 0
		:: else
		fi;
		k_begin(k, g); ke = kep[k] }
#if HASOFF
	/* Txn.CommitOffsets: TxnOffsetCommit with the transaction's ids and the member's
	 * generation (0); the group refuses a member a rebalance moved on (409 naming the group) */
	if
	:: OFFS(g) ->
		if
		:: atomic { LIVE && kcur[k] == g && kep[k] == ke && ggen == 0 -> gpend[g] = 1 }
#ifdef M_IGNORE_GENERATION
		/* mutant: the commit is sent unfenced (generation -1): the group accepts it */
		:: atomic { LIVE && kcur[k] == g && kep[k] == ke && ggen != 0 -> gpend[g] = 1; gzombie[g] = 1 }
#else
		:: atomic { LIVE && ggen != 0 }; goto abort           /* fenced */
#endif
#ifdef M_REFUSED_RIDES
		/* mutant: the refusal is dropped and the request goes on without its offsets */
		:: atomic { LIVE && ggen != 0 }
#endif
		:: atomic { LIVE && !(kcur[k] == g && kep[k] == ke) -> broken[k] = 1 }; goto abort
		:: atomic { LIVE && FAULT }; goto abort               /* no answer, or the budget */
		fi
	:: else
	fi;
#endif
	/* Txn.Prepare: flush, check every record, read the producer id and epoch */
	if
	:: atomic { LIVE && kcur[k] == g && kep[k] == ke }
	:: atomic { LIVE && !(kcur[k] == g && kep[k] == ke) -> broken[k] = 1 }; goto abort
	:: atomic { LIVE && FAULT }; goto abort     /* a record failed, or the budget expired */
	fi
}

inline sqlPhase1() {
	/* sqltxn.Run: BEGIN, statements, marker row, PREPARE TRANSACTION, in one batch */
	atomic { LIVE -> batch[g] = B_INFL; sq = 1 }
	if
	:: atomic { batch[g] == B_INFL && !fmark[g] -> batch[g] = B_DONE; sql[g] = S_PREP; check(g) }  /* lands */
		if
		:: atomic { LIVE }
		:: atomic { LIVE && FAULT }; goto abort   /* answer lost: backend terminated, error */
		fi
	:: atomic { LIVE && batch[g] == B_INFL -> batch[g] = B_DONE }; goto abort  /* refused (or the fencing marker) */
	fi
}

/* Execute → drive (path alone) → phase1 → Prepared → decide → phase2 → finishWith, for a two-phase g */
proctype Request(byte g) {
	byte myinc, myep, k = NONE, ke, r;
	bit sq, h, pend;

	/* Execute: the instance serves; InFlight from before the row exists */
	atomic { serving -> myinc = inc; myep = heldA; inflight[g] = 1 }
	/* txlog.Begin (fenced) */
	if
	:: atomic { LIVE && CAS(g, L_NONE) -> row[g] = L_ACTIVE }
	:: atomic { LIVE && !CAS(g, L_NONE) -> ans[g] = A_ABORT; inflight[g] = 0 }; goto done  /* 503 */
	fi;

	/* phase1: kafkaPhase1 ∥ sqlPhase1, in either order */
	if
	:: kafkaPhase1(); sqlPhase1()
	:: sqlPhase1(); kafkaPhase1()
	fi;

#ifdef M_PREPARED_AFTER_ENDTXN
	goto decide;
logprepared:
#endif
	/* txlog.Prepared (I2): CAS active → prepared with the Kafka ids, fenced */
	if
	:: atomic { CAS(g, L_ACTIVE) -> row[g] = L_PREPARED; rowk[g] = k; rowe[g] = ke; check(g) }
		if
		:: atomic { LIVE }
#ifdef M_ABORT_ON_LOST_PREPARED
		:: atomic { LIVE && FAULT }; goto abort   /* mutant: a lost answer taken for a refusal */
#else
		:: atomic { LIVE && FAULT }; goto indoubtActive   /* landed, answer lost */
#endif
		fi
	:: atomic { LIVE && !CAS(g, L_ACTIVE) }; goto indoubtActive   /* claimed or fenced */
	:: atomic { LIVE && FAULT -> pend = 1 }; goto indoubtActive    /* no answer; may land later */
	:: atomic { LIVE && FAULT }; goto abort   /* refused by the server (ErrLogRefused): nothing written */
	fi;
#ifdef M_PREPARED_AFTER_ENDTXN
	goto phase2;
#endif

decide:
	/* decide: Txn.Commit = EndTxn(commit) by the producer: the global decision */
	if
	:: atomic { k_endtxn_commit(k, ke, r) }
		if
		:: atomic { LIVE }
		:: atomic { LIVE && FAULT -> r = R_UNCLEAR }
		fi
	:: atomic { LIVE && FAULT -> r = R_UNCLEAR }
	fi;
#ifdef M_DECIDED_ON_UNCLEAR
	/* mutant: a commit whose EndTxn went unanswered is answered as decided */
	if
	:: r == R_UNCLEAR -> atomic { LIVE -> dec[g] = 1; check(g) }
	:: else
	fi;
#endif
	/* decide: an unclear answer (or PRODUCER_FENCED) is retried once by ids (Pool.EndTxn),
	 * then the budget has run out: in doubt */
	if
	:: r == R_UNCLEAR || r == R_FENCED ->
		if
		:: atomic { LIVE -> k_endtxn_commit(k, ke, r) }
		:: atomic { LIVE }; goto indoubtPrepared
		fi;
		if
		:: r == R_OK || r == R_ABORTED
		:: else -> goto indoubtPrepared
		fi
	:: else
	fi;
#if HASDEC
	/* drive, answerDecided (D1): a commit is answered now, phase 2 and the final write behind it */
	if
	:: r == R_OK -> atomic { LIVE -> dec[g] = 1; check(g) }
	:: else
	fi;
#endif
#ifdef M_PREPARED_AFTER_ENDTXN
	if
	:: r == R_OK -> goto logprepared
	:: else -> goto phase2
	fi;
#endif

phase2:
	/* phase2: COMMIT PREPARED / ROLLBACK PREPARED following the decision (I4) */
	if
	:: atomic { LIVE -> finish_prepared(g, r == R_OK, h) }
	:: atomic { LIVE && FAULT }
		if
		:: r == R_OK ->   /* Kafka committed, SQL pending: log committing for recovery */
			atomic { LIVE -> if :: CAS(g, L_PREPARED) -> row[g] = L_COMMITTING; check(g) :: else fi }
		:: else
		fi;
		goto indoubtPrepared
	fi;
#ifdef M_RELEASE_BEFORE_FINAL
	atomic { LIVE -> release(k, 1) }
#endif
	/* finals.go: committed on both sides, the request is answered before its final write */
	if
	:: atomic { LIVE && !h && r == R_OK ->
		assert(SC(g) && KC(g)); ans[g] = A_OK }   /* 200 means committed on both sides */
	:: else
	fi;
	/* finishWith: the final log write, then Release (I1); the id and the in-flight mark are
	   the write's until it ends */
	if
	:: atomic { LIVE && CAS(g, L_PREPARED) ->
		if
		:: h -> row[g] = L_HMIXED; ans[g] = A_DOUBT
		:: !h && r == R_OK -> row[g] = L_COMMITTED
		:: !h && r != R_OK -> row[g] = L_ABORTED; ans[g] = A_ABORT
		fi;
		release(k, 1); inflight[g] = 0; check(g) }
	:: atomic { LIVE && !CAS(g, L_PREPARED) -> release(k, 0);
		if :: ans[g] == A_NONE -> ans[g] = A_DOUBT :: else fi; inflight[g] = 0 }
	fi;
	goto done;

abort:
	/* abort: Kafka first (Txn.Abort, bounded), then ROLLBACK PREPARED, then finishWith */
	if
	:: k != NONE ->
		if
		:: atomic { LIVE -> if :: kcur[k] == g && kep[k] == ke -> k_abort_open(k) :: else fi }
		:: atomic { LIVE && FAULT -> broken[k] = 1 }   /* abort failed: re-init before reuse */
		fi
	:: else
	fi;
	if
	:: sq -> atomic { LIVE -> finish_prepared(g, 0, h) }
	:: else
	fi;
	/* finishWith(aborted): the final log write, then Release */
	if
	:: atomic { LIVE && CAS(g, L_ACTIVE) -> row[g] = L_ABORTED; ans[g] = A_ABORT;
		release(k, 1); inflight[g] = 0; check(g) }
	:: atomic { LIVE && !CAS(g, L_ACTIVE) -> release(k, 0); ans[g] = A_DOUBT; inflight[g] = 0 }
	fi;
	goto done;

indoubtActive:
	/* inDoubt before prepared is known: the id is remembered for recovery's release */
	atomic { LIVE -> quar[g] = k; release(k, 0); ans[g] = A_DOUBT; inflight[g] = 0 }
	if
	:: pend -> atomic { CAS(g, L_ACTIVE) -> row[g] = L_PREPARED; rowk[g] = k; rowe[g] = ke; check(g) }
	:: else
	fi;
	goto done;

indoubtPrepared:
	atomic { LIVE -> release(k, 0); ans[g] = A_DOUBT; inflight[g] = 0 }
done:
	atomic { myinc = 0; myep = 0; k = 0; ke = 0; r = 0; sq = 0; h = 0; pend = 0 }
}

/* The one-phase path: one database, no Kafka: COMMIT with a marker row. */
proctype OnePhase() {
	byte myinc, myep, g = G1P;

	atomic { serving -> myinc = inc; myep = heldA; inflight[g] = 1 }
	/* txlog.Begin */
	if
	:: atomic { LIVE && CAS(g, L_NONE) -> row[g] = L_ACTIVE }
	:: atomic { LIVE && !CAS(g, L_NONE) -> ans[g] = A_ABORT; inflight[g] = 0 }; goto done
	fi;
	/* sqlPhase1 → sqltxn.Run with onePhase: BEGIN, statements, marker row, COMMIT */
	atomic { LIVE -> batch[g] = B_INFL }
	if
	:: atomic { batch[g] == B_INFL && !fmark[g] -> batch[g] = B_DONE; sql[g] = S_COMMIT; marker[g] = 1; check(g) }
		if
		:: atomic { LIVE }
			/* finishWith(committed), answered before the final write (finals.go) */
			atomic { LIVE -> assert(SC(g)); ans[g] = A_OK }
			if
			:: atomic { LIVE && CAS(g, L_ACTIVE) -> row[g] = L_COMMITTED; inflight[g] = 0; check(g) }
			:: atomic { LIVE && !CAS(g, L_ACTIVE) -> inflight[g] = 0 }
			fi;
			goto done
		:: atomic { LIVE && FAULT }; goto lost          /* COMMIT's answer lost */
		fi
	:: atomic { LIVE && batch[g] == B_INFL -> batch[g] = B_DONE }   /* refused by the database */
		goto abort
	:: atomic { LIVE && batch[g] == B_INFL && FAULT -> batch[g] = B_DONE }; goto lost  /* cut off */
	fi;
lost:
#ifdef M_1PC_LOST_ABORTED
	goto abort;
#else
	/* I11: no evidence either way: in doubt (202) until the marker decides */
	atomic { LIVE -> ans[g] = A_DOUBT; inflight[g] = 0 }
	goto done;
#endif
abort:
	/* abort → finishWith(aborted) */
	if
	:: atomic { LIVE && CAS(g, L_ACTIVE) -> row[g] = L_ABORTED; ans[g] = A_ABORT; inflight[g] = 0; check(g) }
	:: atomic { LIVE && !CAS(g, L_ACTIVE) -> ans[g] = A_DOUBT; inflight[g] = 0 }
	fi;
done:
	atomic { myinc = 0; myep = 0 }
}

/* ============================== recovery (recovery.Loop) ============================== */

/* resolve: re-read the row (GetGID) after the in-flight check, then decide and log.
 * own: this instance's own row (InFlight check, release); otherwise a takeover. */
inline resolve(g, own) {
	atomic {
		s = row[g]; k = rowk[g]; e = rowe[g];
		if
		:: own && inflight[g] -> s = L_NONE   /* a live request runs it */
		:: !NONFINAL(s) -> s = L_NONE         /* final: errMovedOn */
		:: else
		fi
	}
	if
	:: s == L_ACTIVE || s == L_ABORTING ->
#ifdef M_ROLLBACK_BEFORE_CLAIM
		/* presumedAbort first, then the CAS active → aborted (the code before I9) */
		atomic { finish_prepared(g, 0, h) }
		atomic { if :: row[g] == s -> row[g] = (h -> L_COMMITTED : L_ABORTED); check(g); s = RESOLVED_OK
		         :: else -> s = L_NONE fi }
#else
		/* txlog.Claim: active → aborting (compare-and-set): the row is the resolver's */
		if
		:: s == L_ACTIVE ->
			atomic { if :: row[g] == L_ACTIVE -> row[g] = L_ABORTING; s = L_ABORTING
			         :: else -> s = L_NONE fi }
		:: else
		fi;
		if
		:: s == L_ABORTING ->
			/* presumedAbort: ROLLBACK PREPARED each gid; a one-phase row is decided by
			 * SettleOnePhase: its marker means committed, otherwise a fencing marker
			 * (aborted = true) takes the gid, so a COMMIT still on its way fails */
			atomic { finish_prepared(g, 0, h);
#ifndef M_1PC_NO_FENCING_MARKER
				if :: g == G1P && !h -> fmark[g] = 1 :: else fi
#endif
			}
			/* Transition aborting → aborted | committed */
			atomic { if :: row[g] == L_ABORTING -> row[g] = (h -> L_COMMITTED : L_ABORTED); check(g); s = RESOLVED_OK
			         :: else -> s = L_NONE fi }
		:: else
		fi
#endif
	:: s == L_PREPARED ->
		/* resumePrepared: EndTxn(commit) by the stored ids */
		if
		:: atomic { k_endtxn_commit(k, e, r) }
		:: atomic { FAULT -> r = R_UNCLEAR }
		fi;
		if
		:: r == R_FENCED ->
#ifdef PROBE_ORACLE
			assert(false);   /* probe: is the outcome oracle ever needed? */
#endif
#ifdef M_NO_ORACLE
			r = R_ABORTED
#else
			/* kafkatxn.Pool.Outcome: read the logged offsets back with read_committed */
			atomic { if :: kout[g] == K_COMMIT -> r = R_OK
			         :: kout[g] == K_ABORT -> r = R_ABORTED
			         :: else -> r = R_UNCLEAR fi }   /* still open: later */
#endif
		:: else
		fi;
		if
		:: r == R_OK || r == R_ABORTED ->
			/* phase2 */
			atomic { finish_prepared(g, r == R_OK, h) }
			atomic { if :: row[g] == L_PREPARED ->
				row[g] = (h -> L_HMIXED : (r == R_OK -> L_COMMITTED : L_ABORTED)); check(g); s = RESOLVED_OK
			         :: else -> s = L_NONE fi }
		:: else -> s = L_NONE   /* unclear: RecordAttempt, retry after backoff */
		fi
	:: s == L_COMMITTING ->
		atomic { finish_prepared(g, 1, h) }
		atomic { if :: row[g] == L_COMMITTING -> row[g] = (h -> L_HMIXED : L_COMMITTED); check(g); s = RESOLVED_OK
		         :: else -> s = L_NONE fi }
	:: else
	fi;
	/* release: the id back to the pool once no in-doubt row names it (TakeQuarantined,
	 * TransactionalIDInDoubt, Unquarantine) */
	atomic {
		if
		:: own && s == RESOLVED_OK ->
			k = quar[g]; quar[g] = NONE;
			if :: k == NONE -> k = rowk[g] :: else fi;
			if
			:: k != NONE && pool[k] == P_QUAR && !ID_IN_DOUBT(k) -> k_init(k); broken[k] = 0; pool[k] = P_FREE
			:: else
			fi
		:: else
		fi;
		s = 0; k = 0; e = 0; r = 0; h = 0 }
}

/* txlog.Due: the states recovery resolves */
#ifdef M_DUE_MISSES_ABORTING
#define DUE(s) ((s) == L_ACTIVE || (s) == L_PREPARED || (s) == L_COMMITTING)
#else
#define DUE(s) NONFINAL(s)
#endif

/* resolveDue over every row of instance A */
inline resolveDue(own) {
	/* Due: the next row (in gid order) that is not final, and not in flight here */
	g = 0;
	do
	:: atomic {
		do
		:: g < NG && !(DUE(row[g]) && !(own && inflight[g])) -> g++
		:: else -> break
		od;
		if
		:: g >= NG -> g = 0; break
		:: else
		fi }
		resolve(g, own); g++
	od
}

/* orphans: a prepared gid follows its row's final state (no row: rolled back) */
inline orphans() {
	atomic {
		g = 0;
		do
		:: g < NG ->
			if
			:: sql[g] == S_PREP && (row[g] == L_COMMITTED) -> finish_prepared(g, 1, h)
			:: sql[g] == S_PREP && (row[g] == L_ABORTED || row[g] == L_NONE) -> finish_prepared(g, 0, h)
			:: else
			fi;
			g++
		:: else -> break
		od
	}
}

/* sweepMarkers: markers of final rows no longer prove anything */
inline sweepMarkers() {
	atomic {
		g = 0;
		do
		:: g < NG -> if :: marker[g] && (row[g] == L_COMMITTED || row[g] == L_ABORTED) -> marker[g] = 0 :: else fi; g++
		:: else -> break
		od
	}
}

/* Instance A's recovery loop: Claim at (re)start, the startup pass, NewPool.fill, then
 * RunOnce passes (keepOwnership, resolveDue, orphans, sweepMarkers) until it crashes. */
proctype RecoveryA() {
	byte myinc, g, k, e, s, r;
	bit h;
restart:
	/* Claim (owner.go): the instance lock; the owner epoch is bumped */
	atomic { !up && lockA == 0 -> lockA = 1; epochA++; heldA = epochA; up = 1; myinc = inc }
	{
		resolveDue(1);
		orphans();
		/* NewPool.fill: InitProducerId on every id no in-doubt row names (I6) */
		atomic {
			k = 0;
			do
			:: k < NK ->
				if
				:: ID_IN_DOUBT(k) -> pool[k] = P_QUAR
				:: else -> k_init(k); broken[k] = 0; pool[k] = P_FREE
				fi;
				k++
			:: else -> break
			od;
			serving = 1 }
end_loop:
		do
		:: lockA != 1 ->
			/* keepOwnership: the session (and lock) is gone: stop serving, re-claim */
#ifndef M_NO_FENCE
			serving = 0;
#endif
			atomic { lockA == 0 -> lockA = 1; epochA++; heldA = epochA; serving = 1 }
		:: resolveDue(1); atomic { orphans(); sweepMarkers() }
		od
	} unless { inc != myinc };
	goto restart
}

/* Instance B: takeover of A (I8): TryLock A's lock, bump A's owner epoch, resolve A's rows,
 * re-initialise A's ids that no in-doubt row names (Reinit), Unlock. */
proctype RecoveryB() {
	byte g, k, e, s, r, ids, tk;
	bit h;
end_loop:
	do
	:: atomic { tk < MAXTK && lockA == 0 -> lockA = 2; tk++;
#ifndef M_NO_FENCE
		epochA++
#endif
		}
		resolveDue(0);
		/* takeOver: TransactionalIDInDoubt for every id, then Reinit the others */
		atomic { ids = 0; k = 0;
			do
			:: k < NK -> if :: !ID_IN_DOUBT(k) -> ids = ids | (1 << k) :: else fi; k++
			:: else -> break
			od }
		k = 0;
		do
#ifdef M_REINIT_UNLOCKED
		:: k < NK -> atomic { if :: ids & (1 << k) -> k_init(k) :: else fi; k++ }
#else
		/* Reinit only while A's lock is still B's (finding F1: takeOver must check it) */
		:: k < NK -> atomic { if :: ids & (1 << k) && lockA == 2 -> k_init(k) :: else fi; k++ }
#endif
		:: else -> break
		od;
		atomic { if :: lockA == 2 -> lockA = 0 :: else fi }
	od
}

/* The Kafka broker aborts a transaction left open longer than its transaction timeout. */
proctype Broker() {
end_loop:
	do
	:: atomic { kcur[0] != NONE -> k_abort_open(0) }
	:: atomic { kcur[NK-1] != NONE -> k_abort_open(NK-1) }
	od
}

#if HASOFF
/* The group rebalances once: the member of generation 0 is moved on (KIP-447's zombie). */
proctype Group() {
	atomic { ggen == 0 -> ggen = 1 }
}
#endif

/* Faults: A killed (-9), A's lock session lost (PostgreSQL restart, terminated, network),
 * B's lock session lost in the middle of a takeover. */
proctype Faults() {
end_loop:
	do
	:: atomic { up && FAULT ->
		up = 0; serving = 0; inc++;
		if :: lockA == 1 -> lockA = 0 :: else fi;
		inflight[0] = 0; inflight[1] = 0; inflight[2] = 0;
		quar[0] = NONE; quar[1] = NONE; quar[2] = NONE;
		pool[0] = P_UNINIT; pool[NK-1] = P_UNINIT; broken[0] = 0; broken[NK-1] = 0 }
	:: atomic { lockA == 1 && FAULT -> lockA = 0 }
	:: atomic { lockA == 2 && FAULT -> lockA = 0 }
	od
}

#define RESOLVED(g) (!NONFINAL(row[g]))
#ifdef LIVENESS
/* progress: once faults stop, every in-doubt transaction is resolved (weak fairness: -f) */
ltl resolved { <> [] (RESOLVED(0) && RESOLVED(1) && RESOLVED(2)) }
#endif

init {
	atomic {
		run RecoveryA();
		run Request(0);
#if N2PC > 1
		run Request(1);
#endif
#if HAS1PC
		run OnePhase();
#endif
#if HASB
		run RecoveryB();
#endif
#if HASOFF
		run Group();
#endif
		run Broker();
		run Faults()
	}
}
