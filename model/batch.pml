/*
 * batch.pml: the commit protocol with shared Kafka transactions (docs/batching.md),
 * as a Promela model checked with SPIN (model/check-batch.sh).
 *
 * It is kpgtx.pml's model of one instance (A) with its recovery loop, restricted to two-phase
 * requests, with one change: requests whose SQL side is prepared join a batch; the batch's
 * leader runs one Kafka transaction for all its members, logs them prepared in one write
 * carrying the shared (transactional id, producer id, epoch), sends one EndTxn, and runs
 * phase 2 per member; recovery decides every row that names the same ids together. Names,
 * states and properties are kpgtx.pml's; model/README.md explains the method.
 *
 *   NR       requests (two-phase): 2 or 3; with 3, two may share a batch while the third
 *            waits for the id (reuse)
 *   NK       transactional ids in A's pool (1 forces reuse)
 *   MAXF     faults per run: kill -9 of A, A's lock session lost, a lost answer, a record that
 *            fails, a lost EndTxn answer, a failed COMMIT PREPARED
 *   SQLFAIL  mask of the requests whose SQL may be refused (default: request 1)
 *
 * Mutants (each must make SPIN report a violation):
 *   M_JOIN_BEFORE_PREPARED  a request joins the open batch before its SQL is prepared
 *   M_RELEASE_FIRST_FINAL   the shared id goes back to the pool when the first member is final
 *   M_ONE_BY_ONE            members are logged prepared one by one, and EndTxn is sent after
 *                           the first member's write
 *   M_RELEASE_PER_MEMBER    recovery gives a batch's quarantined id back when it resolves the
 *                           first member that remembered it (finding B1)
 *
 * Probes (each must be violated, showing the path is reachable, so the checks are not vacuous):
 *   PROBE_SHARED_COMMIT     a member of a batch of two commits (200)
 *   PROBE_REPRODUCE         a member re-produced after another member's record failed commits
 *   PROBE_GROUP_RECOVERY    recovery commits two rows with one EndTxn by their shared ids
 */

#ifndef NR
#define NR 2
#endif
#ifndef NK
#define NK 1
#endif
#ifndef MAXF
#define MAXF 2
#endif
#ifndef SQLFAIL
#define SQLFAIL 2
#endif

#define NG   3          /* rows; requests 0 .. NR-1 run */
#define NONE 9
#define BIT(g) (1 << (g))
#define LOW(m) (((m) & 1) -> 0 : (((m) & 2) -> 1 : 2))

/* ---- the coordinator log (txlog): one row per global transaction ---- */
#define L_NONE       0
#define L_ACTIVE     1
#define L_PREPARED   2
#define L_COMMITTING 3
#define L_ABORTING   4
#define L_COMMITTED  5
#define L_ABORTED    6
#define L_HMIXED     7
#define NONFINAL(s)  ((s) >= L_ACTIVE && (s) <= L_ABORTING)
#define INDOUBT(s)   ((s) == L_PREPARED || (s) == L_COMMITTING)

byte row[NG];
byte rowk[NG] = NONE;     /* logged transactional id (prepared): shared by a batch's members */
byte rowe[NG];            /* logged producer epoch (prepared): shared by a batch's members */
byte epochA;              /* owner epoch of instance A (fencing) */

/* ---- PostgreSQL participant ---- */
#define S_NONE   0
#define S_PREP   1
#define S_COMMIT 2
#define S_ABORT  3
byte sql[NG];
bit  marker[NG];
#define B_IDLE 0
#define B_INFL 1
#define B_DONE 2
byte sb[NG];              /* the sqltxn.Run batch: sent, may still land */

/* ---- Kafka (transaction version 2), per transactional id; one transaction carries the
 * records of every member of a batch ---- */
#define K_NONE   0
#define K_OPEN   1
#define K_COMMIT 2
#define K_ABORT  3
byte kout[NG];            /* ground truth of each request's records */
byte kep[NK];             /* the id's current producer epoch */
byte kmem[NK];            /* members (mask) of the transaction open on the id; 0: none */
byte kuser[NK];           /* members of the transaction that began last on the id */
byte klastep[NK];
bit  klastc[NK];
bit  kfresh[NK];
bit  reused[NG];          /* ghost: the id of g's Kafka transaction was reused or re-initialised */

#define R_OK      0
#define R_ABORTED 1
#define R_FENCED  2
#define R_UNCLEAR 3

/* ---- instance A ---- */
#define P_UNINIT 0
#define P_FREE   1
#define P_LEASED 2
#define P_QUAR   3
byte pool[NK];
bit  broken[NK];
bit  up;
byte inc;
bit  serving;
byte heldA;
byte lockA;               /* 0 free, 1 held by A */
bit  inflight[NG];
byte quar[NG] = NONE;

/* ---- the batcher (in memory): the open batch and its members ---- */
byte openb = NONE;        /* the leader of the batch still open for joining */
byte bmem;                /* its members so far (mask) */

/* ---- answers ---- */
#define A_NONE  0
#define A_OK    1
#define A_ABORT 2
#define A_DOUBT 3
byte ans[NG];

bit  reprod;              /* probe: a batch was re-produced after a record failed */

byte nf;
#define FAULT (nf < MAXF) -> nf++

#define KC(g) (kout[g] == K_COMMIT)
#define SC(g) (sql[g] == S_COMMIT)

inline check(g) {
	/* atomicity: no request committed on one side and aborted (or never prepared) on the other;
	 * in particular a request whose SQL failed never rides in a Kafka transaction that commits */
	assert(!(KC(g) && (sql[g] == S_ABORT || sql[g] == S_NONE)));
	assert(!(SC(g) && !KC(g)));
	/* answers: 409 is never followed by a commit on either side */
	assert(ans[g] != A_ABORT || (!KC(g) && !SC(g)));
	/* the log agrees with the participants */
	assert(row[g] != L_COMMITTED || (SC(g) && KC(g)));
	assert(row[g] != L_ABORTED || (!SC(g) && !KC(g)));
	/* I1: no id reused while any transaction it served is undecided in the log */
	assert(!(reused[g] && INDOUBT(row[g])))
}

/* kout of every member of m becomes v */
inline kset(m, v) {
	if :: (m) & 1 -> kout[0] = v; check(0) :: else fi;
	if :: (m) & 2 -> kout[1] = v; check(1) :: else fi;
	if :: (m) & 4 -> kout[2] = v; check(2) :: else fi
}

inline mark_reuse(k) {
	if :: kuser[k] & 1 -> reused[0] = 1; check(0) :: else fi;
	if :: kuser[k] & 2 -> reused[1] = 1; check(1) :: else fi;
	if :: kuser[k] & 4 -> reused[2] = 1; check(2) :: else fi
}

/* Kafka: the open transaction on k ends aborted (EndTxn(abort), timeout, InitProducerId):
 * every member's records are aborted together; the epoch is bumped */
inline k_abort_open(k) {
	kset(kmem[k], K_ABORT);
	klastep[k] = kep[k]; klastc[k] = 0; kfresh[k] = 1;
	kmem[k] = 0; kep[k]++
}

inline k_init(k) {
	if
	:: kmem[k] != 0 -> k_abort_open(k)
	:: else
	fi;
	kep[k]++; kfresh[k] = 0;
	mark_reuse(k)
}

/* Kafka: BeginTransaction + produce every member's records on a leased id */
inline k_begin(k, m) {
	assert(kmem[k] == 0);      /* an id serves one open transaction */
	mark_reuse(k);
	/* members re-produced after an aborted attempt start a new Kafka transaction */
	if :: (m) & 1 -> reused[0] = 0 :: else fi;
	if :: (m) & 2 -> reused[1] = 0 :: else fi;
	if :: (m) & 4 -> reused[2] = 0 :: else fi;
	kuser[k] = m; kmem[k] = m; kset(m, K_OPEN); kfresh[k] = 0
}

/* Kafka: EndTxn(commit) by (id, epoch): decides every member of the transaction at once */
inline k_endtxn_commit(k, e, r) {
	if
	:: kmem[k] != 0 && kep[k] == e ->
		kset(kmem[k], K_COMMIT);
		klastep[k] = e; klastc[k] = 1; kfresh[k] = 1; kmem[k] = 0; kep[k]++; r = R_OK
	:: else ->
		if
		:: kfresh[k] && klastep[k] == e && klastc[k] -> r = R_OK
		:: kfresh[k] && klastep[k] == e && !klastc[k] -> r = R_ABORTED
		:: else -> r = R_FENCED
		fi
	fi
}

inline finish_prepared(g, commit, h) {
	h = 0;
	if
	:: sql[g] == S_PREP && (commit) -> sql[g] = S_COMMIT; marker[g] = 1
	:: sql[g] == S_PREP && !(commit) -> sql[g] = S_ABORT
	:: else -> h = (marker[g] != (commit))
	fi;
	check(g)
}

inline release(k, keep) {
	if
	:: k != NONE && keep -> pool[k] = P_FREE
	:: k != NONE && !keep -> pool[k] = P_QUAR
	:: else
	fi
}

#define LIVE (inc == myinc)
#define FENCE_OK (epochA == myep)
#define CAS(g, s) (row[g] == (s) && FENCE_OK)
#define ID_IN_DOUBT(k) ((rowk[0] == k && INDOUBT(row[0])) || (rowk[1] == k && INDOUBT(row[1])) || (rowk[2] == k && INDOUBT(row[2])))

/* Coordinator.TakeQuarantined for a shared id (finding B1, docs/batching.md): the id left
 * quarantined by a batch in doubt goes back only when no member still remembers it; releasing
 * it at the first member's resolution lets a later member's stale entry release it again
 * after it served another batch (M_RELEASE_PER_MEMBER) */
#ifdef M_RELEASE_PER_MEMBER
#define QUAR_NAMES(k) false
#else
#define QUAR_NAMES(k) (quar[0] == k || quar[1] == k || quar[2] == k)
#endif

/* the batch's prepared write: one statement, all members or none (txlog group commit) */
#define ALLACTIVE(m) ((((m) & 1) == 0 || row[0] == L_ACTIVE) && (((m) & 2) == 0 || row[1] == L_ACTIVE) && (((m) & 4) == 0 || row[2] == L_ACTIVE))
inline log_prepared(m) {
	if :: (m) & 1 -> row[0] = L_PREPARED; rowk[0] = k; rowe[0] = ke; check(0) :: else fi;
	if :: (m) & 2 -> row[1] = L_PREPARED; rowk[1] = k; rowe[1] = ke; check(1) :: else fi;
	if :: (m) & 4 -> row[2] = L_PREPARED; rowk[2] = k; rowe[2] = ke; check(2) :: else fi
}
inline members_done(m, a) {
	if :: (m) & 1 -> inflight[0] = 0; if :: a != A_NONE -> ans[0] = a; quar[0] = k :: else fi :: else fi;
	if :: (m) & 2 -> inflight[1] = 0; if :: a != A_NONE -> ans[1] = a; quar[1] = k :: else fi :: else fi;
	if :: (m) & 4 -> inflight[2] = 0; if :: a != A_NONE -> ans[2] = a; quar[2] = k :: else fi :: else fi
}

/* ========================= request path (coord.Coordinator) ========================= */

proctype Request(byte g) {
	byte myinc, myep, k = NONE, ke, r, m, left, i, pm;
	bit sq, h, pend, bad, rel, early;

	atomic { serving -> myinc = inc; myep = heldA; inflight[g] = 1 }
	/* txlog.Begin (fenced) */
	if
	:: atomic { LIVE && CAS(g, L_NONE) -> row[g] = L_ACTIVE }
	:: atomic { LIVE && !CAS(g, L_NONE) -> ans[g] = A_ABORT; inflight[g] = 0 }; goto done
	fi;

#ifdef M_JOIN_BEFORE_PREPARED
	/* the mutant: join the open batch first, prepare SQL meanwhile */
	if
	:: atomic { LIVE && openb != NONE -> bmem = bmem | BIT(g); early = 1 }
	:: atomic { LIVE }
	fi;
#endif

	/* sqltxn.Run: BEGIN, statements, marker row, PREPARE TRANSACTION, in one batch */
	atomic { LIVE -> sb[g] = B_INFL; sq = 1 }
	if
	:: atomic { sb[g] == B_INFL -> sb[g] = B_DONE; sql[g] = S_PREP; check(g) }
		if
		:: atomic { LIVE }
		:: atomic { LIVE && FAULT }; goto solo      /* answer lost */
		fi
	:: atomic { LIVE && sb[g] == B_INFL && (SQLFAIL & BIT(g)) -> sb[g] = B_DONE }; goto solo  /* refused */
	fi;
#ifdef M_JOIN_BEFORE_PREPARED
	if :: early -> goto done :: else fi;
#endif

	/* join: only now, with its SQL prepared, does a request enter a batch; the first one
	 * opens the batch and leads it */
	if
	:: atomic { LIVE && openb != NONE -> bmem = bmem | BIT(g) }; goto done   /* the leader answers */
	:: atomic { LIVE && openb == NONE -> openb = g; bmem = BIT(g) }
	fi;

	/* ---------------- leader ---------------- */
	/* seal: at once when alone (c=1), when the members are prepared, or after a small bound;
	 * any moment is possible here */
	atomic { LIVE -> m = bmem; openb = NONE; bmem = 0 }
	/* Pool.Acquire (or the budget runs out waiting for an id) */
	if
	:: atomic { LIVE && (pool[0] == P_FREE || (NK > 1 && pool[NK-1] == P_FREE)) ->
		if
		:: pool[0] == P_FREE -> k = 0
		:: else -> k = NK - 1
		fi;
		pool[k] = P_LEASED }
	:: atomic { LIVE && pool[0] != P_FREE && pool[NK-1] != P_FREE }; goto abortAll
	fi;
produce:
	/* Txn.Begin: one Kafka transaction, every member's records */
	atomic { LIVE ->
		if
		:: broken[k] -> k_init(k); broken[k] = 0
		:: else
		fi;
		k_begin(k, m); ke = kep[k] }
	/* Txn.Prepare: flush, check every record */
	if
	:: atomic { LIVE && kmem[k] == m && kep[k] == ke }
	:: atomic { LIVE && !(kmem[k] == m && kep[k] == ke) -> broken[k] = 1 }; goto abortAll  /* timed out */
	:: atomic { LIVE && FAULT ->
		/* one member's record failed: the Kafka transaction is aborted; that member aborts
		 * alone; the others are re-produced in a fresh transaction, their SQL stays prepared */
		i = LOW(m);
		if
		:: m & 2 && i != 1 -> i = 1
		:: m & 4 && i != 2 -> i = 2
		:: true
		fi;
		if :: kmem[k] == m && kep[k] == ke -> k_abort_open(k) :: else fi }
		atomic { LIVE -> finish_prepared(i, 0, h) }
		atomic { LIVE ->
			if
			:: CAS(i, L_ACTIVE) -> row[i] = L_ABORTED; ans[i] = A_ABORT; check(i)
			:: else -> ans[i] = A_DOUBT
			fi;
			inflight[i] = 0; m = m & ~BIT(i); i = 0 }
		if
		:: m != 0 -> reprod = 1; goto produce
		:: else -> atomic { LIVE -> release(k, 1) }; goto done
		fi
	fi;

	/* txlog.Prepared for the batch: one group-committed write, every member prepared with the
	 * shared (transactional id, producer id, epoch), or none (I2) */
#ifdef M_ONE_BY_ONE
	pm = BIT(LOW(m));      /* the mutant: the first member's write only, then EndTxn */
#else
	pm = m;
#endif
	if
	:: atomic { ALLACTIVE(pm) && FENCE_OK -> log_prepared(pm) }
		if
		:: atomic { LIVE }
		:: atomic { LIVE && FAULT }; goto indoubtActive   /* landed, answer lost */
		fi
	:: atomic { LIVE && !(ALLACTIVE(pm) && FENCE_OK) }; goto indoubtActive   /* claimed or fenced */
	:: atomic { LIVE && FAULT -> pend = 1 }; goto indoubtActive    /* no answer; may land later */
	:: atomic { LIVE && FAULT }; goto abortAll   /* refused by the server (ErrLogRefused): nothing written */
	fi;

	/* decide: one EndTxn(commit) for the whole batch, one retry by ids, then in doubt */
	if
	:: atomic { k_endtxn_commit(k, ke, r) }
		if
		:: atomic { LIVE }
		:: atomic { LIVE && FAULT -> r = R_UNCLEAR }
		fi
	:: atomic { LIVE && FAULT -> r = R_UNCLEAR }
	fi;
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
#ifdef M_ONE_BY_ONE
	/* the other members' writes, after EndTxn */
	atomic { LIVE && ALLACTIVE(m & ~pm) && FENCE_OK -> log_prepared(m & ~pm) }
#endif

	/* phase 2 per member, then its final log write */
	left = m;
	do
	:: left == 0 -> break
	:: else ->
		i = LOW(left);
		if
		:: atomic { LIVE -> finish_prepared(i, r == R_OK, h) }
			/* finals.go: committed on both sides, answered before the final write */
			if
			:: atomic { LIVE && !h && r == R_OK -> assert(SC(i) && KC(i)); ans[i] = A_OK }
			:: else
			fi;
			if
			:: atomic { LIVE && CAS(i, L_PREPARED) ->
				if
				:: h -> row[i] = L_HMIXED; ans[i] = A_DOUBT
				:: !h && r == R_OK -> row[i] = L_COMMITTED;
#ifdef PROBE_SHARED_COMMIT
					assert(m == BIT(i));
#endif
#ifdef PROBE_REPRODUCE
					assert(!reprod);
#endif
					skip
				:: !h && r != R_OK -> row[i] = L_ABORTED; ans[i] = A_ABORT
				fi;
				check(i) }
			:: atomic { LIVE && !CAS(i, L_PREPARED) ->
				if :: ans[i] == A_NONE -> ans[i] = A_DOUBT :: else fi; bad = 1 }
			fi
		:: atomic { LIVE && FAULT }
			if
			:: r == R_OK ->
				atomic { LIVE -> if :: CAS(i, L_PREPARED) -> row[i] = L_COMMITTING; check(i) :: else fi }
			:: else
			fi;
			atomic { LIVE -> ans[i] = A_DOUBT; bad = 1 }
		fi;
#ifdef M_RELEASE_FIRST_FINAL
		atomic { LIVE -> if :: !rel -> rel = 1; release(k, 1) :: else fi }
#endif
		atomic { left = left & ~BIT(i); h = 0 }
	od;
	/* Release (I1): once every member's final state is durable; a member in doubt keeps the
	 * id quarantined. Members stay in flight until then, so recovery waits for the batch. */
	atomic { LIVE -> if :: !rel -> release(k, !bad) :: else fi; members_done(m, A_NONE) }
	goto done;

abortAll:
	/* before prepared: Kafka first, then every member's ROLLBACK PREPARED and final write */
	if
	:: k != NONE -> atomic { LIVE -> if :: kmem[k] == m && kep[k] == ke -> k_abort_open(k) :: else fi }
	:: else
	fi;
	left = m;
	do
	:: left == 0 -> break
	:: else ->
		i = LOW(left);
		atomic { LIVE -> finish_prepared(i, 0, h) }
		atomic { LIVE ->
			if
			:: CAS(i, L_ACTIVE) -> row[i] = L_ABORTED; ans[i] = A_ABORT; check(i)
			:: else -> ans[i] = A_DOUBT; bad = 1
			fi;
			left = left & ~BIT(i); h = 0 }
	od;
	atomic { LIVE -> release(k, !bad); members_done(m, A_NONE) }
	goto done;

solo:
	/* the SQL side failed: the request never entered Kafka; ROLLBACK PREPARED, finishWith */
	atomic { LIVE -> finish_prepared(g, 0, h) }
	atomic { LIVE ->
		if
		:: CAS(g, L_ACTIVE) -> row[g] = L_ABORTED; ans[g] = A_ABORT; check(g)
		:: else -> ans[g] = A_DOUBT
		fi;
		inflight[g] = 0 }
	goto done;

indoubtActive:
	/* before prepared is known: every member in doubt, the id remembered for recovery */
	atomic { LIVE -> release(k, 0); members_done(m, A_DOUBT) }
	if
	:: pend -> atomic { ALLACTIVE(pm) && FENCE_OK -> log_prepared(pm) }
	:: else
	fi;
	goto done;

indoubtPrepared:
	atomic { LIVE -> release(k, 0); members_done(m, A_DOUBT) }
done:
	atomic { myinc = 0; myep = 0; k = 0; ke = 0; r = 0; m = 0; left = 0; i = 0; pm = 0;
		sq = 0; h = 0; pend = 0; bad = 0; rel = 0; early = 0 }
}

/* ============================== recovery (recovery.Loop) ============================== */

/* resolve: re-read the row; a prepared row is decided with every row naming the same
 * (transactional id, producer id, epoch): one EndTxn by the shared ids, the oracle per member
 * when that answers PRODUCER_FENCED, phase 2 and the final write per member. */
inline resolve(g) {
	atomic {
		s = row[g]; k = rowk[g]; e = rowe[g]; gm = 0;
		if
		:: inflight[g] -> s = L_NONE
		:: !NONFINAL(s) -> s = L_NONE
		:: s == L_PREPARED ->
			if :: row[0] == L_PREPARED && rowk[0] == k && rowe[0] == e && !inflight[0] -> gm = gm | 1 :: else fi;
			if :: row[1] == L_PREPARED && rowk[1] == k && rowe[1] == e && !inflight[1] -> gm = gm | 2 :: else fi;
			if :: row[2] == L_PREPARED && rowk[2] == k && rowe[2] == e && !inflight[2] -> gm = gm | 4 :: else fi
		:: else -> gm = BIT(g)
		fi
	}
	if
	:: s == L_ACTIVE || s == L_ABORTING ->
		/* txlog.Claim, then presumedAbort */
		if
		:: s == L_ACTIVE ->
			atomic { if :: row[g] == L_ACTIVE -> row[g] = L_ABORTING; s = L_ABORTING
			         :: else -> s = L_NONE fi }
		:: else
		fi;
		if
		:: s == L_ABORTING ->
			atomic { finish_prepared(g, 0, h) }
			atomic { if :: row[g] == L_ABORTING -> row[g] = (h -> L_COMMITTED : L_ABORTED); check(g); done = BIT(g)
			         :: else fi }
		:: else
		fi
	:: s == L_PREPARED ->
		/* resumePrepared: one EndTxn(commit) by the shared ids */
		if
		:: atomic { k_endtxn_commit(k, e, r) }
		:: atomic { FAULT -> r = R_UNCLEAR }
		fi;
#ifdef PROBE_GROUP_RECOVERY
		assert(!(r == R_OK && gm != BIT(g)));
#endif
		left = gm;
		do
		:: left == 0 -> break
		:: else ->
			atomic {
				i = LOW(left); ri = r;
				if
				:: ri == R_FENCED ->   /* kafkatxn.Pool.Outcome, per member */
					if :: kout[i] == K_COMMIT -> ri = R_OK
					   :: kout[i] == K_ABORT -> ri = R_ABORTED
					   :: else -> ri = R_UNCLEAR fi
				:: else
				fi }
			if
			:: ri == R_OK || ri == R_ABORTED ->
				atomic { finish_prepared(i, ri == R_OK, h) }
				atomic { if :: row[i] == L_PREPARED ->
					row[i] = (h -> L_HMIXED : (ri == R_OK -> L_COMMITTED : L_ABORTED)); check(i); done = done | BIT(i)
				         :: else fi }
			:: else
			fi;
			atomic { left = left & ~BIT(i); ri = 0; h = 0 }
		od
	:: s == L_COMMITTING ->
		atomic { finish_prepared(g, 1, h) }
		atomic { if :: row[g] == L_COMMITTING -> row[g] = (h -> L_HMIXED : L_COMMITTED); check(g); done = BIT(g)
		         :: else fi }
	:: else
	fi;
	/* release: each resolved row's id back to the pool once no in-doubt row names it */
	atomic {
		left = done;
		do
		:: left == 0 -> break
		:: else ->
			i = LOW(left); left = left & ~BIT(i);
			k = quar[i]; quar[i] = NONE;
			if :: k == NONE -> k = rowk[i] :: else fi;
			if
			:: k != NONE && pool[k] == P_QUAR && !ID_IN_DOUBT(k) && !QUAR_NAMES(k) -> k_init(k); broken[k] = 0; pool[k] = P_FREE
			:: else
			fi
		od;
		s = 0; k = 0; e = 0; r = 0; h = 0; gm = 0; left = 0; i = 0; done = 0 }
}

inline resolveDue() {
	g = 0;
	do
	:: atomic {
		do
		:: g < NG && !(NONFINAL(row[g]) && !inflight[g]) -> g++
		:: else -> break
		od;
		if
		:: g >= NG -> g = 0; break
		:: else
		fi }
		resolve(g); g++
	od
}

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

inline sweepMarkers() {
	atomic {
		g = 0;
		do
		:: g < NG -> if :: marker[g] && (row[g] == L_COMMITTED || row[g] == L_ABORTED) -> marker[g] = 0 :: else fi; g++
		:: else -> break
		od
	}
}

proctype RecoveryA() {
	byte myinc, g, k, e, s, r, ri, gm, left, i, done;
	bit h;
restart:
	atomic { !up && lockA == 0 -> lockA = 1; epochA++; heldA = epochA; up = 1; myinc = inc }
	{
		resolveDue();
		orphans();
		/* NewPool.fill: InitProducerId on every id no in-doubt row names */
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
			k = 0;
			serving = 1 }
end_loop:
		do
		:: lockA != 1 ->
			serving = 0;
			atomic { lockA == 0 -> lockA = 1; epochA++; heldA = epochA; serving = 1 }
		:: resolveDue(); atomic { orphans(); sweepMarkers() }
		od
	} unless { inc != myinc };
	goto restart
}

proctype Broker() {
end_loop:
	do
	:: atomic { kmem[0] != 0 -> k_abort_open(0) }
	:: atomic { kmem[NK-1] != 0 -> k_abort_open(NK-1) }
	od
}

proctype Faults() {
end_loop:
	do
	:: atomic { up && FAULT ->
		up = 0; serving = 0; inc++;
		if :: lockA == 1 -> lockA = 0 :: else fi;
		inflight[0] = 0; inflight[1] = 0; inflight[2] = 0;
		quar[0] = NONE; quar[1] = NONE; quar[2] = NONE;
		openb = NONE; bmem = 0;
		pool[0] = P_UNINIT; pool[NK-1] = P_UNINIT; broken[0] = 0; broken[NK-1] = 0 }
	:: atomic { lockA == 1 && FAULT -> lockA = 0 }
	od
}

init {
	atomic {
		run RecoveryA();
		run Request(0);
		run Request(1);
#if NR > 2
		run Request(2);
#endif
		run Broker();
		run Faults()
	}
}
