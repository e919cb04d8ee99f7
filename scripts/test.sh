#!/usr/bin/env bash
# The project's one test command (CI runs it through .ci/run).
#
#   1. scripts/services.sh start   real PostgreSQL + real Kafka 4.x
#   2. go vet ./...
#   3. bash model/check.sh         the protocol model, checked with SPIN (installs spin)
#   4. go test ./...               against the real broker and database
#   5. go test ./test/...          again, against the in-process kfake
#                                  (KAFKA_BROKERS empty, TEST_KAFKA=kfake)
#
# Every step runs even when an earlier step failed; the exit status is
# non-zero when any step failed. go output is passed through unchanged.
# Services stay up afterwards unless STOP_SERVICES=1 or CI=true.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${STOP_SERVICES:-0}" == 1 || "${CI:-}" == true ]]; then
  trap 'echo "== stopping services" >&2; bash scripts/services.sh stop || true' EXIT
fi

echo "== starting services" >&2
bash scripts/services.sh start >/dev/null
eval "$(bash scripts/services.sh env)"
echo "== DATABASE_URL=$DATABASE_URL DATABASE_URL_2=$DATABASE_URL_2 KAFKA_BROKERS=$KAFKA_BROKERS" >&2

failed=()

echo "== go vet ./..." >&2
go vet ./... || failed+=("go vet")

echo "== bash model/check.sh (SPIN model of the commit protocol)" >&2
bash model/check.sh || failed+=("model/check.sh")

echo "== go test ./... (real Kafka at $KAFKA_BROKERS, PostgreSQL)" >&2
env -u TEST_KAFKA go test -count=1 -timeout 30m ./... || failed+=("go test ./... (real Kafka)")

if [[ -d test && -n "$(find test -name '*.go' -print -quit)" ]]; then
  echo "== go test ./test/... (kfake)" >&2
  KAFKA_BROKERS='' TEST_KAFKA=kfake go test -count=1 -timeout 20m ./test/... \
    || failed+=("go test ./test/... (kfake)")
else
  echo "== go test ./test/... (kfake): no packages under ./test, skipped" >&2
fi

if ((${#failed[@]})); then
  printf '== FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "== all steps passed" >&2
