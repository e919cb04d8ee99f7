#!/usr/bin/env bash
# Checks the protocol model (model/kpgtx.pml), retention against the hanging-transaction
# repair (model/retention.pml) and a pipeline member's chained batches (model/chain.pml), with SPIN: every check of the protocol as fixed
# must find no violation, and every mutant must make SPIN find one. Exits non-zero otherwise.
#
#   bash model/check.sh            the checks below (a few minutes on 2 cores)
#   MODEL_FULL=1 bash model/check.sh   adds the two largest configurations (about 5 more minutes, 2.7 GB)
#
# Method: exhaustive state-space search with partial-order reduction (SPIN's default) and
# COLLAPSE state compression, on bounded instances (the -D flags of each check); mutants use
# breadth-first search, so each counterexample printed is a shortest one. Liveness uses
# acceptance-cycle search under weak fairness (pan -a -f). No bitstate: every search is exact.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

model=kpgtx.pml
# shellcheck source=model/spinrun.sh
source "$here/spinrun.sh"

# The protocol as fixed (claim before act, fencing, one-phase evidence: I9–I11): no violation.
#   two-phase requests racing each other and recovery on one id (reuse), three faults
run requests-recovery safety pass -DN2PC=2 -DHAS1PC=0 -DHASB=0 -DNK=1 -DMAXF=3
#   two ids: two transactions at once
run pool-of-two safety pass -DN2PC=2 -DHAS1PC=0 -DHASB=0 -DNK=2 -DMAXF=2
#   one-phase and two-phase with a second instance taking over (lock loss, fencing)
run onephase-takeover safety pass -DN2PC=1 -DHAS1PC=1 -DHASB=1 -DNK=1 -DMAXF=2
#   two two-phase transactions, takeover and id reuse
run takeover-reuse safety pass -DN2PC=2 -DHAS1PC=0 -DHASB=1 -DNK=1 -DMAXF=1
if [[ "${MODEL_FULL:-0}" == 1 ]]; then
  run takeover-reuse-2faults safety pass -DN2PC=2 -DHAS1PC=0 -DHASB=1 -DNK=1 -DMAXF=2
  run full safety pass -DN2PC=2 -DHAS1PC=1 -DHASB=0 -DNK=1 -DMAXF=2
fi
#   a consumer group's offsets in g0's transaction (O1, O2): a rebalance at any step, id reuse
run offsets safety pass -DN2PC=2 -DHAS1PC=0 -DHASB=0 -DNK=1 -DMAXF=2 -DHASOFF=1
#   the same with a takeover of A by B
run offsets-takeover safety pass -DN2PC=1 -DHAS1PC=0 -DHASB=1 -DNK=1 -DMAXF=2 -DHASOFF=1
#   answers at the decision (D1): a 200 given there is never followed by an abort
run decided safety pass -DN2PC=2 -DHAS1PC=0 -DHASB=0 -DNK=1 -DMAXF=2 -DHASDEC=1
#   the same with a takeover of A by B
run decided-takeover safety pass -DN2PC=1 -DHAS1PC=0 -DHASB=1 -DNK=1 -DMAXF=2 -DHASDEC=1
#   progress: once faults stop, every in-doubt transaction is resolved (weak fairness)
run progress liveness pass -DN2PC=1 -DHAS1PC=1 -DHASB=1 -DNK=1 -DMAXF=1

# Mutants: each must be caught.
run M_ROLLBACK_BEFORE_CLAIM bfs violation -DN2PC=1 -DHAS1PC=0 -DHASB=0 -DNK=1 -DMAXF=1 -DM_ROLLBACK_BEFORE_CLAIM
run M_NO_FENCE bfs violation -DN2PC=1 -DHAS1PC=0 -DHASB=1 -DNK=1 -DMAXF=1 -DM_NO_FENCE
run M_1PC_LOST_ABORTED bfs violation -DN2PC=1 -DHAS1PC=1 -DHASB=0 -DNK=1 -DMAXF=1 -DM_1PC_LOST_ABORTED
run M_RELEASE_BEFORE_FINAL bfs violation -DN2PC=2 -DHAS1PC=0 -DHASB=0 -DNK=1 -DMAXF=0 -DM_RELEASE_BEFORE_FINAL
run M_PREPARED_AFTER_ENDTXN bfs violation -DN2PC=1 -DHAS1PC=0 -DHASB=0 -DNK=1 -DMAXF=1 -DM_PREPARED_AFTER_ENDTXN
run M_1PC_NO_FENCING_MARKER bfs violation -DN2PC=1 -DHAS1PC=1 -DHASB=0 -DNK=1 -DMAXF=1 -DM_1PC_NO_FENCING_MARKER
run M_REINIT_UNLOCKED bfs violation -DN2PC=1 -DHAS1PC=0 -DHASB=1 -DNK=1 -DMAXF=1 -DM_REINIT_UNLOCKED
run M_ABORT_ON_LOST_PREPARED bfs violation -DN2PC=1 -DHAS1PC=0 -DHASB=1 -DNK=1 -DMAXF=2 -DM_ABORT_ON_LOST_PREPARED
run M_IGNORE_GENERATION bfs violation -DN2PC=1 -DHAS1PC=0 -DHASB=0 -DNK=1 -DMAXF=1 -DHASOFF=1 -DM_IGNORE_GENERATION
run M_REFUSED_RIDES bfs violation -DN2PC=1 -DHAS1PC=0 -DHASB=0 -DNK=1 -DMAXF=1 -DHASOFF=1 -DM_REFUSED_RIDES
run M_DECIDED_ON_UNCLEAR bfs violation -DN2PC=1 -DHAS1PC=0 -DHASB=0 -DNK=1 -DMAXF=1 -DHASDEC=1 -DM_DECIDED_ON_UNCLEAR
run M_DUE_MISSES_ABORTING liveness violation -DN2PC=1 -DHAS1PC=0 -DHASB=0 -DNK=1 -DMAXF=2 -DM_DUE_MISSES_ABORTING

# Retention against the hanging-transaction repair (model/retention.pml: R2, R3, H1, H2): one
# transactional id, two transactions on it one after another, two partitions, markers lost.
model=retention.pml
#   R2 in force: atomicity, and no decided transaction ends cannot_repair
run retention safety pass -DNT=2 -DNP=2 -DMAXF=2
#   R2 off: H2 (absence is evidence only above the mark) alone keeps atomicity
run retention-noguard safety pass -DNT=2 -DNP=2 -DMAXF=2 -DRETGUARD=0
# Probes: each path must be reachable, so the checks above are not vacuous.
run reach-remove-after-hang bfs violation -DMAXF=2 -DPROBE_REMOVE_AFTER_HANG
run reach-abort-above-mark bfs violation -DMAXF=2 -DPROBE_ABORT_ABOVE_MARK
run reach-cannot-repair bfs violation -DMAXF=2 -DRETGUARD=0 -DPROBE_CANNOT_REPAIR
# Mutants: each must be caught.
run M_RETAIN_NO_GUARD bfs violation -DMAXF=2 -DM_RETAIN_NO_GUARD
run M_CHECK_BEFORE_FINAL bfs violation -DMAXF=2 -DM_CHECK_BEFORE_FINAL
run M_REPAIR_ABORT_ON_MISSING bfs violation -DMAXF=2 -DRETGUARD=0 -DM_REPAIR_ABORT_ON_MISSING
run M_MARK_AFTER_REMOVE bfs violation -DMAXF=2 -DRETGUARD=0 -DM_MARK_AFTER_REMOVE
run M_MARK_BEFORE_ROWS bfs violation -DMAXF=2 -DRETGUARD=0 -DM_MARK_BEFORE_ROWS

# A pipeline member's batches in flight (model/chain.pml: O4a, O4b): batches chained one after
# the other, crashes, Kafka's timeout and a rebalance at any step, markers landing in any order.
model=chain.pml
run chain safety pass -DNB=3 -DMAXF=3
#   no batch waits for ever: every run ends with every process at its end
run chain-ends ends pass -DNB=3 -DMAXF=2
# Mutants: each must be caught.
run M_OFFSETS_EARLY bfs violation -DNB=2 -DMAXF=2 -DM_OFFSETS_EARLY
run M_NO_COMMIT_WAIT bfs violation -DNB=2 -DMAXF=2 -DM_NO_COMMIT_WAIT
run M_PREPARED_IS_COMMIT bfs violation -DNB=2 -DMAXF=2 -DM_PREPARED_IS_COMMIT

# Prepare now, decide later (model/external.pml: X1-X4, designed before it is built): the
# caller's commit, stale commit, rollback or silence, the deadline, an operator's abort, Kafka's
# timeout and a crash of every handler at every step.
model=external.pml
run external ends pass
# Mutants: each must be caught.
run M_COMMIT_AFTER_ABORT bfs violation -DM_COMMIT_AFTER_ABORT
run M_STALE_STATE bfs violation -DM_STALE_STATE
run M_ABORT_WITHOUT_CLAIM bfs violation -DM_ABORT_WITHOUT_CLAIM
finish "all checks passed, every mutant caught"
