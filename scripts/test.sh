#!/usr/bin/env bash
# The project's one test command (CI runs it through .ci/run).
#
#   1. scripts/services.sh start   real PostgreSQL + real Kafka 4.x + Apicurio Registry
#                                  (SCHEMA_REGISTRY_URL: the schema formats' tests)
#      services.sh install-pyclient
#                                  Confluent's Python client in a cached venv
#                                  (SCHEMA_READER_PYTHON: test/reader/read.py reads
#                                  the coordinator's records back with it)
#      chromium                    Debian's package, for the console's browser
#                                  tests; installed when missing
#      promtool                    Debian's prometheus package, for the alert
#                                  rules' checks (test/alerts_test.go); installed
#                                  when missing, its server left stopped
#   2. go vet ./...
#   3. bash model/check.sh         the protocol model, checked with SPIN (installs spin)
#      bash model/check-batch.sh   its shared-Kafka-transaction variant (docs/batching.md)
#   4. go test ./...               against the real broker and database
#   5. go test ./test/...          again, against the in-process kfake
#                                  (KAFKA_BROKERS empty, TEST_KAFKA=kfake)
#   5. scripts/fuzz-api.sh         schemathesis against `coordinator dev`
#                                  (its own PostgreSQL and Kafka)
#
# Every step runs even when an earlier step failed; the exit status is
# non-zero when any step failed. go output is passed through unchanged.
# Services stay up afterwards unless STOP_SERVICES=1 or CI=true.
# The browser tests' screenshots are kept in $ARTIFACTS_DIR (default
# test/artifacts, ignored by git).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${STOP_SERVICES:-0}" == 1 || "${CI:-}" == true ]]; then
  trap 'echo "== stopping services" >&2; bash scripts/services.sh stop || true' EXIT
fi

echo "== starting services" >&2
bash scripts/services.sh start >/dev/null

failed=()

# A missing client fails its test in CI (SCHEMA_READER_PYTHON unset), and this step.
echo "== Confluent's Python client (for test/reader/read.py)" >&2
bash scripts/services.sh install-pyclient || failed+=("services.sh install-pyclient (Confluent's Python client)")

eval "$(bash scripts/services.sh env)"
echo "== DATABASE_URL=$DATABASE_URL DATABASE_URL_2=$DATABASE_URL_2 KAFKA_BROKERS=$KAFKA_BROKERS" >&2
echo "== SCHEMA_REGISTRY_URL=$SCHEMA_REGISTRY_URL SCHEMA_READER_PYTHON=${SCHEMA_READER_PYTHON:-}" >&2

# The console's browser tests (test/console_test.go) drive a headless Chromium;
# without it they fail in CI. Installed from Debian's packages, as services.sh
# installs PostgreSQL.
have_chromium() {
  local b
  for b in chromium chromium-browser google-chrome headless-shell; do
    command -v "$b" >/dev/null 2>&1 && return 0
  done
  return 1
}
if ! have_chromium; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "== installing chromium (Debian package) for the browser tests" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends chromium >&2; then
      apt-get update -q >&2 || true
      apt-get install -y -q --no-install-recommends chromium >&2 || true
    fi
  fi
  have_chromium || failed+=("chromium install (apt-get update && apt-get install -y chromium)")
fi
# The alert rules (deploy/prometheus) are checked with promtool (test/alerts_test.go),
# which Debian ships in its prometheus package. Installing it may start the Prometheus
# server (on systems whose policy lets packages start services): it is stopped and
# disabled again, since only promtool is wanted.
if ! command -v promtool >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "== installing promtool (Debian package prometheus) for the alert rules' checks" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends prometheus >&2; then
      apt-get update -q >&2 || true
      apt-get install -y -q --no-install-recommends prometheus >&2 || true
    fi
    if [[ -x /etc/init.d/prometheus ]]; then
      /etc/init.d/prometheus stop >&2 2>&1 || true
      update-rc.d prometheus disable >/dev/null 2>&1 || true
    fi
    if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
      systemctl disable --now prometheus >&2 2>&1 || true
    fi
  fi
  command -v promtool >/dev/null 2>&1 || failed+=("promtool install (apt-get install -y --no-install-recommends prometheus)")
fi

export ARTIFACTS_DIR="${ARTIFACTS_DIR:-$PWD/test/artifacts}"
mkdir -p "$ARTIFACTS_DIR"
echo "== browser screenshots: $ARTIFACTS_DIR" >&2

echo "== go vet ./..." >&2
go vet ./... || failed+=("go vet")

echo "== bash model/check.sh (SPIN model of the commit protocol)" >&2
bash model/check.sh || failed+=("model/check.sh")
echo "== bash model/check-batch.sh (SPIN model of shared Kafka transactions)" >&2
bash model/check-batch.sh || failed+=("model/check-batch.sh")

echo "== go test ./... (real Kafka at $KAFKA_BROKERS, PostgreSQL)" >&2
env -u TEST_KAFKA go test -count=1 -timeout 30m ./... || failed+=("go test ./... (real Kafka)")

if [[ -d test && -n "$(find test -name '*.go' -print -quit)" ]]; then
  echo "== go test ./test/... (kfake)" >&2
  KAFKA_BROKERS='' TEST_KAFKA=kfake go test -count=1 -timeout 20m ./test/... \
    || failed+=("go test ./test/... (kfake)")
else
  echo "== go test ./test/... (kfake): no packages under ./test, skipped" >&2
fi

echo "== scripts/fuzz-api.sh (schemathesis against coordinator dev)" >&2
bash scripts/fuzz-api.sh || failed+=("scripts/fuzz-api.sh (schemathesis)")

if ((${#failed[@]})); then
  printf '== FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "== all steps passed" >&2
