/*
 * sharedsql.pml: shared SQL transactions, as a Promela model checked with SPIN
 * (model/check-batch.sh; model/README.md, section "Shared SQL transactions").
 *
 * The members of a batch share one Kafka transaction (batch.pml) and also ONE PostgreSQL
 * prepared transaction G: each request logs its row active with its own gid, joins the open
 * batch before running any SQL; the leader runs every member's statements in a savepoint of
 * one transaction (a failing member is rolled back to its savepoint and re-runs alone, on the
 * unshared path, with its own gid and its own Kafka transaction), inserts G's marker and
 * PREPAREs G (a fresh gid that no row names yet). Concurrently it produces every member's
 * records in a first Kafka transaction (coord.phase1Batch). When every member's work is in the
 * prepared G the batch goes on with that transaction; otherwise (a member excluded, or G failed
 * as a whole) the leader aborts it, which no row names, and produces the riders' records again
 * in a second one (S1 by abort). Then it logs every member prepared on G in one write that also
 * inserts G's registration into shared_gids, sends one EndTxn and COMMIT PREPARED G once. After
 * a lost PREPARE answer the members re-run alone only when the backend that ran it was seen to
 * exit and ROLLBACK PREPARED G answered (S5, finding S-F1). The orphan sweep (S3) rolls back a
 * prepared G that no registration names only after inserting a tombstone for it, and commits a
 * committed row's own gid only if the row names it (S-F6); the marker sweep (S4) deletes G's
 * marker only when every registered member is committed, a registration once every member is
 * committed or aborted, and a tombstone once no row created before it is active (S-F5).
 * Names, states, the fault model and the properties are batch.pml's (one instance A with its
 * recovery loop, kill -9 at any step, lost answers); what that model checks (id pool,
 * quarantine, reuse) is left out here: every Kafka transaction is its own object, named by its
 * ids, never reused.
 *
 *   MAXF     faults per run: kill -9 of A, A's lock session lost, a lost answer (PREPARE G,
 *            ROLLBACK PREPARED G, the prepared write, EndTxn, COMMIT PREPARED G, a final write),
 *            PREPARE G refused, a record that fails (the Kafka side fails before the prepared
 *            write), a Kafka abort that does not get through (the transaction stays open).
 *            Not counted: a member's statement failing (SQLFAIL), whether the backend of a
 *            lost PREPARE is seen to exit, and the broker timing a transaction out (any time).
 *   SQLFAIL  mask of the members whose statements may fail (in G: excluded; alone: aborted);
 *            default member 1
 *   DEFER    S8: a follower may join with no row; the prepared write inserts it behind an
 *            anchor (a member of the write whose row is older than G); every other path logs
 *            it late (lateAbort, lateDoubt, alone)
 *
 * Mutants (each must make SPIN report a violation):
 *   M_SWEEP_NO_TOMBSTONE      S3 rolls back an unnamed G without inserting a tombstone first
 *   M_MARKER_FIRST_FINAL      S4 deletes G's marker when the first registered member is final
 *   M_PRODUCE_BEFORE_EXCLUDE  the records of every member are produced before the SQL phase
 *                             result is known and the first Kafka transaction is not aborted
 *                             on an exclusion: the batch goes on with it (S1 dropped)
 *   M_RERUN_WITHOUT_ROLLBACK  after the Kafka side failed, the members re-run alone without
 *                             waiting for ROLLBACK PREPARED G to answer
 *   M_NOTFOUND_IS_GONE        after PREPARE G's answer was lost, ROLLBACK PREPARED G answering
 *                             "does not exist" is taken as "G is gone" although the backend
 *                             that ran the PREPARE was not seen to exit (finding S-F1)
 *   M_WRITE_IGNORES_TOMBSTONE the prepared write inserts the registration "if absent" and goes
 *                             on when a tombstone is already there
 *   M_RETRY_WRITE             the leader retries a prepared write whose answer was lost; a
 *                             refusal (its own first write landed) is followed as a refusal
 *   M_TOMBSTONE_DELETED       the sweep deletes G's tombstone once it has rolled G back
 *                             (instead of once no row created before it is active, S-F5)
 *   M_REGISTRATION_FIRST_FINAL G's registration is deleted when the first member it names is
 *                             final (instead of every member committed or aborted)
 *   M_RERUN_AFTER_LOST_WRITE  after the prepared write's answer was lost, the members re-run
 *                             alone (instead of 202)
 *   M_NO_ANCHOR               (DEFER) the prepared write may carry deferred rows alone
 * Variants that are not violations (documented in model/README.md, not in the script):
 *   M_SWEEP_NO_INFLIGHT       S3 does not skip a G in flight (the tombstone alone keeps safety)
 *   NO_ONECOPY                the one-copy property off: M_RERUN_WITHOUT_ROLLBACK,
 *                             M_NOTFOUND_IS_GONE and M_RERUN_AFTER_LOST_WRITE then pass
 *                             (atomicity holds: an unnamed G never commits, and the orphan
 *                             sweep rolls back an own gid whose row names G)
 *   M_ORPHAN_OLD_RULE         the orphan sweep commits any prepared own gid of a committed row
 *                             (before S-F6): with NO_ONECOPY, M_RERUN_AFTER_LOST_WRITE is caught
 *                             (atomicity)
 *
 * Properties, per member, in every reachable state (proctype Invariants): atomicity per
 * carrier, committed once, one copy, the answers, the log agrees, no false heuristic, a 202
 * has a row.
 *
 * Probes (each must be violated, showing the path is reachable):
 *   PROBE_SHARED_COMMIT     two members committed through one G and one EndTxn (200 both)
 *   PROBE_EXCLUDED_ALONE    an excluded member commits alone while the other commits through G
 *                           (so in the second Kafka transaction, the first one aborted)
 *   PROBE_RERUN_AFTER_EXIT  PREPARE G's answer lost, its backend seen to exit, ROLLBACK PREPARED
 *                           G answered: a member re-runs alone and commits on its own gid
 *   PROBE_SWEEP_TOMBSTONE   after a crash the sweep rolls back an unnamed G (tombstone path)
 *   PROBE_GROUP_RECOVERY    after a crash recovery commits two members' rows on G
 *   PROBE_DEFER_COMMIT      (DEFER) a deferred member committed through G
 *   PROBE_NO_ANCHOR         (DEFER) a deferred member sent alone for want of an anchor commits
 */

#ifndef MAXF
#define MAXF 2
#endif
#ifndef SQLFAIL
#define SQLFAIL 2
#endif

#define NR   2
#define NONE 9
#define BIT(g) (1 << (g))
#define LOW(m) (((m) & 1) -> 0 : 1)

/* ---- the coordinator log (txlog): one row per request ---- */
#define L_NONE       0
#define L_ACTIVE     1
#define L_PREPARED   2
#define L_COMMITTING 3
#define L_ABORTING   4
#define L_COMMITTED  5
#define L_ABORTED    6
#define L_HMIXED     7
#define NONFINAL(s)  ((s) >= L_ACTIVE && (s) <= L_ABORTING)
#define FINAL(s)     ((s) >= L_COMMITTED)

byte row[NR];
bit  rowG[NR];            /* logged by the batch's prepared write: sql gid G, the batch's Kafka
                             ids (else the row's own gid and, once prepared, its own ids) */
byte epochA;              /* owner epoch of instance A (fencing) */

/* ---- shared_gids(gid primary key, members) ---- */
#define REG_NONE 0
#define REG_MEMB 1        /* registration: G's member rows */
#define REG_TOMB 2        /* tombstone: no members, G is rolled back */
byte reg;
byte regm;                /* members named by the registration (mask) */
byte tbm;                 /* rows that existed when the tombstone was inserted (its created_at) */

/* ---- PostgreSQL: the shared transaction G ---- */
#define G_NONE   0
#define G_OPEN   1        /* transaction open on the leader's connection, not prepared */
#define G_PREP   2
#define G_COMMIT 3
#define G_ABORT  4
byte gst;
byte gpb;                 /* marker + PREPARE G: 0 not sent, 1 sent, 2 done, 3 answer lost (may land) */
bit  ginc[NR];            /* the member's work is in G (its savepoint released) */
bit  gmarker;             /* G's marker row: present iff G committed and not swept */
bit  ginfl;               /* G in flight in A (the leader's batch, until it gives up or ends) */

/* ---- PostgreSQL: each member's own gid (the unshared path) ---- */
#define S_NONE   0
#define S_PREP   1
#define S_COMMIT 2
#define S_ABORT  3
byte sql[NR];
bit  marker[NR];
#define B_IDLE 0
#define B_INFL 1
#define B_DONE 2
byte sb[NR];              /* the own-gid sqltxn.Run batch: sent, may still land */

/* ---- Kafka: the batch's transactions, and each member's own (alone) transaction ---- */
#define K_NONE   0
#define K_OPEN   1
#define K_COMMIT 2
#define K_ABORT  3
byte kst[2];              /* the batch's first transaction (0: every member's records, produced
                             alongside the SQL phase) and second (1: the riders', produced again) */
byte kinm[2];             /* the members whose records are in each */
bit  kb;                  /* the one the batch goes on with: its ids are logged by the prepared write */
bit  wsent;               /* the leader reached its prepared write: a row may come to name kb */
byte ko[NR];

#define R_OK      0
#define R_ABORTED 1
#define R_UNCLEAR 3

/* ---- instance A ---- */
bit  up;
byte inc;
bit  serving;
byte heldA;
byte lockA;               /* 0 free, 1 held by A */
bit  inflight[NR];

/* ---- the batcher (in memory) ---- */
byte openb = NONE;        /* leader of the batch open for joining */
byte bmem;                /* its members so far */
bit  bopened;             /* one batch per run: a request arriving after it was sealed runs alone */
bit  rerun[NR];           /* the leader tells a member to re-run alone */
byte dfr;                 /* DEFER (S8): followers that joined with no row; the prepared write
                             inserts theirs, or they log it late (lateBegin) */

/* the batch's prepared write, sent, answer lost: it may land later (Net) */
bit  pw;
byte pwm;
byte pwep;

/* ---- answers ---- */
#define A_NONE  0
#define A_OK    1
#define A_ABORT 2
#define A_DOUBT 3
#define A_UNKNOWN 4       /* 503: the log did not answer; nothing promised, retry with the id */
byte ans[NR];

byte nf;
#define FAULT (nf < MAXF) -> nf++
/* ghosts of the probes, kept only when a probe reads them (they would split states) */
byte nkill;               /* kills so far */
byte excl;                /* members excluded from G */
byte rec;                 /* rows committed on G by recovery */
byte exitm;               /* members re-run after a lost PREPARE answer, backend seen to exit */
#if defined(PROBE_SWEEP_TOMBSTONE) || defined(PROBE_GROUP_RECOVERY)
#define GHOST_KILL nkill++
#else
#define GHOST_KILL skip
#endif
#ifdef PROBE_EXCLUDED_ALONE
#define GHOST_EXCL(i) excl = excl | BIT(i)
#else
#define GHOST_EXCL(i) skip
#endif
#ifdef PROBE_GROUP_RECOVERY
#define GHOST_REC(i) rec = rec | BIT(i)
#else
#define GHOST_REC(i) skip
#endif
#ifdef PROBE_NO_ANCHOR
byte noanc;               /* deferred members sent alone for want of an anchor */
#define GHOST_NOANC(m) noanc = (m)
#else
#define GHOST_NOANC(m) skip
#endif
#ifdef PROBE_RERUN_AFTER_EXIT
#define GHOST_EXIT(m) exitm = (m)
#else
#define GHOST_EXIT(m) skip
#endif

/* ================================ properties ================================ */

#define KST(t, g) ((kinm[t] & BIT(g)) && kst[t] == K_COMMIT)
#define KS(g) (KST(0, g) || KST(1, g))             /* its records committed in a batch's txn */
#define KSN(g) KST(kb, g)                          /* ... in the one the prepared write names */
#define KO(g) (ko[g] == K_COMMIT)                  /* ... in its own txn */
#define SG(g) (ginc[g] && gst == G_COMMIT)         /* its work committed in G */
#define SO(g) (sql[g] == S_COMMIT)                 /* ... in its own gid */
#define GLIVE(g) (ginc[g] && (gst == G_PREP || gst == G_COMMIT))
#define OLIVE(g) (sql[g] == S_PREP || sql[g] == S_COMMIT)
#define ANYC(g) (KS(g) || KO(g) || SG(g) || SO(g))

/* atomicity, per carrier: records in the batch's transaction commit only with the member's
 * work in G (prepared or committed), records in its own transaction only with its own gid;
 * SQL committed only with its records committed */
#define ATOM_KS(g) (!(KS(g) && !GLIVE(g)))
#define ATOM_KO(g) (!(KO(g) && !OLIVE(g)))
#define ATOM_SG(g) (!(SG(g) && !KS(g)))
#define ATOM_SO(g) (!(SO(g) && !KO(g)))
#define ATOM(g)   (ATOM_KS(g) && ATOM_KO(g) && ATOM_SG(g) && ATOM_SO(g))
/* committed once: never on both paths, nor in both of the batch's transactions */
#define ONCE(g)   (!(KS(g) && KO(g)) && !(SG(g) && SO(g)) && !(KST(0, g) && KST(1, g)))
/* one copy: a member's work is never prepared (or committed) in G and in its own gid at once */
#ifdef NO_ONECOPY
#define ONECOPY(g) true
#else
#define ONECOPY(g) (!(GLIVE(g) && OLIVE(g)))
#endif
/* answers: 200 only when both sides committed, 409 never followed by a commit */
#define ANSWERS(g) ((ans[g] != A_OK || (KS(g) && SG(g)) || (KO(g) && SO(g))) && (ans[g] != A_ABORT || !ANYC(g)))
/* the log agrees: committed has the logged carrier committed on both sides, aborted nothing */
#define LOGOK(g)  ((row[g] != L_COMMITTED || (rowG[g] -> (SG(g) && KSN(g)) : (SO(g) && KO(g)))) && (row[g] != L_ABORTED || !ANYC(g)))
/* no false heuristic: nobody resolves by hand in this model */
#define NOHEUR(g) (row[g] != L_HMIXED)
/* a 202 has a row to resolve (GET finds it); a member with none answers 503 (A_UNKNOWN) */
#define DOUBTROW(g) (ans[g] != A_DOUBT || row[g] != L_NONE)

/* checked in every reachable state: one guard, then the assertion that fails names the property */
#define INV(g) (ATOM(g) && ONCE(g) && ONECOPY(g) && ANSWERS(g) && LOGOK(g) && NOHEUR(g) && DOUBTROW(g))
active proctype Invariants() {
end_inv:
	do
	:: atomic { !(INV(0) && INV(1)) ->
		assert(ATOM_KS(0)); assert(ATOM_KS(1)); assert(ATOM_KO(0)); assert(ATOM_KO(1));
		assert(ATOM_SG(0)); assert(ATOM_SG(1)); assert(ATOM_SO(0)); assert(ATOM_SO(1));
		assert(ONCE(0)); assert(ONCE(1));
		assert(ONECOPY(0)); assert(ONECOPY(1)); assert(ANSWERS(0)); assert(ANSWERS(1));
		assert(LOGOK(0)); assert(LOGOK(1)); assert(NOHEUR(0)); assert(NOHEUR(1));
		assert(DOUBTROW(0)); assert(DOUBTROW(1)) }
#ifdef PROBE_DEFER_COMMIT
	:: atomic { (row[1] == L_COMMITTED && rowG[1] && (dfr & 2) && ans[1] == A_OK) -> assert(false) }
#endif
#ifdef PROBE_NO_ANCHOR
	:: atomic { (((noanc & 1) && row[0] == L_COMMITTED && !rowG[0] && ans[0] == A_OK) ||
	             ((noanc & 2) && row[1] == L_COMMITTED && !rowG[1] && ans[1] == A_OK)) -> assert(false) }
#endif
#ifdef PROBE_SHARED_COMMIT
	:: atomic { (row[0] == L_COMMITTED && rowG[0] && ans[0] == A_OK && row[1] == L_COMMITTED && rowG[1] && ans[1] == A_OK) -> assert(false) }
#endif
#ifdef PROBE_EXCLUDED_ALONE
	:: atomic { (row[0] == L_COMMITTED && rowG[0] && row[1] == L_COMMITTED && !rowG[1] && (excl & 2)) -> assert(false) }
	:: atomic { (row[1] == L_COMMITTED && rowG[1] && row[0] == L_COMMITTED && !rowG[0] && (excl & 1)) -> assert(false) }
#endif
#ifdef PROBE_GROUP_RECOVERY
	:: atomic { (rec == 3 && nkill > 0) -> assert(false) }
#endif
#ifdef PROBE_RERUN_AFTER_EXIT
	:: atomic { (((exitm & 1) && row[0] == L_COMMITTED && !rowG[0]) || ((exitm & 2) && row[1] == L_COMMITTED && !rowG[1])) -> assert(false) }
#endif
	od
}

/* ================================ helpers ================================ */

/* COMMIT / ROLLBACK PREPARED G, idempotent: a G that is gone is resolved by its marker;
 * found the other way: h (heuristic) */
inline finishG(commit, h) {
	if
	:: gst == G_PREP && (commit) -> gst = G_COMMIT; gmarker = 1; h = 0
	:: gst == G_PREP && !(commit) -> gst = G_ABORT; h = 0
	:: else -> h = (gmarker != (commit))
	fi
}

/* COMMIT / ROLLBACK PREPARED of a member's own gid */
inline finishOwn(g, commit, h) {
	if
	:: sql[g] == S_PREP && (commit) -> sql[g] = S_COMMIT; marker[g] = 1; h = 0
	:: sql[g] == S_PREP && !(commit) -> sql[g] = S_ABORT; h = 0
	:: else -> h = (marker[g] != (commit))
	fi
}

/* phase 2 on the row's logged gid */
inline phase2(i, commit, h) {
	if
	:: rowG[i] -> finishG(commit, h)
	:: else -> finishOwn(i, commit, h)
	fi
}

/* EndTxn(commit) by the batch's logged ids, those of kb (transaction version 2, no reuse: a
 * retry of a completed commit succeeds, of an aborted transaction answers INVALID_TXN_STATE) */
inline ks_commit(r) {
	if
	:: kst[kb] == K_OPEN -> kst[kb] = K_COMMIT; r = R_OK
	:: kst[kb] == K_COMMIT -> r = R_OK
	:: else -> r = R_ABORTED
	fi
}

inline ko_commit(g, r) {
	if
	:: ko[g] == K_OPEN -> ko[g] = K_COMMIT; r = R_OK
	:: ko[g] == K_COMMIT -> r = R_OK
	:: else -> r = R_ABORTED
	fi
}

#define LIVE (inc == myinc)
#define FENCE_OK (epochA == myep)
#define CAS(g, s) (row[g] == (s) && FENCE_OK)
#define ALLACTIVE(m) ((((m) & 1) == 0 || row[0] == L_ACTIVE) && (((m) & 2) == 0 || row[1] == L_ACTIVE))
#define ANYFINAL(m) ((((m) & 1) && FINAL(row[0])) || (((m) & 2) && FINAL(row[1])))
#define ALLIN(m, s) ((((m) & 1) == 0 || row[0] == (s)) && (((m) & 2) == 0 || row[1] == (s)))
#define DONE(s) ((s) == L_COMMITTED || (s) == L_ABORTED)
#define ALLDONE(m) ((((m) & 1) == 0 || DONE(row[0])) && (((m) & 2) == 0 || DONE(row[1])))
#define NOACTIVE(m) ((((m) & 1) == 0 || row[0] != L_ACTIVE) && (((m) & 2) == 0 || row[1] != L_ACTIVE))
#define ROWS ((row[0] != L_NONE -> 1 : 0) | (row[1] != L_NONE -> 2 : 0))

/* the leader aborts one of the batch's transactions (coord.abortShared; no landed write names
 * it); an abort that does not get through (a fault) leaves it open until the broker's timeout
 * (Net) or an InitProducerId aborts it */
#define ABORTK(t) if :: kst[t] == K_OPEN -> kst[t] = K_ABORT :: else fi
inline abortK(t) {
	if
	:: atomic { LIVE -> ABORTK(t) }
	:: atomic { LIVE && FAULT }
	fi
}

/* B2 with the registration: one log transaction, fenced, all or nothing: every member row
 * active -> prepared on G with the batch's Kafka ids, and INSERT INTO shared_gids (G, members);
 * refused when a registration or a tombstone exists, a row moved on, or the epoch moved */
#define ALLNONE(m) ((((m) & 1) == 0 || row[0] == L_NONE) && (((m) & 2) == 0 || row[1] == L_NONE))
#ifdef M_WRITE_IGNORES_TOMBSTONE
#define REG_OK (reg != REG_MEMB)
#else
#define REG_OK (reg == REG_NONE)
#endif
/* DEFER (S8): a deferred member's row is inserted, and refuses the write if it exists; the
 * write carries an anchor, a member whose row was active before G was created */
#ifdef M_NO_ANCHOR
#define ANCHOR(m) true
#else
#define ANCHOR(m) (((m) & ~dfr) != 0)
#endif
#define WRITE_OK(m, ep) (ALLACTIVE((m) & ~dfr) && ALLNONE((m) & dfr) && ANCHOR(m) && epochA == (ep) && REG_OK)
inline log_prepared(m) {
	if :: (m) & 1 -> row[0] = L_PREPARED; rowG[0] = 1 :: else fi;
	if :: (m) & 2 -> row[1] = L_PREPARED; rowG[1] = 1 :: else fi;
	if :: reg == REG_NONE -> reg = REG_MEMB; regm = m :: else fi
}

/* the leader is done with the members of m: answer a (unless A_NONE), no longer in flight */
inline members_done(m, a) {
	if :: (m) & 1 -> inflight[0] = 0; if :: a != A_NONE -> ans[0] = a :: else fi :: else fi;
	if :: (m) & 2 -> inflight[1] = 0; if :: a != A_NONE -> ans[1] = a :: else fi :: else fi
}

/* DEFER (S8): a deferred member whose batch logged nothing logs its row now, then its abort
 * (409); its Begin failing answers 503, with no row and nothing of it able to commit */
inline lateAbort(i) {
	if
	:: atomic { LIVE && CAS(i, L_NONE) -> row[i] = L_ACTIVE }
		if
		:: atomic { LIVE && CAS(i, L_ACTIVE) -> row[i] = L_ABORTED; ans[i] = A_ABORT }
		:: atomic { LIVE && !CAS(i, L_ACTIVE) -> ans[i] = A_DOUBT }
		:: atomic { LIVE && FAULT -> if :: CAS(i, L_ACTIVE) -> row[i] = L_ABORTED :: true fi; ans[i] = A_DOUBT }
		fi
	:: atomic { LIVE && !CAS(i, L_NONE) -> ans[i] = (row[i] == L_NONE -> A_UNKNOWN : A_DOUBT) }
	:: atomic { LIVE && FAULT -> ans[i] = A_UNKNOWN }
	fi;
	atomic { LIVE -> inflight[i] = 0 }
}

/* DEFER (S8): the prepared write's answer was lost: a deferred member's late Begin finds the row
 * the write inserted (it landed), or inserts one, which the write can then never insert over (it
 * will not land): 202 either way; its Begin failing answers 503 */
inline lateDoubt(i) {
	if
	:: atomic { LIVE && CAS(i, L_NONE) -> row[i] = L_ACTIVE; ans[i] = A_DOUBT }
	:: atomic { LIVE && !CAS(i, L_NONE) -> ans[i] = (row[i] == L_NONE -> A_UNKNOWN : A_DOUBT) }
	:: atomic { LIVE && FAULT -> ans[i] = A_UNKNOWN }
	fi;
	atomic { LIVE -> inflight[i] = 0 }
}

/* lateAll(m, how): how (lateAbort or lateDoubt) for every deferred member of m */
#define LATE_ALL(m, how) \
	left = (m) & dfr; \
	do \
	:: left == 0 -> break \
	:: else -> i = LOW(left); how(i); left = left & ~BIT(i) \
	od

/* ========================= request path (coord.Coordinator) ========================= */

proctype Request(byte g) {
	byte myinc, myep, m, gm, ex, i, left, r;
	bit h, seen;

	atomic { serving -> myinc = inc; myep = heldA; inflight[g] = 1 }
#ifdef DEFER
	/* S8: a follower may join the open batch with no row: the prepared write inserts it */
	if
	:: atomic { LIVE && openb != NONE -> bmem = bmem | BIT(g); dfr = dfr | BIT(g) }
		atomic { LIVE && rerun[g] }; goto alone
	:: skip
	fi;
#endif
	/* txlog.Begin (fenced): active, with its own gid */
	if
	:: atomic { LIVE && CAS(g, L_NONE) -> row[g] = L_ACTIVE }
	:: atomic { LIVE && !CAS(g, L_NONE) -> ans[g] = A_ABORT; inflight[g] = 0 }; goto done
	fi;

	/* join the open batch before any SQL, or open it and lead; after the (one) batch was
	 * sealed, a request runs alone */
	if
	:: atomic { LIVE && openb != NONE -> bmem = bmem | BIT(g) }
		/* a follower: the leader answers it, or tells it to re-run alone */
		atomic { LIVE && rerun[g] }; goto alone
	:: atomic { LIVE && openb == NONE && !bopened -> openb = g; bmem = BIT(g); bopened = 1 }
	:: atomic { LIVE && openb == NONE && bopened }; goto alone
	fi;

	/* ---------------- leader ---------------- */
	/* seal at any moment; BEGIN G (in flight from now on) and, alongside the SQL phase, the
	 * produce of every member's records in the batch's first Kafka transaction
	 * (coord.phase1Batch; its flush result is read once the SQL phase is done) */
	atomic { LIVE -> m = bmem; openb = NONE; bmem = 0; ginfl = 1; gst = G_OPEN; kst[0] = K_OPEN; kinm[0] = m }
	/* each member's statements in a savepoint: SAVEPOINT; statements; RELEASE, or ROLLBACK TO
	 * SAVEPOINT when they fail: that member is excluded and re-runs alone at once */
	left = m;
	do
	:: left == 0 -> break
	:: else ->
		i = LOW(left);
		if
		:: atomic { LIVE -> ginc[i] = 1; left = left & ~BIT(i) }
		:: atomic { LIVE && (SQLFAIL & BIT(i)) ->
			ex = ex | BIT(i); GHOST_EXCL(i); left = left & ~BIT(i);
			if :: i != g -> rerun[i] = 1 :: else fi }
		fi
	od;
	gm = m & ~ex;
	if
	:: gm == 0 ->                        /* nobody left: G rolled back, the first transaction aborted */
		if
		:: atomic { LIVE -> gst = G_ABORT; ginfl = 0; ABORTK(0) }
		:: atomic { LIVE && FAULT -> gst = G_ABORT; ginfl = 0 }   /* the abort does not get through */
		fi;
		goto leaderDone
	:: else
	fi;

	/* G's marker row, PREPARE TRANSACTION G (a fresh gid; no row names it) */
	atomic { LIVE -> gpb = 1 }
	if
	:: atomic { gpb == 1 -> gpb = 2; gst = G_PREP }      /* lands (also after a kill) */
		if
		:: atomic { LIVE }
		:: atomic { LIVE && FAULT }; goto prepLost        /* answer lost */
		fi
	:: atomic { LIVE && gpb == 1 && FAULT -> gpb = 2; gst = G_ABORT; seen = 1 }; goto gFailed
	                                                      /* PREPARE refused: the session's ROLLBACK
	                                                         answers, nothing sent on it can still run */
	:: atomic { LIVE && gpb == 1 && FAULT -> gpb = 3 }; goto prepLost   /* answer lost; it may still land */
	fi;
#if defined(DEFER) && !defined(M_NO_ANCHOR)
	/* S8: no member of G has a row older than G (every one left is deferred): G rolled back,
	 * every member re-runs alone (its row first) */
	if
	:: (gm & ~dfr) == 0 -> GHOST_NOANC(gm); seen = 1; goto gFailed
	:: else
	fi;
#endif

	/* S1 by abort: with a member excluded, the first Kafka transaction, which no row names, is
	 * aborted and the records of the members in G are produced again in a second one */
	if
	:: ex == 0
	:: else ->
#ifdef M_PRODUCE_BEFORE_EXCLUDE
		skip                                                   /* the mutant: goes on with the first */
#else
		if
		:: atomic { LIVE -> ABORTK(0); kst[1] = K_OPEN; kinm[1] = gm; kb = 1 }
		:: atomic { LIVE && FAULT -> kst[1] = K_OPEN; kinm[1] = gm; kb = 1 }   /* the abort does not get through */
		fi
#endif
	fi;
	/* flush, check every record of the transaction the batch goes on with */
	if
	:: atomic { LIVE && kst[kb] == K_OPEN -> wsent = 1 }     /* the prepared write may be sent from now on */
	:: atomic { LIVE && kst[kb] != K_OPEN }; goto kafkaFailed  /* the broker timed it out */
	:: atomic { LIVE && FAULT }; goto kafkaFailed              /* a record failed */
	fi;

	/* the prepared write with G's registration */
	if
	:: atomic { WRITE_OK(gm, myep) -> log_prepared(gm) }       /* lands (also after a kill) */
		if
		:: atomic { LIVE }
		:: atomic { LIVE && FAULT }; goto writeLost            /* landed, answer lost */
		fi
	:: atomic { LIVE && !WRITE_OK(gm, myep) }; goto refused
	:: atomic { LIVE && FAULT }; goto serverRefused   /* refused by the server (ErrLogRefused): nothing written */
	:: atomic { LIVE && FAULT -> pw = 1; pwm = gm; pwep = myep }
#ifdef M_RETRY_WRITE
		/* the mutant: the leader sends the write again; the first may land before it */
		if
		:: atomic { pw -> pw = 0; if :: WRITE_OK(gm, myep) -> log_prepared(gm) :: else fi }
		:: skip
		fi;
		if
		:: atomic { LIVE && WRITE_OK(gm, myep) -> log_prepared(gm) }
		:: atomic { LIVE && !WRITE_OK(gm, myep) }; goto refused
		fi
#else
		goto writeLost                                         /* no answer; may land later */
#endif
	fi;

	/* decide: one EndTxn(commit) for the batch */
	if
	:: atomic { ks_commit(r) }                                 /* lands (also after a kill) */
		if
		:: atomic { LIVE }
		:: atomic { LIVE && FAULT }; goto indoubtPrepared      /* answer lost */
		fi
	:: atomic { LIVE && FAULT }; goto indoubtPrepared          /* no answer */
	fi;

	if
	:: r == R_OK ->
		/* phase 2: COMMIT PREPARED G once */
		if
		:: atomic { LIVE -> finishG(1, h) }
			if
			:: atomic { LIVE }
			:: atomic { LIVE && FAULT }; goto p2lost
			fi
		:: atomic { LIVE && FAULT }; goto p2lost               /* failed */
		fi;
		/* finals.go: committed on both sides, the members are answered before their final
		   writes */
		if
		:: atomic { LIVE && !h ->
			if :: gm & 1 -> ans[0] = A_OK :: else fi;
			if :: gm & 2 -> ans[1] = A_OK :: else fi }
		:: else
		fi;
		/* then the members logged committed, each its own compare-and-set */
		left = gm;
		do
		:: left == 0 -> break
		:: else ->
			i = LOW(left);
			if
			:: atomic { LIVE && CAS(i, L_PREPARED) ->
				if
				:: h -> row[i] = L_HMIXED; ans[i] = A_DOUBT
				:: else -> row[i] = L_COMMITTED
				fi;
				left = left & ~BIT(i) }
			:: atomic { LIVE && !CAS(i, L_PREPARED) ->
				if :: ans[i] == A_NONE -> ans[i] = A_DOUBT :: else fi; left = left & ~BIT(i) }
			:: atomic { LIVE && FAULT ->                       /* the write's answer lost */
				if :: CAS(i, L_PREPARED) && !h -> row[i] = L_COMMITTED :: true fi;
				if :: ans[i] == A_NONE -> ans[i] = A_DOUBT :: else fi; left = left & ~BIT(i) }
			fi
		od;
		atomic { LIVE -> members_done(gm, A_NONE); ginfl = 0 }
		goto leaderDone
	:: else ->
		/* Kafka confirmed an abort (the broker timed the batch out): ROLLBACK PREPARED G,
		 * members logged aborted */
		atomic { LIVE -> finishG(0, h) }
		left = gm;
		do
		:: left == 0 -> break
		:: else ->
			i = LOW(left);
			atomic { LIVE ->
				if
				:: CAS(i, L_PREPARED) && h -> row[i] = L_HMIXED; ans[i] = A_DOUBT
				:: CAS(i, L_PREPARED) && !h -> row[i] = L_ABORTED; ans[i] = A_ABORT
				:: else -> ans[i] = A_DOUBT
				fi;
				left = left & ~BIT(i) }
		od;
		atomic { LIVE -> members_done(gm, A_NONE); ginfl = 0 }
		goto leaderDone
	fi;

p2lost:
	/* COMMIT PREPARED G failed or its answer was lost: the members logged committing, 202;
	 * recovery finishes them on G */
	left = gm;
	do
	:: left == 0 -> break
	:: else ->
		i = LOW(left);
		atomic { LIVE ->
			if :: CAS(i, L_PREPARED) -> row[i] = L_COMMITTING :: else fi;
			ans[i] = A_DOUBT; left = left & ~BIT(i) }
	od;
	atomic { LIVE -> members_done(gm, A_NONE); ginfl = 0 }
	goto leaderDone;

prepLost:
	/* PREPARE G's answer lost, G may be prepared or the PREPARE still on its way (a gid not yet
	 * valid is skipped by ROLLBACK PREPARED: "does not exist"). sqltxn.Databases.endFailed: the
	 * connection was cut, pg_terminate_backend and wait; either outcome. Seen to exit: a PREPARE
	 * on its way has landed or never will. Not seen: it may land at any later moment
	 * (txntype.ErrPrepareMayLand) */
	if
	:: atomic { LIVE -> if :: gpb == 3 -> gpb = 2; if :: gst == G_OPEN -> gst = G_ABORT :: else fi :: else fi;
		seen = 1; GHOST_EXIT(gm) }
	:: atomic { LIVE }
	fi;
gFailed:
	/* G failed as a whole (coord.runGroup): ROLLBACK PREPARED G (rolled back, or "does not exist"
	 * and no marker: both answer nil); the members re-run alone only if it answered and the
	 * session is known to be done (S5: coord.groupLost), else 409 */
#ifdef M_NOTFOUND_IS_GONE
#define GONE 1                                          /* the mutant: any answer proves G gone */
#else
#define GONE seen
#endif
	if
	:: atomic { LIVE -> if :: gst == G_PREP -> gst = G_ABORT :: else fi; r = GONE }
	:: atomic { LIVE && FAULT -> if :: gst == G_PREP -> gst = G_ABORT :: true fi; r = 0 }  /* no answer */
	fi;
	/* then the first Kafka transaction is aborted (coord.phase1Batch); no riders */
	abortK(0);
	if
	:: r == 1 -> goto rerunAll
	:: else -> goto abort409
	fi;

kafkaFailed:
	/* before the prepared write: abort the Kafka transaction, ROLLBACK PREPARED G */
	abortK(kb);
#ifdef M_RERUN_WITHOUT_ROLLBACK
	/* the mutant: ROLLBACK PREPARED G sent, not waited for; it lands later, or never */
	atomic { LIVE -> gpb = 3 }
	goto rerunAll;
#endif
	if
	:: atomic { LIVE -> if :: gst == G_PREP -> gst = G_ABORT :: else fi }; goto rerunAll   /* answered */
	:: atomic { LIVE && FAULT -> if :: gst == G_PREP -> gst = G_ABORT :: true fi }; goto abort409  /* no answer */
	fi;

refused:
	/* nothing changed: abort Kafka, roll back G; each member answers from its row (a
	 * resolver's claim) or 202 */
	abortK(kb);
	atomic { LIVE -> finishG(0, h); h = 0 }
	atomic { LIVE ->
		if :: gm & ~dfr & 1 -> ans[0] = (row[0] == L_ABORTED -> A_ABORT : A_DOUBT) :: else fi;
		if :: gm & ~dfr & 2 -> ans[1] = (row[1] == L_ABORTED -> A_ABORT : A_DOUBT) :: else fi;
		members_done(gm & ~dfr, A_NONE) }
	LATE_ALL(gm, lateAbort);
	atomic { LIVE -> ginfl = 0 }
	goto leaderDone;

serverRefused:
	/* nothing changed, and no resolver moved a row: abort Kafka, roll back G; each member logs
	 * its own abort (409/503), or 202 when its row moved on meanwhile */
	abortK(kb);
	atomic { LIVE -> finishG(0, h); h = 0 }
	goto abort409;

writeLost:
#ifdef M_RERUN_AFTER_LOST_WRITE
	/* the mutant: the write's outcome unknown, the members re-run alone */
	goto rerunAll;
#endif
	/* every member in doubt (202); the batch is no longer in flight; the write may land later */
	atomic { LIVE -> members_done(gm & ~dfr, A_DOUBT) }
	LATE_ALL(gm, lateDoubt);
	atomic { LIVE -> ginfl = 0 }
	goto leaderDone;

indoubtPrepared:
	atomic { LIVE -> members_done(gm, A_DOUBT); ginfl = 0 }
	goto leaderDone;

abort409:
	/* G not certainly gone: answered aborted without re-running; G, unnamed, is the sweep's */
	LATE_ALL(gm, lateAbort);
	left = gm & ~dfr;
	do
	:: left == 0 -> break
	:: else ->
		i = LOW(left);
		atomic { LIVE ->
			if
			:: CAS(i, L_ACTIVE) -> row[i] = L_ABORTED; ans[i] = A_ABORT
			:: else -> ans[i] = A_DOUBT
			fi;
			left = left & ~BIT(i) }
	od;
	atomic { LIVE -> members_done(gm, A_NONE); ginfl = 0 }
	goto leaderDone;

rerunAll:
	/* G certainly gone: every member of G re-runs alone from the start (rows still active) */
	atomic { LIVE ->
		if :: gm & 1 && g != 0 -> rerun[0] = 1 :: else fi;
		if :: gm & 2 && g != 1 -> rerun[1] = 1 :: else fi;
		if :: gm & BIT(g) -> ex = ex | BIT(g) :: else fi;
		ginfl = 0 }

leaderDone:
	if
	:: ex & BIT(g) -> goto alone
	:: else -> goto done
	fi;

	/* ---------------- the unshared path, alone: its own gid, its own Kafka transaction ---- */
alone:
#ifdef DEFER
	/* S8: a deferred member's row, logged before anything of it runs alone */
	if
	:: dfr & BIT(g) ->
		if
		:: atomic { LIVE && CAS(g, L_NONE) -> row[g] = L_ACTIVE }
		:: atomic { LIVE && !CAS(g, L_NONE) -> ans[g] = (row[g] == L_NONE -> A_UNKNOWN : A_DOUBT); inflight[g] = 0 }; goto done
		:: atomic { LIVE && FAULT -> ans[g] = A_UNKNOWN; inflight[g] = 0 }; goto done
		fi
	:: else
	fi;
#endif
	atomic { LIVE -> m = 0; gm = 0; ex = 0; left = 0; i = 0; r = 0; h = 0; seen = 0; sb[g] = B_INFL }
	/* sqltxn.Run: BEGIN, statements, marker, PREPARE of its own gid, in one batch */
	if
	:: atomic { sb[g] == B_INFL -> sb[g] = B_DONE; sql[g] = S_PREP }   /* lands (also after a kill) */
		atomic { LIVE }
	:: atomic { LIVE && sb[g] == B_INFL && (SQLFAIL & BIT(g)) -> sb[g] = B_DONE }; goto solo
	fi;
	/* its own Kafka transaction */
	atomic { LIVE -> ko[g] = K_OPEN }
	if
	:: atomic { LIVE && ko[g] == K_OPEN }
	:: atomic { LIVE && ko[g] != K_OPEN }; goto solo           /* timed out */
	fi;
	/* prepared (fenced CAS) */
	if
	:: atomic { LIVE && CAS(g, L_ACTIVE) -> row[g] = L_PREPARED }
	:: atomic { LIVE && !CAS(g, L_ACTIVE) -> ans[g] = A_DOUBT; inflight[g] = 0 }; goto done
	fi;
	if
	:: atomic { ko_commit(g, r) }                              /* lands (also after a kill) */
		if
		:: atomic { LIVE }
		:: atomic { LIVE && FAULT -> ans[g] = A_DOUBT; inflight[g] = 0 }; goto done
		fi
	:: atomic { LIVE && FAULT -> ans[g] = A_DOUBT; inflight[g] = 0 }; goto done
	fi;
	atomic { LIVE -> finishOwn(g, r == R_OK, h) }
	atomic { LIVE ->
		if
		:: CAS(g, L_PREPARED) && h -> row[g] = L_HMIXED; ans[g] = A_DOUBT
		:: CAS(g, L_PREPARED) && !h && r == R_OK -> row[g] = L_COMMITTED; ans[g] = A_OK
		:: CAS(g, L_PREPARED) && !h && r != R_OK -> row[g] = L_ABORTED; ans[g] = A_ABORT
		:: else -> ans[g] = A_DOUBT
		fi;
		inflight[g] = 0 }
	goto done;

solo:
	/* its SQL failed (or Kafka timed out): abort alone */
	atomic { LIVE -> if :: ko[g] == K_OPEN -> ko[g] = K_ABORT :: else fi; finishOwn(g, 0, h) }
	atomic { LIVE ->
		if
		:: CAS(g, L_ACTIVE) -> row[g] = L_ABORTED; ans[g] = A_ABORT
		:: else -> ans[g] = A_DOUBT
		fi;
		inflight[g] = 0 }
done:
	atomic { myinc = 0; myep = 0; m = 0; gm = 0; ex = 0; i = 0; left = 0; r = 0; h = 0; seen = 0 }
}

/* ============================== recovery (recovery.Loop) ============================== */

/* resolve: re-read the row; an active row is claimed and presumed aborted on its OWN gid (G is
 * named by no active row); prepared rows of the batch are decided together by the batch's
 * Kafka ids, then phase 2 on their logged gid G (idempotent via G's marker) */
inline resolve(g) {
	atomic {
		s = row[g]; gm = 0;
		if
		:: inflight[g] || !NONFINAL(s) -> s = L_NONE
		:: s == L_PREPARED && rowG[g] ->
			if :: row[0] == L_PREPARED && rowG[0] && !inflight[0] -> gm = gm | 1 :: else fi;
			if :: row[1] == L_PREPARED && rowG[1] && !inflight[1] -> gm = gm | 2 :: else fi
		:: else -> gm = BIT(g)
		fi
	}
	if
	:: s == L_ACTIVE || s == L_ABORTING ->
		if
		:: s == L_ACTIVE ->
			atomic { if :: row[g] == L_ACTIVE -> row[g] = L_ABORTING; s = L_ABORTING
			         :: else -> s = L_NONE fi }
		:: else
		fi;
		if
		:: s == L_ABORTING ->
			atomic { finishOwn(g, 0, h) }
			atomic { if :: row[g] == L_ABORTING -> row[g] = (h -> L_HMIXED : L_ABORTED) :: else fi }
		:: else
		fi
	:: s == L_PREPARED ->
		if
		:: atomic { rowG[g] -> ks_commit(r) }
		:: atomic { !rowG[g] -> ko_commit(g, r) }
		:: atomic { FAULT -> r = R_UNCLEAR }
		fi;
		left = (r != R_UNCLEAR -> gm : 0);
		do
		:: left == 0 -> break
		:: else ->
			atomic { i = LOW(left); phase2(i, r == R_OK, h) }
			atomic { if :: row[i] == L_PREPARED ->
				row[i] = (h -> L_HMIXED : (r == R_OK -> L_COMMITTED : L_ABORTED));
				if :: r == R_OK && !h && rowG[i] -> GHOST_REC(i) :: else fi
			         :: else fi;
				left = left & ~BIT(i); h = 0 }
		od
	:: s == L_COMMITTING ->
		atomic { phase2(g, 1, h) }
		atomic { if :: row[g] == L_COMMITTING ->
			row[g] = (h -> L_HMIXED : L_COMMITTED);
			if :: !h && rowG[g] -> GHOST_REC(g) :: else fi
		         :: else fi }
	:: else
	fi;
	atomic { s = 0; r = 0; h = 0; gm = 0; left = 0; i = 0 }
}

inline resolveDue() {
	g = 0;
	do
	:: atomic {
		do
		:: g < NR && !(NONFINAL(row[g]) && !inflight[g]) -> g++
		:: else -> break
		od;
		if
		:: g >= NR -> g = 0; break
		:: else
		fi }
		resolve(g); g++
	od
}

/* S3, the orphan sweep for G: claim before act */
#ifdef M_SWEEP_NO_INFLIGHT
#define SWEEP_SKIP_OK true
#else
#define SWEEP_SKIP_OK (!ginfl)
#endif
inline sweepG() {
	if
	:: atomic { gst == G_PREP && SWEEP_SKIP_OK -> skip }   /* listed prepared, not in flight here, old enough */
#ifdef M_SWEEP_NO_TOMBSTONE
		atomic { s = (reg == REG_MEMB -> REG_MEMB : REG_TOMB) }
#else
		/* INSERT a tombstone for G unless a registration is there, then read what is there */
		atomic { if :: reg == REG_NONE -> reg = REG_TOMB; tbm = ROWS :: else fi; s = reg }
#endif
		if
		:: s == REG_TOMB ->
#ifdef PROBE_SWEEP_TOMBSTONE
			assert(!(gst == G_PREP && nkill > 0));
#endif
			atomic { finishG(0, h); h = 0 }          /* ROLLBACK PREPARED G */
#ifdef M_TOMBSTONE_DELETED
			atomic { reg = REG_NONE }                /* the mutant: the tombstone cleaned up with G */
#endif
		:: s == REG_MEMB ->
			/* follow the members' logged final state */
			atomic {
				if
				:: ALLIN(regm, L_COMMITTED) -> s = 1
				:: ALLIN(regm, L_ABORTED) -> s = 2
				:: else -> s = 0
				fi }
			if
			:: s == 1 -> atomic { finishG(1, h); h = 0 }
			:: s == 2 -> atomic { finishG(0, h); h = 0 }
			:: else
			fi
		fi;
		s = 0
	:: else
	fi
}

/* S4 (recovery.Loop.sharedMarkers): G's marker deleted only when every member its registration
 * names is committed, or when the registration is gone; own markers of final rows deleted.
 * Then txlog.Log.DeleteShared (S-F5): a registration once every member it names is committed or
 * aborted; a tombstone once no row created before it is active (a late prepared write needs
 * every member row active, and each was created before G, so before the tombstone) */
inline sweepMarkers() {
	atomic {
#ifdef M_MARKER_FIRST_FINAL
		if :: gmarker && reg == REG_MEMB && ANYFINAL(regm) -> gmarker = 0 :: else fi;
#else
		if :: gmarker && (reg == REG_NONE || (reg == REG_MEMB && ALLIN(regm, L_COMMITTED))) -> gmarker = 0 :: else fi;
#endif
		if :: marker[0] && FINAL(row[0]) -> marker[0] = 0 :: else fi;
		if :: marker[1] && FINAL(row[1]) -> marker[1] = 0 :: else fi;
		/* (in the code a write of its own, after the markers; no step between them depends on
		 * it: a registration whose members are all final refuses nothing a write could do) */
		if
#ifdef M_REGISTRATION_FIRST_FINAL
		:: reg == REG_MEMB && ANYFINAL(regm) -> reg = REG_NONE; regm = 0
#else
		:: reg == REG_MEMB && ALLDONE(regm) -> reg = REG_NONE; regm = 0
#endif
		:: reg == REG_TOMB && NOACTIVE(tbm) -> reg = REG_NONE; tbm = 0
		:: else
		fi
	}
}

/* orphans of own gids (recovery.Loop.orphans): a prepared own gid not in flight of a committed
 * row is committed only if the row names it as where its work is (txlog.Log.NamesSQLGID), and
 * rolled back if the row names G (S-F6); of an aborted row, rolled back */
#ifdef M_ORPHAN_OLD_RULE
#define NAMES_OWN(g) true
#else
#define NAMES_OWN(g) (!rowG[g])
#endif
inline orphans() {
	atomic {
		g = 0;
		do
		:: g < NR ->
			if
			:: sql[g] == S_PREP && !inflight[g] && row[g] == L_COMMITTED && NAMES_OWN(g) -> finishOwn(g, 1, h)
			:: sql[g] == S_PREP && !inflight[g] && row[g] == L_COMMITTED && !NAMES_OWN(g) -> finishOwn(g, 0, h)
			:: sql[g] == S_PREP && !inflight[g] && row[g] == L_ABORTED -> finishOwn(g, 0, h)
			:: else
			fi;
			g++
		:: else -> break
		od;
		g = 0; h = 0
	}
}

proctype RecoveryA() {
	byte myinc, g, s, r, gm, left, i;
	bit h;
restart:
	atomic { !up && lockA == 0 -> lockA = 1; epochA++; heldA = epochA; up = 1; myinc = inc }
	{
		resolveDue();
		orphans();
		atomic { serving = 1 }
end_loop:
		do
		:: lockA != 1 ->
			serving = 0;
			atomic { lockA == 0 -> lockA = 1; epochA++; heldA = epochA; serving = 1 }
		:: resolveDue(); sweepG(); orphans(); sweepMarkers()
		od
	} unless { inc != myinc };
	goto restart
}

/* the broker times open transactions out; messages sent whose answer was lost land later */
proctype Net() {
end_net:
	do
	:: atomic { kst[0] == K_OPEN -> kst[0] = K_ABORT }
	:: atomic { kst[1] == K_OPEN -> kst[1] = K_ABORT }
	:: atomic { ko[0] == K_OPEN -> ko[0] = K_ABORT }
	:: atomic { ko[1] == K_OPEN -> ko[1] = K_ABORT }
#ifdef M_RERUN_WITHOUT_ROLLBACK
	:: atomic { gpb == 3 && gst == G_PREP -> gpb = 2; gst = G_ABORT }   /* the rollback lands */
#endif
	:: atomic { gpb == 3 && gst == G_OPEN -> gpb = 2; gst = G_PREP }    /* PREPARE G lands late */
	:: atomic { pw && WRITE_OK(pwm, pwep) -> pw = 0; log_prepared(pwm) } /* the prepared write lands late */
	od
}

proctype Faults() {
end_faults:
	do
	:: atomic { up && FAULT ->
		up = 0; serving = 0; inc++; GHOST_KILL;
		if :: lockA == 1 -> lockA = 0 :: else fi;
		inflight[0] = 0; inflight[1] = 0; ginfl = 0;
		openb = NONE; bmem = 0;
		/* the leader's connection is gone: an open G whose PREPARE was not sent is rolled back */
		if :: gst == G_OPEN && gpb == 0 -> gst = G_ABORT :: else fi;
		/* a reduction, not a behaviour: before the prepared write no row can ever name the
		 * batch's transactions, so when the broker times them out is unobservable; they are
		 * taken as timed out at once */
		if :: !wsent && kst[0] == K_OPEN -> kst[0] = K_ABORT :: else fi;
		if :: !wsent && kst[1] == K_OPEN -> kst[1] = K_ABORT :: else fi }
	:: atomic { lockA == 1 && FAULT -> lockA = 0 }
	od
}

init {
	atomic {
		run RecoveryA();
		run Request(0);
		run Request(1);
		run Net();
		run Faults()
	}
}
