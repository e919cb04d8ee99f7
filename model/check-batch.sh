#!/usr/bin/env bash
# Checks the batching variant of the protocol (model/batch.pml: several requests in one Kafka
# transaction, issue 10, docs/batching.md) with SPIN: every check of the design must find no
# violation, and every mutant must make SPIN find one. Exits non-zero otherwise.
#
#   bash model/check-batch.sh              the checks below (about two and a half minutes on 2 cores)
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

if ! command -v spin >/dev/null 2>&1; then
  echo "== model: spin not on PATH; installing the Debian package" >&2
  if [[ "$(id -u)" == 0 ]]; then
    apt-get update -qq >/dev/null && apt-get install -y -qq spin >/dev/null
  else
    sudo apt-get update -qq >/dev/null && sudo apt-get install -y -qq spin >/dev/null
  fi
fi
command -v gcc >/dev/null 2>&1 || { echo "== model: gcc is needed to compile the verifier" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
total_start=$SECONDS

# field NAME FILE: one number from pan's report
stored() { awk '/states, stored/ {print $1; exit}' "$1"; }
depth() { sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$1" | head -1; }
elapsed() { sed -n 's/^pan: elapsed time \([0-9.e+]*\).*/\1/p' "$1" | head -1; }
errors() { sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$1" | head -1; }

# run NAME MODE EXPECT DEFINES...
#   MODE: safety | bfs | dfs | liveness     EXPECT: pass | violation
#   (dfs: a mutant whose breadth-first search does not fit in memory; its counterexample is
#   not the shortest)
run() {
  local name=$1 mode=$2 expect=$3
  shift 3
  local dir="$work/$name" cc=(gcc -w) pan=(./pan)
  mkdir -p "$dir"
  cp "$here/batch.pml" "$dir/"
  local t0=$SECONDS
  case $mode in
    safety) cc+=(-O1 -DSAFETY -DNOFAIR -DCOLLAPSE); pan+=(-E -m200000 -w26) ;;
    bfs) cc+=(-O0 -DSAFETY -DNOFAIR -DBFS -DCOLLAPSE); pan+=(-E -w24) ;;
    dfs) cc+=(-O1 -DSAFETY -DNOFAIR -DCOLLAPSE); pan+=(-E -m200000 -w26) ;;
    liveness) cc+=(-O1 -DCOLLAPSE -DNFAIR=3); pan+=(-a -f -m200000 -w24 -N resolved) ;;
  esac
  local defs=("$@")
  [[ $mode == liveness ]] && defs+=(-DLIVENESS)
  if ! (cd "$dir" && spin "${defs[@]}" -a batch.pml >spin.out 2>&1 && "${cc[@]}" -o pan pan.c >cc.out 2>&1); then
    echo "== model: $name: could not build the verifier" >&2
    cat "$dir/spin.out" "$dir/cc.out" >&2 || true
    failed+=("$name (build)")
    return
  fi
  (cd "$dir" && "${pan[@]}" >pan.out 2>&1) || true
  local out="$dir/pan.out" secs=$((SECONDS - t0))
  local n_err; n_err="$(errors "$out")"
  if grep -q "max search depth too small" "$out"; then
    echo "== model: $name: search depth too small; result incomplete" >&2
    failed+=("$name (depth)")
    return
  fi
  local what; what="$(grep -m1 -E '^pan:[0-9]+: |acceptance cycle' "$out" | sed 's/^pan:[0-9]*: *//' || true)"
  case $expect in
    pass)
      if [[ "$n_err" == 0 ]]; then
        printf '== model: %-24s ok        states %s, depth %s, pan %ss, total %ss  [%s]\n' \
          "$name" "$(stored "$out")" "$(depth "$out")" "$(elapsed "$out")" "$secs" "$*" >&2
      else
        echo "== model: $name: VIOLATION in the protocol as fixed: $what" >&2
        (cd "$dir" && spin -t -p -g "${defs[@]}" batch.pml 2>&1 | tail -80) >&2 || true
        failed+=("$name")
      fi ;;
    violation)
      if [[ "${n_err:-0}" -ge 1 && -f "$dir/batch.pml.trail" ]]; then
        local len; len="$(grep -cv '^-' "$dir/batch.pml.trail")"
        printf '== model: %-24s broken    counterexample %s steps (%s states searched, %ss): %s\n' \
          "$name" "$len" "$(stored "$out")" "$secs" "$what" >&2
      else
        echo "== model: mutant $name: SPIN found NO violation (states $(stored "$out")): the model does not catch it" >&2
        failed+=("mutant $name not caught")
      fi ;;
  esac
}

echo "== model: SPIN $(spin -V | sed -n 's/Spin Version \([0-9.]*\).*/\1/p'); exhaustive search, partial-order reduction, COLLAPSE compression, no bitstate" >&2

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

echo "== model: total $((SECONDS - total_start))s" >&2
if ((${#failed[@]})); then
  printf '== model: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "== model: batching: all checks passed, every mutant caught" >&2
