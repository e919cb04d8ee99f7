#!/usr/bin/env bash
# Checks the batching variant of the protocol (model/batch.pml: several requests in one Kafka
# transaction, docs/batching.md) and its extension to shared SQL transactions
# (model/sharedsql.pml: the members also share one PostgreSQL prepared transaction) with SPIN:
# every check of the design must find no violation, and every mutant must make SPIN find one.
# Exits non-zero otherwise.
#
#   bash model/check-batch.sh              the checks below (about four minutes on 2 cores)
#   MODEL_FULL=1 bash model/check-batch.sh adds the pool of two ids with three requests and
#                                          three requests with two faults (about 5 more
#                                          minutes, 5 GB)
#
# Method as model/check.sh: exhaustive state-space search with partial-order reduction (SPIN's
# default) and COLLAPSE state compression on bounded instances (the -D flags of each check);
# mutants use breadth-first search, so each counterexample printed is a shortest one. No
# bitstate: every search is exact. Not run by scripts/test.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

model=batch.pml
# shellcheck source=model/spinrun.sh
source "$here/spinrun.sh"

# The batching design: no violation.
#   two requests that may share one Kafka transaction (request 1's SQL may fail), one id,
#   recovery after every crash, three faults
run batch-two safety pass -DNR=2 -DNK=1 -DMAXF=3
#   three requests on one id: two share a batch while the third waits for the id (I1 for a
#   shared id), one fault
run batch-three-reuse safety pass -DNR=3 -DNK=1 -DMAXF=1
if [[ "${MODEL_FULL:-0}" == 1 ]]; then
  #   three requests, two ids: two batches at once
  run batch-pool-of-two safety pass -DNR=3 -DNK=2 -DMAXF=1
  #   three requests on one id, two faults (finding B1 needs this much)
  run batch-three-reuse-2faults safety pass -DNR=3 -DNK=1 -DMAXF=2
fi

# Probes: each path must be reachable (SPIN must reach the probe's assert), so the checks above
# are not vacuous.
run reach-shared-commit bfs violation -DNR=2 -DNK=1 -DMAXF=0 -DPROBE_SHARED_COMMIT
run reach-reproduce bfs violation -DNR=2 -DNK=1 -DMAXF=1 -DPROBE_REPRODUCE
run reach-group-recovery bfs violation -DNR=2 -DNK=1 -DMAXF=1 -DPROBE_GROUP_RECOVERY

# Mutants: each must be caught.
run M_JOIN_BEFORE_PREPARED bfs violation -DNR=2 -DNK=1 -DMAXF=0 -DM_JOIN_BEFORE_PREPARED
run M_RELEASE_FIRST_FINAL bfs violation -DNR=3 -DNK=1 -DMAXF=0 -DM_RELEASE_FIRST_FINAL
run M_ONE_BY_ONE bfs violation -DNR=2 -DNK=1 -DMAXF=1 -DM_ONE_BY_ONE
#   finding B1: needs three requests and two faults; breadth-first does not fit, depth-first
#   finds one in about 40 s (1.7 GB)
run M_RELEASE_PER_MEMBER dfs violation -DNR=3 -DNK=1 -DMAXF=2 -DSQLFAIL=0 -DM_RELEASE_PER_MEMBER

# Shared SQL transactions (model/sharedsql.pml): the members of a batch also share one
# PostgreSQL prepared transaction G (savepoints, one marker, one PREPARE; records produced
# alongside, the first Kafka transaction aborted and the riders produced again when a member
# does not prepare; the registration and tombstones in shared_gids and when they are deleted;
# the orphan sweep S3 and the marker sweep S4).
model=sharedsql.pml
#   two members, member 1's statements may fail (excluded, re-run alone), recovery and both
#   sweeps concurrent with the leader, three faults (39 M states, 2.3 GB)
run shared-sql safety pass -DMAXF=3
#   both members' statements may fail, two faults
run shared-sql-both-fail safety pass -DMAXF=2 -DSQLFAIL=3
#   S8 (DEFER): a follower may join with no row, which the prepared write inserts; an anchor
#   (a member whose row is older than G) in every such write, late Begins on every other path
run shared-sql-defer safety pass -DDEFER -DMAXF=3
run shared-sql-defer-both-fail safety pass -DDEFER -DMAXF=2 -DSQLFAIL=3
# Probes
run reach-defer-commit bfs violation -DDEFER -DMAXF=0 -DPROBE_DEFER_COMMIT
run reach-defer-no-anchor bfs violation -DDEFER -DMAXF=0 -DSQLFAIL=3 -DPROBE_NO_ANCHOR
run reach-sql-shared-commit bfs violation -DMAXF=0 -DPROBE_SHARED_COMMIT
run reach-excluded-alone bfs violation -DMAXF=0 -DPROBE_EXCLUDED_ALONE
run reach-rerun-after-exit bfs violation -DMAXF=1 -DPROBE_RERUN_AFTER_EXIT
run reach-sweep-tombstone bfs violation -DMAXF=1 -DPROBE_SWEEP_TOMBSTONE
run reach-recovery-on-g bfs violation -DMAXF=1 -DPROBE_GROUP_RECOVERY
# Mutants
run M_SWEEP_NO_TOMBSTONE bfs violation -DMAXF=1 -DM_SWEEP_NO_TOMBSTONE
run M_MARKER_FIRST_FINAL bfs violation -DMAXF=1 -DM_MARKER_FIRST_FINAL
run M_PRODUCE_BEFORE_EXCLUDE bfs violation -DMAXF=0 -DM_PRODUCE_BEFORE_EXCLUDE
#   caught by the one-copy property only (see model/README.md)
run M_RERUN_WITHOUT_ROLLBACK bfs violation -DMAXF=0 -DM_RERUN_WITHOUT_ROLLBACK
run M_NOTFOUND_IS_GONE bfs violation -DMAXF=1 -DM_NOTFOUND_IS_GONE
run M_RERUN_AFTER_LOST_WRITE bfs violation -DMAXF=1 -DM_RERUN_AFTER_LOST_WRITE
run M_WRITE_IGNORES_TOMBSTONE bfs violation -DMAXF=1 -DM_WRITE_IGNORES_TOMBSTONE
run M_TOMBSTONE_DELETED bfs violation -DMAXF=1 -DM_TOMBSTONE_DELETED
run M_REGISTRATION_FIRST_FINAL bfs violation -DMAXF=1 -DM_REGISTRATION_FIRST_FINAL
run M_RETRY_WRITE bfs violation -DMAXF=2 -DM_RETRY_WRITE
#   S8 without its anchor: a lost write and a failed late Begin let the write land after the
#   tombstone went; breadth-first needs 69 M states, depth-first finds one in about 12 s
run M_NO_ANCHOR dfs violation -DDEFER -DMAXF=2 -DM_NO_ANCHOR

finish "batching and shared SQL transactions: all checks passed, every mutant caught"
