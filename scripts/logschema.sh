#!/usr/bin/env bash
# The log table's layout weighed on the PostgreSQL of scripts/services.sh (scratch databases,
# dropped afterwards), without coordinator or Kafka (docs/decisions.md, "Retention"):
#
#   1. HOT updates: pgbench runs the log's writes of one request (insert active, update
#      prepared, update committed, as txlog writes them since migration 000006) on each index
#      and fillfactor variant, rounds alternating, and prints throughput, the server's CPU per
#      request (from /proc, every process of the server's user: other load on the server
#      counts too) and the share of HOT updates (pg_stat_user_tables.n_tup_hot_upd);
#   2. removal: N_ROWS final rows removed by batched DELETEs (as package retention does)
#      against dropping one time partition holding as many, and what partitioning would cost
#      the table's unique keys.
#   SECONDS_EACH (default 10), CLIENTS (default 8), ROUNDS (default 2), N_ROWS (default 200000),
#   PARTS (default "hot removal").
set -euo pipefail
export PGOPTIONS="-c client_min_messages=warning"
parts=${PARTS:-hot removal}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
eval "$(bash scripts/services.sh env)"
command -v pgbench >/dev/null || { echo "logschema: pgbench not found (Debian: postgresql-client)" >&2; exit 1; }
base=${DATABASE_URL%/*}
work=$(mktemp -d)
# fresh runs in a subshell ($(...)): the names of its databases go to a file, for the trap.
trap 'while read -r d; do psql -q "$base/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS $d" >/dev/null 2>&1 || true; done < "$work/dbs"; rm -rf "$work"' EXIT
: > "$work/dbs"

declare -A variant=(
  [current]=""
  [ff80]="ALTER TABLE coordinator_transactions SET (fillfactor = 80);"
  [ff80-partial]="ALTER TABLE coordinator_transactions SET (fillfactor = 80);
DROP INDEX coordinator_transactions_state_created;
CREATE INDEX coordinator_transactions_open_created ON coordinator_transactions (state, created_at, gid)
    WHERE state NOT IN ('committed', 'aborted');
CREATE INDEX coordinator_transactions_created ON coordinator_transactions (created_at, gid);"
  [ff80-nostate]="ALTER TABLE coordinator_transactions SET (fillfactor = 80);
DROP INDEX coordinator_transactions_state_created;
DROP INDEX coordinator_transactions_in_doubt;
CREATE INDEX coordinator_transactions_created ON coordinator_transactions (created_at, gid);"
)
order=(current ff80 ff80-partial ff80-nostate)

fresh() { # name → a migrated scratch database; prints its DSN
  local db=logschema_$1_$$ dsn
  db=${db//-/_}
  echo "$db" >> "$work/dbs"
  psql -q "$base/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
  dsn="$base/$db?sslmode=disable"
  for f in migrations/*.up.sql; do psql -q -v ON_ERROR_STOP=1 "$dsn" -f "$f" >/dev/null; done
  psql -q -v ON_ERROR_STOP=1 "$dsn" -c "INSERT INTO coordinator_instances (instance_id, txn_id_prefix, pool_size, epoch) VALUES ('i', 'p', 1, 1)" >/dev/null
  echo "$dsn"
}

key="'k' || :client_id || '-' || :r"
cat > "$work/log.sql" <<EOF
\set r random(1, 9000000000000000000)
INSERT INTO coordinator_transactions (gid, request_id, request_digest, instance_id, state, sql_gids, owner_instance, owner_epoch, one_phase) VALUES ($key, $key, '\\x00', 'i', 'active', '[{"gid":"x","database":"default"}]', 'i', 1, false);
UPDATE coordinator_transactions SET state = 'prepared', transactional_id = 'p-i-1', producer_id = 1000, producer_epoch = 5, prepared_state = 'x', kafka_records = '[{"topic":"t","partition":0,"offset":100}]', sql_results = '[{"rows_affected":1}]', prepared_at = now(), updated_at = now() WHERE gid = $key AND state = 'active';
UPDATE coordinator_transactions SET state = 'committed', finished_at = now(), updated_at = now() WHERE gid = $key AND state = 'prepared';
EOF

pg_uid=$(id -u postgres)
server_ticks() {
  local total=0 f pid line
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

if [[ " $parts " == *" hot "* ]]; then
echo "## HOT updates (CLIENTS=${CLIENTS:-8}, SECONDS_EACH=${SECONDS_EACH:-10}, ROUNDS=${ROUNDS:-2})"
printf "%-14s %5s %9s %18s %12s %8s %12s\n" variant round "req/s" "server ms/request" updates "HOT %" "MB/100k req"
for round in $(seq 1 "${ROUNDS:-2}"); do
  names=("${order[@]}")
  if (( round % 2 == 0 )); then names=($(printf '%s\n' "${order[@]}" | tac)); fi
  for v in "${names[@]}"; do
    dsn=$(fresh "$v")
    psql -q -v ON_ERROR_STOP=1 "$dsn" -c "${variant[$v]:-SELECT 1}" >/dev/null
    before=$(server_ticks)
    out=$(pgbench -n -M prepared -f "$work/log.sql" -c "${CLIENTS:-8}" -j 2 -T "${SECONDS_EACH:-10}" "$dsn" 2>&1)
    after=$(server_ticks)
    n=$(awk '/number of transactions actually processed/ { split($6, a, "/"); print a[1] }' <<<"$out")
    tps=$(awk '/^tps/ { print $3 }' <<<"$out")
    sleep 1 # the statistics collector's last report
    read -r upd hot bytes < <(psql -Atq -F ' ' "$dsn" -c "SELECT n_tup_upd, n_tup_hot_upd, pg_total_relation_size('coordinator_transactions') FROM pg_stat_user_tables WHERE relname = 'coordinator_transactions'")
    awk -v v="$v" -v r="$round" -v tps="$tps" -v d=$((after - before)) -v n="$n" -v hz="$hz" -v u="$upd" -v h="$hot" -v b="$bytes" \
      'BEGIN { printf "%-14s %5d %9.0f %18.3f %12d %8.2f %12.1f\n", v, r, tps, d * 1000 / hz / n, u, (u ? 100 * h / u : 0), b / 1048576 / n * 100000 }'
    psql -q "$base/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS $(sed 's/?.*//' <<<"${dsn##*/}")" >/dev/null
  done
done

fi

[[ " $parts " == *" removal "* ]] || exit 0
n_rows=${N_ROWS:-200000}
echo
echo "## Removal of $n_rows final rows"
dsn=$(fresh removal)
psql -q -v ON_ERROR_STOP=1 "$dsn" >/dev/null <<SQL
INSERT INTO coordinator_transactions (gid, request_id, request_digest, instance_id, state, owner_instance, owner_epoch,
    transactional_id, producer_id, producer_epoch, prepared_state, kafka_records, sql_gids, sql_results,
    created_at, updated_at, prepared_at, finished_at)
SELECT 'kpgtx_r' || i, 'r' || i, '\x00', 'i', 'committed', 'i', 1, 'p-i-1', 1000, 5, 'x',
    '[{"topic":"t","partition":0,"offset":100}]', jsonb_build_array(jsonb_build_object('gid', 'kpgtx_r' || i || '@default', 'database', 'default')),
    '[{"rows_affected":1}]', now() - interval '8 days', now() - interval '8 days', now() - interval '8 days', now() - interval '8 days'
FROM generate_series(1, $n_rows) i;
VACUUM ANALYZE coordinator_transactions;
SQL
before=$(server_ticks)
start=$(date +%s%N)
left=$n_rows
while (( left > 0 )); do
  psql -Atq "$dsn" -c "WITH c AS (SELECT gid FROM coordinator_transactions WHERE state = 'committed' AND created_at < now() - interval '7 days' ORDER BY created_at, gid LIMIT 1000),
del AS (DELETE FROM coordinator_transactions t USING c WHERE t.gid = c.gid RETURNING t.gid)
DELETE FROM coordinator_events e USING del WHERE e.gid = del.gid" >/dev/null
  left=$((left - 1000))
done
end=$(date +%s%N)
mid=$(server_ticks)
psql -Atq "$dsn" -c "VACUUM coordinator_transactions" >/dev/null
after=$(server_ticks)
vend=$(date +%s%N)
awk -v n="$n_rows" -v ms=$(( (end - start) / 1000000 )) -v vms=$(( (vend - end) / 1000000 )) -v d=$((mid - before)) -v dv=$((after - mid)) -v hz="$hz" \
  'BEGIN { printf "batched DELETE (1000 a statement): %.0f ms wall, %.0f ms server CPU per 10k rows; VACUUM after: %.0f ms wall, %.0f ms CPU per 10k rows\n", ms * 10000 / n, d * 1000 / hz * 10000 / n, vms * 10000 / n, dv * 1000 / hz * 10000 / n }'

dsn=$(fresh partitioned)
psql -q -v ON_ERROR_STOP=1 "$dsn" >/dev/null <<SQL
CREATE TABLE p (gid text NOT NULL, request_id text NOT NULL, state text NOT NULL, created_at timestamptz NOT NULL,
    payload jsonb, PRIMARY KEY (gid, created_at)) PARTITION BY RANGE (created_at);
CREATE TABLE p_old PARTITION OF p FOR VALUES FROM ('-infinity') TO (now() - interval '7 days');
CREATE TABLE p_new PARTITION OF p FOR VALUES FROM (now() - interval '7 days') TO ('infinity');
INSERT INTO p SELECT 'kpgtx_r' || i, 'r' || i, 'committed', now() - interval '8 days', '[{"topic":"t","partition":0,"offset":100}]'
FROM generate_series(1, $n_rows) i;
SQL
before=$(server_ticks)
start=$(date +%s%N)
psql -q -v ON_ERROR_STOP=1 "$dsn" -c "ALTER TABLE p DETACH PARTITION p_old" -c "DROP TABLE p_old" >/dev/null
end=$(date +%s%N)
after=$(server_ticks)
awk -v n="$n_rows" -v ms=$(( (end - start) / 1000000 )) -v d=$((after - before)) -v hz="$hz" \
  'BEGIN { printf "DETACH + DROP of a partition of %d rows: %d ms wall, %.0f ms server CPU in all\n", n, ms, d * 1000 / hz }'
echo "a unique request_id on the partitioned table:"
psql -q "$dsn" -c "CREATE UNIQUE INDEX ON p (request_id)" 2>&1 | sed 's/^/  /' || true
