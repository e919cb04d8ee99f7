#!/usr/bin/env bash
# The project's benchmarks against real PostgreSQL and real Kafka, each next to its baselines
# in the same run:
#   BenchmarkThroughput  one insert + one 100-byte record per request: the coordinator (its own
#                        process, REST API), the same without shared Kafka transactions
#                        (unshared), the same 2PC inline (no log, no HTTP), its floors with
#                        the one log write I2 needs (inline-2pc-logged) or with the PREPARE
#                        as that write (inline-2pc-gidlog), that inline 2PC with the requests
#                        in flight sharing one PostgreSQL and one Kafka transaction
#                        (inline-shared: the bound of sharing the SQL side too; with the
#                        log writes the coordinator's rules need, one statement per group:
#                        inline-shared-logged, its rows before the work, and
#                        inline-shared-overlap, its rows beside the work, as the retired I14),
#                        the
#                        coordinator answering at the decision ("answer": "decided", D1:
#                        coordinator-decided), the same request prepared for its caller's
#                        decision and committed by a second call (prepare-commit: X1, X2; at
#                        c ≤ 32, the waiting bound it runs with) and
#                        the by-hand dual write (not atomic), at c=1, 16, 64, 256: throughput, p50, p99,
#                        ratios to the dual write (x dual/s, x p50), the p50 against the protocol's
#                        floor inline-2pc-logged (x floor), the throughput against the shared
#                        path's floor inline-shared-logged (x sh floor), CPU per committed transaction of the
#                        coordinator, PostgreSQL and the Kafka broker (from /proc), and the
#                        machine's idle and stolen shares over each run (idle %, steal %: a
#                        run near 0 % idle was bound by CPU; stolen time is other tenants')
#                        and a request of 100 inserts and 100 records (coordinator-100x) against
#                        the same work by hand in one PostgreSQL and one Kafka transaction
#                        (by-hand-100x, the ratios of the "-100x" rows are against it) and
#                        its floor, inline-2pc-logged with those 100 inserts and records
#                        (inline-2pc-logged-100x, the "-100x" rows' x floor): the
#                        per-statement and per-record costs apart from the per-request ones;
#                        inline-2pc-begun is inline-2pc-logged with the coordinator's durable
#                        row before the work and its final write behind the answer;
#                        inline-kept (and inline-kept-100x) makes every statement and log
#                        write the coordinator's guarantees keep with its own packages
#                        (txlog, sqltxn), inline: the coordinator's floor without HTTP, the
#                        body or the request engine
#   BenchmarkPipeline    a consume-transform-write pipeline end to end, by 1 and 3 members of
#                        one consumer group (rows "1m", "3m"): each input record one insert and
#                        one output record, batches as polled; through the coordinator with the
#                        batch's offsets in the transaction (pipeline) vs by hand without
#                        atomicity (pipeline-by-hand: SQL commit, produce, commitSync); txn/s is
#                        records/s, p50/p99 a batch's latency, the ratios against the by-hand row;
#                        with BENCH_BASELINE, the row pipeline-baseline is that build's;
#                        BENCH_INFLIGHT sets a member's batches in flight (O4; default: the
#                        client's), BENCH_BASELINE_INFLIGHT the baseline's (default 1);
#                        BENCH_GATHER a batch's records gathered from several polls while the
#                        window is full (default: the client's, 4 polls),
#                        BENCH_BASELINE_GATHER the baseline's (default 100: one poll);
#                        BENCH_BYHAND_POLL the by-hand loop's records per poll and commit
#                        (default 100)
#   BenchmarkRecovery    one recovery pass over 10,000 in-doubt transactions, alone (each its own
#                        Kafka and SQL transaction) and as batch members (16 per transaction),
#                        each resolved row by row (the baseline) and by the page (C1): pass
#                        time, txn/s, CPU per transaction of the loop, PostgreSQL and the broker,
#                        untimed setup (setup-s); BENCH_RECOVERY chooses the runs; needs
#                        max_prepared_transactions >= 10,000 (services.sh sets 12000); about
#                        three minutes on a 2-core machine
# Extra arguments go to go test (e.g. -count=3). BENCH_ROUNDS=N runs the whole benchmark N times,
# one go test after the other, so that every round has each variant next to the others: -count
# runs each variant its N times in a row, and on a shared machine a slow stretch then lands on
# one variant alone, which misleads an A/B comparison; and every second round runs the variants
# in the reverse order, as the position in a round biases a variant too. BENCHTIME (default 3s)
# sets -benchtime of the throughput benchmark. PPROF_SECONDS=N profiles the coordinator process
# over the first N seconds of its c=64 run (PPROF_C=16: its c=16 run; keep BENCHTIME longer;
# PPROF_VARIANT=coordinator-100x: that row's run instead of the coordinator row's) and
# prints the profile's top entries; the profile is kept as test/artifacts/coordinator-c64.pprof
# (go tool pprof -http=:). PPROF_C=1m (or 3m) profiles BenchmarkPipeline's coordinator in its run
# with that many members instead (coordinator-c1m.pprof).
# BENCH_COORDINATOR_ENV="KAFKA_SHARED_MAX=1 ..." adds settings to the coordinator's, to compare
# tunings (KAFKA_SHARED_MAX=1 is the coordinator without shared Kafka transactions).
# BENCH_BASELINE_ENV="NAME=value ..." adds settings to the baseline alone (BENCH_BASELINE=HEAD
# BENCH_BASELINE_ENV=... compares a tuning against the same build in one run).
# BENCH_C=1,16 chooses the throughput benchmark's concurrencies (default 1,16,64,256); the
# coordinator rows report the process's resident memory after each run (coord MB), from which
# the memory per request in flight follows (c=256 against c=1).
# BENCH_VALUE=binary|json sends the coordinator's 100-byte values typed ({"type":"binary"} or
# {"type":"json"}; the baseline row keeps the plain string, which any older build takes), so
# BENCH_BASELINE=<revision> BENCH_VALUE=binary compares typed values with the plain path before.
# BENCH_BASELINE=<git revision> builds the coordinator of that revision (in a temporary git
# worktree) and runs it as the row `baseline` in the same run: a change against the code before it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${BENCH_ROUNDS:-1}
case "$rounds" in ''|*[!0-9]*|0) echo "BENCH_ROUNDS: a positive number, not \"$rounds\"" >&2; exit 2 ;; esac
bash scripts/services.sh start >/dev/null
eval "$(bash scripts/services.sh env)"
out=$(mktemp)
baseline_dir=""
trap 'rm -f "$out"; if [ -n "$baseline_dir" ]; then git worktree remove --force "$baseline_dir" >/dev/null 2>&1 || true; fi' EXIT
if [ -n "${BENCH_BASELINE:-}" ]; then
  baseline_dir=$(mktemp -d)
  rmdir "$baseline_dir"
  git worktree add --detach "$baseline_dir" "$BENCH_BASELINE" >/dev/null
  (cd "$baseline_dir" && go build -o "$baseline_dir/coordinator-baseline" ./cmd/coordinator)
  export BENCH_BASELINE_BINARY="$baseline_dir/coordinator-baseline"
  echo "baseline: $(git rev-parse --short "$BENCH_BASELINE") ($BENCH_BASELINE_BINARY)" >&2
fi
profile=""
if [ -n "${PPROF_SECONDS:-}" ]; then
  mkdir -p test/artifacts
  profile=$PWD/test/artifacts/coordinator-c${PPROF_C:-64}.pprof
  rm -f "$profile"
fi
for round in $(seq "$rounds"); do
  # Only the first round is profiled.
  if [ "$round" -gt 1 ]; then profile_now=""; else profile_now=$profile; fi
  # Every second round runs the variants in the reverse order (BENCH_ORDER): a variant's position
  # in a round moved its figures by 10 to 20 % on this machine.
  if [ $((round % 2)) -eq 0 ]; then order=reverse; else order=forward; fi
  env -u TEST_KAFKA BENCH_ORDER="$order" BENCH_PPROF_SECONDS="${PPROF_SECONDS:-}" BENCH_PPROF_C="${PPROF_C:-}" BENCH_PPROF_VARIANT="${PPROF_VARIANT:-}" BENCH_PPROF_FILE="$profile_now" \
    go test ./test -run '^$' -bench 'BenchmarkThroughput|BenchmarkPipeline' -benchtime "${BENCHTIME:-3s}" -timeout 30m "$@" | tee -a "$out"
done

# One table of every round's figures (scripts/bench-summary.awk).
awk -f scripts/bench-summary.awk "$out"

if [ -n "$profile" ] && [ -s "$profile" ]; then
  echo
  echo "coordinator CPU profile at c=${PPROF_C:-64} ($profile), top entries by own time:"
  go tool pprof -top -nodecount=35 "$profile" 2>/dev/null | sed -n "1,45p"
fi

# Extra arguments that choose benchmarks (-bench) are the throughput run's: passed here too they
# would replace BenchmarkRecovery with a one-iteration throughput run.
for a in "$@"; do
  case "$a" in
    -bench|-bench=*|--bench|--bench=*)
      echo "(-bench given: BenchmarkRecovery skipped; run scripts/bench.sh without -bench for it)" >&2
      exit 0 ;;
  esac
done
env -u TEST_KAFKA go test ./test -run '^$' -bench 'BenchmarkRecovery' -benchtime 1x -timeout 30m "$@"
