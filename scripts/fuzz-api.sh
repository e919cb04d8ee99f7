#!/usr/bin/env bash
# Schema-driven fuzzing of the REST API with schemathesis (a tool nobody here wrote).
#
#   1. a Python venv with a pinned schemathesis, cached in $FUZZ_CACHE
#   2. go build ./cmd/coordinator; `coordinator dev` on a free loopback port (its own
#      throwaway PostgreSQL and in-process Kafka; nothing shared is touched)
#   3. schemathesis against /openapi.yaml, with an admin bearer token (dev runs with
#      COORDINATOR_TOKENS, so authentication is exercised too): every operation, every phase
#      (examples, coverage, fuzzing, stateful), a bounded number of examples per operation.
#      Every check but positive_data_acceptance fails the run: no 5xx (not_a_server_error),
#      answers conform to the spec (status code, content type, headers, body schema), requests
#      the spec forbids are refused (negative_data_rejection), and requests without or with a
#      wrong token get 401. (positive_data_acceptance is left out: a schema-valid request may
#      rightly be refused by what the schema cannot know: an unknown cursor, a timeout_ms
#      beyond the server's maximum, an id used before with another body.)
#   4. afterwards nothing may be left prepared in the dev PostgreSQL (pg_prepared_xacts)
#
# Exits non-zero on any failure. Settings (environment):
#   FUZZ_EXAMPLES   examples per operation and phase     (40)
#   FUZZ_MAX_TIME   seconds for the whole schemathesis run (120)
#   FUZZ_SEED       hypothesis seed                       (random; printed)
#   FUZZ_CACHE      venv cache                            ($HOME/.cache/kpgtx)
#   FUZZ_REPORT     directory for the JUnit/NDJSON reports (a temporary directory)
#   FUZZ_CHECKS     schemathesis checks                   (all but positive_data_acceptance)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

SCHEMATHESIS_VERSION=4.32.5
FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-40}
FUZZ_MAX_TIME=${FUZZ_MAX_TIME:-120}
FUZZ_SEED=${FUZZ_SEED:-$RANDOM$RANDOM}
FUZZ_CACHE=${FUZZ_CACHE:-$HOME/.cache/kpgtx}
VENV="$FUZZ_CACHE/schemathesis-$SCHEMATHESIS_VERSION"

log() { printf '[fuzz-api] %s\n' "$*" >&2; }
die() { printf '[fuzz-api] ERROR: %s\n' "$*" >&2; exit 1; }

# 1. schemathesis
if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  command -v python3 >/dev/null || die "python3 is required (apt-get install python3 python3-venv)"
  log "installing schemathesis $SCHEMATHESIS_VERSION into $VENV"
  rm -rf "$VENV"
  mkdir -p "$FUZZ_CACHE"
  python3 -m venv "$VENV" || die "python3 -m venv failed (apt-get install python3-venv)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fuzz-api.XXXXXX")
REPORT=${FUZZ_REPORT:-$WORK/report}
mkdir -p "$REPORT"
PID=""
cleanup() {
  if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true # dev removes its PostgreSQL and Kafka on SIGTERM
    for _ in $(seq 1 150); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# 2. the coordinator in dev mode
log "building cmd/coordinator"
go build -o "$WORK/coordinator" ./cmd/coordinator
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
BASE="http://127.0.0.1:$PORT"
TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
# Only dev's own settings: nothing from the caller's shell reaches it.
env -i PATH="$PATH" HOME="$HOME" TMPDIR="${TMPDIR:-/tmp}" \
  COORDINATOR_LOG_LEVEL=warn COORDINATOR_DEFAULT_TIMEOUT=5s COORDINATOR_TOKENS="fuzz:admin:$TOKEN" \
  "$WORK/coordinator" dev -listen "127.0.0.1:$PORT" >"$WORK/stdout" 2>"$WORK/stderr" &
PID=$!
for _ in $(seq 1 900); do
  grep -q 'Press Ctrl-C to stop.' "$WORK/stdout" 2>/dev/null && curl -fsS "$BASE/healthz" >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || { cat "$WORK/stderr" >&2; die "coordinator dev exited before it was ready"; }
  sleep 0.1
done
curl -fsS "$BASE/readyz" >/dev/null || { cat "$WORK/stderr" >&2; die "coordinator dev not ready at $BASE"; }
DSN=$(awk '$1 == "PostgreSQL" {print $2; exit}' "$WORK/stdout")
[[ -n "$DSN" ]] || die "no PostgreSQL DSN in the dev banner"
log "coordinator dev at $BASE (PostgreSQL $DSN)"

# 3. schemathesis
log "schemathesis $SCHEMATHESIS_VERSION: all operations and phases, $FUZZ_EXAMPLES examples, at most ${FUZZ_MAX_TIME}s, seed $FUZZ_SEED"
failed=()
start=$SECONDS
# From the work directory: schemathesis keeps its cache (.schemathesis) in the current one.
(cd "$WORK" && "$VENV/bin/schemathesis" run "$BASE/openapi.yaml" \
  --url "$BASE" \
  --phases examples,coverage,fuzzing,stateful \
  --checks "${FUZZ_CHECKS:-all}" \
  --exclude-checks positive_data_acceptance \
  --header "Authorization: Bearer $TOKEN" \
  --max-examples "$FUZZ_EXAMPLES" \
  --max-time "$FUZZ_MAX_TIME" \
  --seed "$FUZZ_SEED" \
  --workers 1 \
  --request-timeout 30 \
  --continue-on-failure \
  --suppress-health-check all \
  --report junit,ndjson --report-dir "$REPORT" \
  --output-truncate true) \
  || failed+=("schemathesis")
log "schemathesis ran for $((SECONDS - start))s"
# The server must still be alive and ready after the run.
curl -fsS "$BASE/healthz" >/dev/null || failed+=("healthz after the run")

# 4. nothing left prepared. The server resolves what it began before answering; give the
# recovery loop one interval for anything it had left to it.
PSQL=$(command -v psql || ls /usr/lib/postgresql/*/bin/psql 2>/dev/null | tail -n 1 || true)
[[ -n "$PSQL" ]] || die "psql is required to check pg_prepared_xacts"
query() { "$PSQL" "$DSN" -XAtqc "$1"; }
# Transactions the fuzzer prepared for its own decision ("decision": "external") wait for it
# until their decide_by (up to the Kafka transaction timeout): the caller's part is to decide
# them, so the run rolls back what it left waiting, through the API, as a caller would.
for id in $(query "SELECT request_id FROM coordinator_transactions WHERE state = 'waiting'"); do
  curl -fsS -o /dev/null -X POST -H "Authorization: Bearer $TOKEN" \
    "$BASE/v1/transactions/$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$id")/rollback" ||
    failed+=("rollback of the waiting transaction $id")
done
prepared=""
for _ in $(seq 1 30); do
  prepared=$(query "SELECT count(*) FROM pg_prepared_xacts")
  [[ "$prepared" == 0 ]] && break
  sleep 1
done
if [[ "$prepared" != 0 ]]; then
  query "SELECT gid, prepared FROM pg_prepared_xacts" >&2 || true
  failed+=("$prepared transaction(s) left prepared")
fi
inflight=$(query "SELECT count(*) FROM coordinator_transactions WHERE state NOT IN ('committed', 'aborted')")
log "after the run: $prepared prepared, $inflight log rows not final"

if ((${#failed[@]})); then
  grep -iE 'level=(error|warn)' "$WORK/stderr" | tail -n 40 >&2 || true
  printf '[fuzz-api] FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
log "passed"
