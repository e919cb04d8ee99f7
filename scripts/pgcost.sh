#!/usr/bin/env bash
# What one request costs PostgreSQL, statement by statement: pgbench runs each shape of work on
# the PostgreSQL of scripts/services.sh (a scratch database, dropped afterwards) and prints the
# server's CPU per transaction, read from /proc for every process of the server's user. It
# measures the server only: no coordinator, no Kafka (docs/batching.md section 11).
#   SECONDS_EACH (default 8) and CLIENTS (default 16) tune the runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/services.sh start >/dev/null
eval "$(bash scripts/services.sh env)"
command -v pgbench >/dev/null || { echo "pgcost: pgbench not found (Debian: postgresql-client)" >&2; exit 1; }
base=${DATABASE_URL%/*}
db=pgcost_$$
dsn="$base/$db?sslmode=disable"
work=$(mktemp -d)
trap 'psql -q "$base/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
psql -q "$base/postgres?sslmode=disable" -c "CREATE DATABASE $db"
for f in migrations/*.up.sql; do psql -q -v ON_ERROR_STOP=1 "$dsn" -f "$f" >/dev/null; done
psql -q -v ON_ERROR_STOP=1 "$dsn" <<'SQL'
CREATE TABLE orders (id text PRIMARY KEY, total int);
ALTER TABLE coordinator_markers ADD COLUMN IF NOT EXISTS aborted boolean NOT NULL DEFAULT false;
INSERT INTO coordinator_instances (instance_id, txn_id_prefix, pool_size, epoch) VALUES ('i', 'p', 1, 1);
SQL

key="'k' || :client_id || '-' || :r"
enter="SELECT pg_catalog.set_config('kpgtx.xid', pg_catalog.pg_current_xact_id()::text, true);"
guard_expr="pg_catalog.current_setting(CASE WHEN pg_catalog.current_setting('kpgtx.xid', true) = pg_catalog.pg_current_xact_id()::text THEN 'kpgtx.xid' ELSE 'kpgtx.left' END)"
guard="SELECT $guard_expr;"
# Keys are random over 9e18 values: no two transactions of a run collide.
script() { { echo '\set r random(1, 9000000000000000000)'; cat; } > "$work/$1.sql"; }
script dual <<EOF
BEGIN;
INSERT INTO orders VALUES ($key, 1);
COMMIT;
EOF
script 2pc <<EOF
BEGIN;
INSERT INTO orders VALUES ($key, 1);
PREPARE TRANSACTION 'k:client_id-:r';
COMMIT PREPARED 'k:client_id-:r';
EOF
script 2pc-marker <<EOF
BEGIN;
INSERT INTO orders VALUES ($key, 1);
INSERT INTO coordinator_markers (gid) VALUES ($key);
PREPARE TRANSACTION 'k:client_id-:r';
COMMIT PREPARED 'k:client_id-:r';
EOF
script participant <<EOF
BEGIN;
$enter
INSERT INTO orders VALUES ($key, 1);
INSERT INTO coordinator_markers (gid) SELECT $key WHERE $guard_expr IS NOT NULL;
PREPARE TRANSACTION 'k:client_id-:r';
COMMIT PREPARED 'k:client_id-:r';
DISCARD ALL;
EOF
log_writes() {
  cat <<EOF
WITH ins AS (INSERT INTO coordinator_transactions (gid, request_id, request_digest, instance_id, state, sql_gids, owner_instance, owner_epoch, one_phase) SELECT $key, $key, '\\x00', 'i', 'active', '[{"gid":"x","database":"default"}]', 'i', 1, false RETURNING gid)$1 SELECT gid FROM ins;
WITH u AS (UPDATE coordinator_transactions SET state = 'prepared', transactional_id = 'p-i-1', producer_id = 1000, producer_epoch = 5, prepared_state = 'x', kafka_records = '[{"topic":"t","partition":0,"offset":100}]', prepared_at = now(), updated_at = now() WHERE gid = $key AND state = 'active' RETURNING gid)$2 SELECT gid FROM u;
WITH u AS (UPDATE coordinator_transactions SET state = 'committed', finished_at = now(), updated_at = now() WHERE gid = $key AND state = 'prepared' RETURNING gid)$3 SELECT gid FROM u;
EOF
}
log_writes ", ev AS (INSERT INTO coordinator_events (gid, state) SELECT gid, 'active' FROM ins)" \
  ", ev AS (INSERT INTO coordinator_events (gid, state) SELECT gid, 'prepared' FROM u)" \
  ", ev AS (INSERT INTO coordinator_events (gid, state) SELECT gid, 'committed' FROM u)" | script log
log_writes "" "" "" | script log-no-events
{
  echo "BEGIN;"; echo "$enter"
  for i in $(seq 1 15); do
    echo "SAVEPOINT m;"; echo "INSERT INTO orders VALUES ($key || '-$i', 1);"; echo "$guard"; echo "RELEASE SAVEPOINT m;"
  done
  echo "INSERT INTO coordinator_markers (gid) VALUES ($key);"
  echo "PREPARE TRANSACTION 'k:client_id-:r';"; echo "COMMIT PREPARED 'k:client_id-:r';"; echo "DISCARD ALL;"
} | script shared15

pg_uid=$(stat -c %u "$(psql -Atq "$dsn" -c 'SHOW data_directory' 2>/dev/null || echo /nonexistent)" 2>/dev/null || id -u postgres)
# CPU ticks of the server: its live processes plus the children it has reaped (cutime/cstime).
server_ticks() {
  local total=0 f pid
  for f in /proc/[0-9]*/stat; do
    pid=${f#/proc/}; pid=${pid%/stat}
    [[ $(stat -c %u "/proc/$pid" 2>/dev/null) == "$pg_uid" ]] || continue
    read -r line < "$f" 2>/dev/null || continue
    set -- ${line##*) }
    total=$((total + ${12} + ${13} + ${14} + ${15}))
  done
  echo "$total"
}
hz=$(getconf CLK_TCK)
printf "%-16s %8s %10s %16s\n" shape members tps "server ms/member"
run() { # name members [pgbench mode]
  local before after out n tps
  before=$(server_ticks)
  out=$(pgbench -n -M "${3:-simple}" -f "$work/$1.sql" -c "${CLIENTS:-16}" -j 2 -T "${SECONDS_EACH:-8}" "$dsn" 2>&1)
  after=$(server_ticks)
  n=$(awk '/number of transactions actually processed/ { split($6, a, "/"); print a[1] }' <<<"$out")
  tps=$(awk '/^tps/ { print $3 }' <<<"$out")
  if [[ -z "$n" || "$n" -eq 0 ]] || grep -q "aborted" <<<"$out"; then
    echo "pgcost: $1 failed:" >&2; echo "$out" >&2; return 1
  fi
  awk -v name="$1${3:+ ($3)}" -v m="$2" -v tps="$tps" -v d=$((after - before)) -v n="$n" -v hz="$hz" \
    'BEGIN { printf "%-16s %8d %10.0f %16.3f\n", name, m, tps * m, d * 1000 / hz / n / m }'
}
run dual 1
run 2pc 1
run 2pc-marker 1
run participant 1
run log 1
run log 1 prepared
run log-no-events 1 prepared
run shared15 15
