# Shared by model/check.sh and model/check-batch.sh (sourced, not run): installs SPIN when it is
# missing, and defines run, which builds and runs one verifier of the model named by $model
# (set before sourcing; $here is the model folder), and finish, which prints the total and
# exits non-zero when a check failed or a mutant survived.

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
#   MODE: safety | bfs | dfs | ends | liveness     EXPECT: pass | violation
#   (ends: safety that also reports invalid end states, a process blocked for ever)
#   (dfs: a mutant whose breadth-first search does not fit in memory; its counterexample is
#   not the shortest)
# The checks run MODEL_JOBS at a time (default: the number of cores, at most 4; each verifier
# is single-threaded); their reports are printed in the order of the script by finish.
jobs_max=${MODEL_JOBS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}
names=()
run() {
  local name=$1
  names+=("$name")
  mkdir -p "$work/$name"
  while (( $(jobs -rp | wc -l) >= jobs_max )); do wait -n || true; done
  ( run_one "$@" ) 2>"$work/$name.report" &
}

# fail REASON: this check failed (run_one runs in a subshell of its own: finish collects it).
fail() { echo "$1" >"$dir/FAILED"; }

run_one() {
  local name=$1 mode=$2 expect=$3
  shift 3
  local dir="$work/$name" cc=(gcc -w) pan=(./pan)
  cp "$here/$model" "$dir/"
  local t0=$SECONDS
  case $mode in
    safety) cc+=(-O1 -DSAFETY -DNOFAIR -DCOLLAPSE); pan+=(-E -m200000 -w26) ;;
    bfs) cc+=(-O0 -DSAFETY -DNOFAIR -DBFS -DCOLLAPSE); pan+=(-E -w24) ;;
    dfs) cc+=(-O1 -DSAFETY -DNOFAIR -DCOLLAPSE); pan+=(-E -m200000 -w26) ;;
    ends) cc+=(-O1 -DSAFETY -DNOFAIR -DCOLLAPSE); pan+=(-m200000 -w26) ;;
    liveness) cc+=(-O1 -DCOLLAPSE -DNFAIR=3); pan+=(-a -f -m200000 -w24 -N resolved) ;;
  esac
  local defs=("$@")
  [[ $mode == liveness ]] && defs+=(-DLIVENESS)
  if ! (cd "$dir" && spin "${defs[@]}" -a "$model" >spin.out 2>&1 && "${cc[@]}" -o pan pan.c >cc.out 2>&1); then
    echo "== model: $name: could not build the verifier" >&2
    cat "$dir/spin.out" "$dir/cc.out" >&2 || true
    fail "$name (build)"
    return
  fi
  (cd "$dir" && "${pan[@]}" >pan.out 2>&1) || true
  local out="$dir/pan.out" secs=$((SECONDS - t0))
  local n_err; n_err="$(errors "$out")"
  if grep -q "max search depth too small" "$out"; then
    echo "== model: $name: search depth too small; result incomplete" >&2
    fail "$name (depth)"
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
        (cd "$dir" && spin -t -p -g "${defs[@]}" "$model" 2>&1 | tail -80) >&2 || true
        fail "$name"
      fi ;;
    violation)
      if [[ "${n_err:-0}" -ge 1 && -f "$dir/$model.trail" ]]; then
        local len; len="$(grep -cv '^-' "$dir/$model.trail")"
        printf '== model: %-24s broken    counterexample %s steps (%s states searched, %ss): %s\n' \
          "$name" "$len" "$(stored "$out")" "$secs" "$what" >&2
      else
        echo "== model: mutant $name: SPIN found NO violation (states $(stored "$out")): the model does not catch it" >&2
        fail "mutant $name not caught"
      fi ;;
  esac
}

# finish MESSAGE: the total time, then the failures (exit 1) or MESSAGE.
finish() {
  wait
  local n
  for n in "${names[@]}"; do
    cat "$work/$n.report" >&2
    if [[ -f "$work/$n/FAILED" ]]; then failed+=("$(cat "$work/$n/FAILED")"); fi
  done
  echo "== model: total $((SECONDS - total_start))s ($jobs_max at a time)" >&2
  if ((${#failed[@]})); then
    printf '== model: FAILED: %s\n' "${failed[@]}" >&2
    exit 1
  fi
  echo "== model: $1" >&2
}

echo "== model: SPIN $(spin -V | sed -n 's/Spin Version \([0-9.]*\).*/\1/p'); exhaustive search, partial-order reduction, COLLAPSE compression, no bitstate" >&2
