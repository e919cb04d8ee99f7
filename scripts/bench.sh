#!/usr/bin/env bash
# The project's benchmarks against real PostgreSQL and real Kafka, each next to its baseline
# in the same run:
#   BenchmarkCommit    committed requests through the coordinator vs the same SQL + Kafka work
#                      by hand (plain commit + plain transactional produce), c=1 and c=16:
#                      p50/p99 latency and throughput
#   BenchmarkRecovery  one recovery pass over 1,000 in-doubt transactions, parallelism 1 vs 16
# Extra arguments go to go test (e.g. -count=3 for benchstat).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/services.sh start >/dev/null
eval "$(bash scripts/services.sh env)"
env -u TEST_KAFKA go test ./test -run '^$' -bench 'BenchmarkCommit' -benchtime 3s "$@"
env -u TEST_KAFKA go test ./test -run '^$' -bench 'BenchmarkRecovery' -benchtime 1x "$@"
