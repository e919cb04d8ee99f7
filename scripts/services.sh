#!/usr/bin/env bash
# Test services for kpgtx: a dedicated PostgreSQL cluster, a single-node Apache Kafka 4.x
# broker (KRaft) and an Apicurio Registry 3 (the Schema Registry the schema formats are tested
# against, through its Confluent-compatible API), all without Docker, all on 127.0.0.1.
#
#   scripts/services.sh start    install what is missing, start all three, print env
#   scripts/services.sh stop     stop all three (harmless when not running)
#   scripts/services.sh status   say what runs
#   scripts/services.sh env      print the export lines for the tests
#   scripts/services.sh reset    stop and delete the data (not the jar cache)
#
#   scripts/services.sh start-apicurio | stop-apicurio   the registry alone
#   scripts/services.sh install-pyclient   Confluent's Python client (confluent-kafka with its
#                          Avro, JSON Schema and Protobuf serdes, test/reader/requirements.txt)
#                          in a venv of the cache, for test/reader/read.py; env then names its
#                          python as SCHEMA_READER_PYTHON
#
#   One service at a time (the restart tests use them on private services):
#   scripts/services.sh start-postgres | stop-postgres   (stop is a fast shutdown)
#   scripts/services.sh start-kafka    | stop-kafka      (stop is SIGTERM: controlled shutdown)
#   scripts/services.sh crash-kafka                      (SIGKILL, as a crash)
#
#   A three-broker KRaft cluster (each node broker and controller; replication factor 3,
#   min.insync.replicas 2, transaction state log replication factor 3), started on demand by
#   the tests that need it, on ports and a data directory of its own, from the same jars:
#   scripts/services.sh start-cluster | stop-cluster | cluster-status
#   scripts/services.sh kill-broker N | start-broker N   (N = 1, 2, 3; kill is SIGKILL)
#
# Settings (environment):
#   SERVICES_DIR           data, logs, pid files   (/var/tmp/kpgtx-services)
#   PG_PORT                PostgreSQL port          (55432)
#   KAFKA_PORT             Kafka client port        (19092)
#   KAFKA_CONTROLLER_PORT  KRaft controller port    (19093)
#   KAFKA_VERSION          Kafka version            (4.4.0, falls back to 4.1.1)
#   KAFKA_CACHE            jar cache of one version ($HOME/.cache/kpgtx/kafka-<ver>)
#   KAFKA_HEAP             broker heap              (1g)
#   KAFKA_ADVERTISED       host:port the broker tells clients for KAFKA_PORT's listener
#                          (127.0.0.1:$KAFKA_PORT); the network-fault tests put a TCP proxy there
#   KAFKA_INTERNAL_PORT    with KAFKA_ADVERTISED: a second listener, advertised as itself, for
#                          the broker's own traffic (markers), the readiness probe and the tests'
#                          checks, so that only the coordinator's traffic crosses the proxy
#   SERVICES_TIMEOUT       seconds to wait for readiness (120)
#   APICURIO               0: start and stop leave the registry out (a test's private
#                          PostgreSQL and Kafka, beside the suite's own registry); 1 by default
#   APICURIO_PORT          Apicurio Registry HTTP port (18081; its management port 18082)
#   APICURIO_VERSION       Apicurio Registry version (3.0.9)
#   APICURIO_CACHE         its unpacked app ($HOME/.cache/kpgtx/apicurio-<ver>)
#   APICURIO_HEAP          its heap (256m)
#   PYCLIENT_CACHE         the Python client's venv ($HOME/.cache/kpgtx/pyclient-<hash of the
#                          requirements>)
#   CLUSTER_DIR            the cluster's data and logs ($SERVICES_DIR/cluster)
#   CLUSTER_PORTS          its three client ports      (29092,29093,29094)
#   CLUSTER_CONTROLLER_PORTS  its three KRaft ports    (29192,29193,29194)
#   CLUSTER_HEAP           heap of each of its brokers (384m)
#
# Idempotent: start on running services only checks them and prints env.
# As root, PostgreSQL runs as the OS user `postgres`; as any other user it
# runs as that user.
set -euo pipefail

SERVICES_DIR=${SERVICES_DIR:-/var/tmp/kpgtx-services}
PG_PORT=${PG_PORT:-55432}
KAFKA_PORT=${KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-19093}
KAFKA_HEAP=${KAFKA_HEAP:-1g}
KAFKA_ADVERTISED=${KAFKA_ADVERTISED:-127.0.0.1:$KAFKA_PORT}
KAFKA_INTERNAL_PORT=${KAFKA_INTERNAL_PORT:-}
SERVICES_TIMEOUT=${SERVICES_TIMEOUT:-120}
# BenchmarkRecovery leaves 10,000 transactions prepared at once, while other tests running in
# parallel prepare their own: 12000 slots hold both. PostgreSQL sizes its lock tables by it:
# about 0.7 GB of shared memory (0.2 GB at 1200).
PG_MAX_PREPARED=12000
PG_DATABASES=(coordinator coordinator2)
# First the requested/default version, then the fallback.
KAFKA_VERSIONS=("${KAFKA_VERSION:-4.4.0}")
[[ "${KAFKA_VERSIONS[0]}" == 4.1.1 ]] || KAFKA_VERSIONS+=(4.1.1)

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KAFKA_POM="$SCRIPT_DIR/kafka/pom.xml"

PG_DIR="$SERVICES_DIR/pg"
PGDATA="$PG_DIR/data"
PG_LOG="$PG_DIR/postgres.log"
KAFKA_DIR="$SERVICES_DIR/kafka"
KAFKA_DATA="$SERVICES_DIR/kafka-data"
KAFKA_PID="$KAFKA_DIR/kafka.pid"
KAFKA_LOG="$KAFKA_DIR/server.log"
KAFKA_OUT="$KAFKA_DIR/stdout.log"
KAFKA_PROPS="$KAFKA_DIR/server.properties"
KAFKA_LOG4J="$KAFKA_DIR/log4j2.xml"
KAFKA_LIBS_FILE="$KAFKA_DIR/libs.path"
KAFKA_PROBE_TOPIC=_kpgtx_readiness

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] ERROR: %s\n' "$*" >&2; exit 1; }

is_root() { [[ $(id -u) -eq 0 ]]; }

APT_UPDATED=0
apt_install() {
  is_root || die "missing packages ($*); install them or run as root"
  export DEBIAN_FRONTEND=noninteractive
  # Try without an index refresh first: fast when the lists are current.
  if ! apt-get install -y -q --no-install-recommends "$@" >&2; then
    if [[ $APT_UPDATED -eq 0 ]]; then
      apt-get update -q >&2
      APT_UPDATED=1
    fi
    apt-get install -y -q --no-install-recommends "$@" >&2
  fi
}

# ---------------------------------------------------------------- PostgreSQL

PG_BIN=""
find_pg_bin() {
  local d v=""
  PG_BIN=""
  # An existing cluster needs the binaries of its own major version.
  if [[ -r "$PGDATA/PG_VERSION" ]]; then
    v=$(cat "$PGDATA/PG_VERSION")
    d=/usr/lib/postgresql/$v/bin
    if [[ -x "$d/pg_ctl" && -x "$d/psql" && -x "$d/pg_isready" ]]; then
      PG_BIN=$d
      return 0
    fi
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/psql" && -x "$d/pg_isready" ]]; then
      PG_BIN=$d
      return 0
    fi
  done
  return 1
}

ensure_pg_installed() {
  find_pg_bin && return 0
  local v=15
  [[ -r "$PGDATA/PG_VERSION" ]] && v=$(cat "$PGDATA/PG_VERSION")
  log "PostgreSQL not found: installing postgresql-$v"
  # Debian's postinst also creates its default cluster `main` on 5432; this
  # script leaves it alone and uses its own cluster.
  apt_install "postgresql-$v" "postgresql-client-$v" || apt_install postgresql postgresql-client
  find_pg_bin || die "PostgreSQL binaries not found after install"
}

# PostgreSQL refuses to run as root: root switches to `postgres`.
PG_OS_USER=$(id -un)
is_root && PG_OS_USER=postgres

as_pg() {
  if is_root; then
    # cd /: the postgres user may not be able to read root's cwd.
    (cd / && runuser -u "$PG_OS_USER" -- "$@")
  else
    "$@"
  fi
}

pg_running() {
  [[ -n "$PG_BIN" ]] || find_pg_bin || return 1
  [[ -f "$PGDATA/PG_VERSION" ]] || return 1
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1
}

pg_ready() {
  "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres
}

psql_admin() {
  PGCONNECT_TIMEOUT=5 "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" \
    -U postgres -d postgres "$@"
}

pg_write_conf() {
  # Regenerated on every start so that PG_PORT changes take effect.
  as_pg tee "$PGDATA/kpgtx.conf" >/dev/null <<EOF
# Written by scripts/services.sh: overwritten on every start.
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = ''
max_connections = 300
max_prepared_transactions = $PG_MAX_PREPARED
fsync = on
synchronous_commit = on
full_page_writes = on
shared_buffers = 128MB
log_min_messages = warning
log_line_prefix = '%m [%p] %q%u@%d '
EOF
}

pg_start() {
  ensure_pg_installed
  mkdir -p "$SERVICES_DIR"
  chmod 755 "$SERVICES_DIR" 2>/dev/null || true
  if [[ ! -d "$PG_DIR" ]]; then
    mkdir -p "$PG_DIR"
  fi
  if is_root; then
    chown "$PG_OS_USER:" "$PG_DIR"
  fi

  if [[ ! -f "$PGDATA/PG_VERSION" ]]; then
    log "PostgreSQL: initdb $PGDATA (as $PG_OS_USER)"
    rm -rf "$PGDATA"
    as_pg "$PG_BIN/initdb" -D "$PGDATA" -U postgres --auth=trust \
      --encoding=UTF8 --locale=C >"$SERVICES_DIR/pg-initdb.log" 2>&1 \
      || { cat "$SERVICES_DIR/pg-initdb.log" >&2; die "initdb failed"; }
    as_pg sh -c "printf '\ninclude_if_exists = '\''kpgtx.conf'\''\n' >> '$PGDATA/postgresql.conf'"
  fi

  if pg_running; then
    log "PostgreSQL: already running ($PGDATA)"
  else
    pg_write_conf
    log "PostgreSQL: starting on 127.0.0.1:$PG_PORT"
    if ! as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$PG_LOG" -w -t "$SERVICES_TIMEOUT" start >/dev/null; then
      tail -n 40 "$PG_LOG" >&2 || true
      die "PostgreSQL did not start (log: $PG_LOG)"
    fi
  fi

  local i
  for ((i = 0; i < SERVICES_TIMEOUT * 2; i++)); do
    pg_ready && break
    sleep 0.5
  done
  if ! pg_ready; then
    tail -n 40 "$PG_LOG" >&2 || true
    die "PostgreSQL does not answer on 127.0.0.1:$PG_PORT (log: $PG_LOG)"
  fi

  local db
  for db in "${PG_DATABASES[@]}"; do
    if [[ -z $(psql_admin -tA -c "SELECT 1 FROM pg_database WHERE datname = '$db'") ]]; then
      log "PostgreSQL: creating database $db"
      psql_admin -c "CREATE DATABASE \"$db\""
    fi
  done

  local mpt
  mpt=$(psql_admin -tA -c "SHOW max_prepared_transactions")
  [[ "$mpt" -gt 0 ]] || die "PostgreSQL runs with max_prepared_transactions=$mpt (another server on port $PG_PORT?)"
  # A server started by an older version of this script keeps its setting until it restarts;
  # the tests run with it, the recovery benchmark does not (it says so).
  [[ "$mpt" -ge "$PG_MAX_PREPARED" ]] || log "PostgreSQL: WARNING max_prepared_transactions=$mpt," \
    "below the $PG_MAX_PREPARED this script configures (BenchmarkRecovery needs it; the tests do not):" \
    "restart with: scripts/services.sh stop-postgres && scripts/services.sh start-postgres"
  log "PostgreSQL: ready (max_prepared_transactions=$mpt)"
}

pg_stop() {
  find_pg_bin || return 0
  if pg_running; then
    log "PostgreSQL: stopping"
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop >/dev/null
  fi
}

pg_status() {
  if pg_running && pg_ready; then
    echo "postgres: running on 127.0.0.1:$PG_PORT (data $PGDATA, log $PG_LOG)"
  elif pg_running; then
    echo "postgres: process running but not answering on 127.0.0.1:$PG_PORT"
  else
    echo "postgres: not running"
  fi
}

# --------------------------------------------------------------------- Kafka

ensure_java() {
  command -v java >/dev/null 2>&1 && return 0
  log "java not found: installing openjdk-17-jre-headless"
  apt_install openjdk-17-jre-headless
}

ensure_maven() {
  command -v mvn >/dev/null 2>&1 && return 0
  log "mvn not found: installing maven"
  apt_install maven
}

kafka_cache_dir() { echo "${KAFKA_CACHE:-$HOME/.cache/kpgtx/kafka-$1}"; }

# A cache is complete when its marker names the version (written last).
kafka_cache_ok() {
  local dir
  dir=$(kafka_cache_dir "$1")
  [[ -f "$dir/.complete" && "$(cat "$dir/.complete")" == "$1" ]] \
    && compgen -G "$dir/libs/kafka_2.13-$1.jar" >/dev/null
}

kafka_fetch() {
  local ver=$1 dir
  dir=$(kafka_cache_dir "$ver")
  ensure_maven
  log "Kafka $ver: fetching jars from Maven Central into $dir/libs"
  mkdir -p "$dir"
  rm -rf "$dir/libs.tmp" "$dir/.complete"
  if ! mvn -q -B -f "$KAFKA_POM" -Dkafka.version="$ver" \
      dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$dir/libs.tmp" >"$dir/mvn.log" 2>&1; then
    tail -n 20 "$dir/mvn.log" >&2 || true
    rm -rf "$dir/libs.tmp"
    return 1
  fi
  rm -rf "$dir/libs"
  mv "$dir/libs.tmp" "$dir/libs"
  echo "$ver" >"$dir/.complete"
}

KAFKA_VER=""
KAFKA_LIBS=""
ensure_kafka_libs() {
  local v
  for v in "${KAFKA_VERSIONS[@]}"; do
    if kafka_cache_ok "$v"; then
      KAFKA_VER=$v
      KAFKA_LIBS="$(kafka_cache_dir "$v")/libs"
      return 0
    fi
  done
  for v in "${KAFKA_VERSIONS[@]}"; do
    if kafka_fetch "$v"; then
      KAFKA_VER=$v
      KAFKA_LIBS="$(kafka_cache_dir "$v")/libs"
      return 0
    fi
    log "Kafka $v: could not fetch, trying the next version"
  done
  die "could not fetch any Kafka version (${KAFKA_VERSIONS[*]})"
}

kafka_pid() {
  local pid
  [[ -f "$KAFKA_PID" ]] || return 1
  pid=$(cat "$KAFKA_PID")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against a reused pid, except for the broker this script has just started: between
  # its fork and its exec of java the process still shows this script's command line.
  if [[ "$pid" != "${KAFKA_STARTED_PID:-}" ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka' || return 1
  fi
  echo "$pid"
}

kafka_port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null
}

# Run a Kafka CLI class with the broker's classpath, quiet logging.
kafka_tool() {
  local cls=$1
  shift
  timeout 60 java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2-tools.xml" \
    -cp "$KAFKA_LIBS/*" "$cls" "$@"
}

# The client listeners: KAFKA_PORT advertised as KAFKA_ADVERTISED and, when KAFKA_INTERNAL_PORT is
# set, the broker's own listener (inter-broker traffic, i.e. the transaction markers it writes to
# itself, and the readiness probe).
kafka_listeners() {
  if [[ -n "$KAFKA_INTERNAL_PORT" ]]; then
    cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,INTERNAL://127.0.0.1:$KAFKA_INTERNAL_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$KAFKA_ADVERTISED,INTERNAL://127.0.0.1:$KAFKA_INTERNAL_PORT
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
EOF
  else
    cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$KAFKA_ADVERTISED
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
EOF
  fi
}

# The address the readiness probe bootstraps from: the internal listener when there is one.
kafka_probe_bootstrap() { echo "127.0.0.1:${KAFKA_INTERNAL_PORT:-$KAFKA_PORT}"; }

kafka_write_config() {
  mkdir -p "$KAFKA_DIR" "$KAFKA_DATA"
  cat >"$KAFKA_PROPS" <<EOF
# Written by scripts/services.sh: overwritten on every start.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
controller.listener.names=CONTROLLER
$(kafka_listeners)
log.dirs=$KAFKA_DATA

num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
delete.topic.enable=true

offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
group.initial.rebalance.delay.ms=0

transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
transaction.max.timeout.ms=900000
# Scan for timed-out transactions every second (default 10 s) so that the
# broker's abort of a timed-out transaction shows up quickly in tests.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000

share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

num.network.threads=2
num.io.threads=4
EOF

  cat >"$KAFKA_LOG4J" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by scripts/services.sh. -->
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="$KAFKA_LOG" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="WARN"><AppenderRef ref="file"/></Root>
    <Logger name="kafka.Kafka" level="INFO"/>
    <Logger name="kafka.server.KafkaRaftServer" level="INFO"/>
    <Logger name="kafka.server.BrokerServer" level="INFO"/>
    <!-- Says when the broker skips transaction markers (see docs/decisions.md). -->
    <Logger name="kafka.coordinator.transaction.TransactionMarkerChannelManager" level="INFO"/>
  </Loggers>
</Configuration>
EOF

  cat >"$KAFKA_DIR/log4j2-tools.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by scripts/services.sh: CLI tools log errors only, to stderr. -->
<Configuration status="WARN">
  <Appenders>
    <Console name="stderr" target="SYSTEM_ERR">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="ERROR"><AppenderRef ref="stderr"/></Root>
  </Loggers>
</Configuration>
EOF
}

kafka_format() {
  [[ -f "$KAFKA_DATA/meta.properties" ]] && return 0
  local cid
  if [[ -s "$KAFKA_DIR/cluster.id" ]]; then
    cid=$(cat "$KAFKA_DIR/cluster.id")
  else
    cid=$(kafka_tool kafka.tools.StorageTool random-uuid | tail -n 1)
    [[ "$cid" =~ ^[A-Za-z0-9_-]{22}$ ]] || die "bad cluster id from StorageTool: $cid"
    echo "$cid" >"$KAFKA_DIR/cluster.id"
  fi
  log "Kafka: formatting $KAFKA_DATA (cluster id $cid)"
  kafka_tool kafka.tools.StorageTool format --standalone -t "$cid" -c "$KAFKA_PROPS" \
    >"$KAFKA_DIR/format.log" 2>&1 \
    || { cat "$KAFKA_DIR/format.log" >&2; die "kafka storage format failed"; }
}

kafka_fail() {
  log "$1"
  log "---- tail of $KAFKA_OUT"
  tail -n 30 "$KAFKA_OUT" >&2 2>/dev/null || true
  log "---- tail of $KAFKA_LOG"
  tail -n 60 "$KAFKA_LOG" >&2 2>/dev/null || true
  exit 1
}

# Readiness: the port answers, the admin API lists topics, and a
# transactional produce + a consumer-group read go through. The last two also
# create __transaction_state and __consumer_offsets, so the first test does
# not pay for (or time out on) their creation.
kafka_wait_ready() {
  local deadline=$((SECONDS + SERVICES_TIMEOUT)) pid bs
  bs=$(kafka_probe_bootstrap)
  until kafka_port_open; do
    pid=$(kafka_pid) || kafka_fail "Kafka exited during startup"
    ((SECONDS < deadline)) || kafka_fail "Kafka port $KAFKA_PORT did not open in ${SERVICES_TIMEOUT}s"
    sleep 0.5
  done
  until kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bs" --list >/dev/null 2>&1; do
    kafka_pid >/dev/null || kafka_fail "Kafka exited during startup"
    ((SECONDS < deadline)) || kafka_fail "Kafka admin API not ready in ${SERVICES_TIMEOUT}s"
    sleep 1
  done
  local probe_log="$KAFKA_DIR/probe.log"
  : >"$probe_log"
  until kafka_probe >>"$probe_log" 2>&1; do
    kafka_pid >/dev/null || kafka_fail "Kafka exited during startup"
    if ((SECONDS >= deadline)); then
      tail -n 30 "$probe_log" >&2 || true
      kafka_fail "Kafka transactional produce/consume probe failed for ${SERVICES_TIMEOUT}s"
    fi
    sleep 1
  done
}

kafka_probe() {
  local bs
  bs=$(kafka_probe_bootstrap)
  kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bs" --create --if-not-exists \
    --topic "$KAFKA_PROBE_TOPIC" --partitions 1 --replication-factor 1 || return 1
  kafka_tool org.apache.kafka.tools.ProducerPerformance --topic "$KAFKA_PROBE_TOPIC" \
    --num-records 10 --record-size 16 --throughput -1 \
    --transactional-id kpgtx-readiness-probe --transaction-duration-ms 50 \
    --producer-props "bootstrap.servers=$bs" acks=all || return 1
  kafka_tool org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$bs" \
    --topic "$KAFKA_PROBE_TOPIC" --group kpgtx-readiness-probe --messages 1 \
    --timeout 30000 || return 1
}

kafka_start() {
  ensure_java
  ensure_kafka_libs
  mkdir -p "$KAFKA_DIR"
  echo "$KAFKA_LIBS" >"$KAFKA_LIBS_FILE"
  local pid
  if pid=$(kafka_pid); then
    if kafka_port_open; then
      log "Kafka: already running (pid $pid, version $(cat "$KAFKA_DIR/version" 2>/dev/null || echo '?'))"
      return 0
    fi
    log "Kafka: process $pid runs but port $KAFKA_PORT is closed: waiting"
    kafka_write_config_tools_only
    kafka_wait_ready
    return 0
  fi
  rm -f "$KAFKA_PID"
  kafka_write_config
  kafka_format
  log "Kafka $KAFKA_VER: starting on 127.0.0.1:$KAFKA_PORT"
  echo "$KAFKA_VER" >"$KAFKA_DIR/version"
  {
    echo "==== $(date -Is) starting Kafka $KAFKA_VER"
  } >>"$KAFKA_OUT"
  # setsid + closed stdin + output to a file: the broker outlives this
  # script and holds none of its caller's pipes.
  setsid nohup java -Xms256m -Xmx"$KAFKA_HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$KAFKA_LOG4J" \
    -Dkafka.logs.dir="$KAFKA_DIR" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$KAFKA_PROPS" \
    </dev/null >>"$KAFKA_OUT" 2>&1 &
  echo $! >"$KAFKA_PID"
  KAFKA_STARTED_PID=$!
  disown || true
  kafka_wait_ready
  log "Kafka: ready (pid $(cat "$KAFKA_PID"))"
}

# Tool logging config only (broker already running with its own config).
kafka_write_config_tools_only() {
  [[ -f "$KAFKA_DIR/log4j2-tools.xml" ]] || kafka_write_config
}

# kafka_crash kills the broker with SIGKILL, as a crash would. (A controlled shutdown of a
# single broker can lose transaction markers: see docs/decisions.md.)
kafka_crash() {
  local pid i
  if pid=$(kafka_pid); then
    log "Kafka: killing (pid $pid)"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 40; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
  fi
  rm -f "$KAFKA_PID"
}

kafka_stop() {
  local pid i
  if pid=$(kafka_pid); then
    log "Kafka: stopping (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 120; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "Kafka: still running after 60s, killing"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 20; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
      done
    fi
  fi
  rm -f "$KAFKA_PID"
}

kafka_status() {
  local pid
  if pid=$(kafka_pid); then
    if kafka_port_open; then
      echo "kafka: running on 127.0.0.1:$KAFKA_PORT (pid $pid, version $(cat "$KAFKA_DIR/version" 2>/dev/null || echo '?'), log $KAFKA_LOG)"
    else
      echo "kafka: process $pid running, port $KAFKA_PORT not open"
    fi
  else
    echo "kafka: not running"
  fi
}


# ------------------------------------------------------- Kafka, three brokers

CLUSTER_DIR=${CLUSTER_DIR:-$SERVICES_DIR/cluster}
CLUSTER_HEAP=${CLUSTER_HEAP:-384m}
IFS=, read -r -a CLUSTER_PORT_LIST <<<"${CLUSTER_PORTS:-29092,29093,29094}"
IFS=, read -r -a CLUSTER_CTRL_LIST <<<"${CLUSTER_CONTROLLER_PORTS:-29192,29193,29194}"

check_cluster_ports() {
  [[ ${#CLUSTER_PORT_LIST[@]} -eq 3 && ${#CLUSTER_CTRL_LIST[@]} -eq 3 ]] \
    || die "CLUSTER_PORTS and CLUSTER_CONTROLLER_PORTS need three ports each"
}
node_dir() { echo "$CLUSTER_DIR/node$1"; }
node_port() { echo "${CLUSTER_PORT_LIST[$(($1 - 1))]}"; }
check_node() { [[ "${1:-}" =~ ^[123]$ ]] || die "broker number must be 1, 2 or 3, not '${1:-}'"; }

cluster_bootstrap() {
  local n out=()
  for n in 1 2 3; do out+=("127.0.0.1:$(node_port "$n")"); done
  (IFS=,; echo "${out[*]}")
}

node_pid() {
  local pid f
  f="$(node_dir "$1")/kafka.pid"
  [[ -f "$f" ]] || return 1
  pid=$(cat "$f")
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  # As kafka_pid: a node this script has just started may not have exec'd java yet.
  if [[ " ${NODE_STARTED_PIDS:-} " != *" $pid "* ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka' || return 1
  fi
  echo "$pid"
}

node_port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$(node_port "$1")") 2>/dev/null; }

node_write_config() {
  local n=$1 dir voters="" i
  dir=$(node_dir "$n")
  mkdir -p "$dir/data"
  for i in 1 2 3; do
    voters+="${voters:+,}$i@127.0.0.1:${CLUSTER_CTRL_LIST[$((i - 1))]}"
  done
  cat >"$dir/server.properties" <<EOF
# Written by scripts/services.sh: overwritten on every start.
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$(node_port "$n"),CONTROLLER://127.0.0.1:${CLUSTER_CTRL_LIST[$((n - 1))]}
advertised.listeners=PLAINTEXT://127.0.0.1:$(node_port "$n")
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data

num.partitions=3
default.replication.factor=3
min.insync.replicas=2
auto.create.topics.enable=false
delete.topic.enable=true
unclean.leader.election.enable=false
# A killed broker is fenced, and its partitions and transaction coordinators move, once its
# session lapses: 9 s by default, as long as the restart tests keep a broker down, so whether
# two brokers committed in that window was a matter of timing (a loaded CI machine lost).
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=500

offsets.topic.replication.factor=3
offsets.topic.num.partitions=4
group.initial.rebalance.delay.ms=0

transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=4
transaction.max.timeout.ms=900000
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000

share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2

num.network.threads=2
num.io.threads=2
background.threads=2
num.replica.fetchers=1
EOF
  sed "s#$KAFKA_LOG#$dir/server.log#" "$KAFKA_LOG4J" >"$dir/log4j2.xml"
}

node_start() {
  local n=$1 dir pid
  dir=$(node_dir "$n")
  if pid=$(node_pid "$n"); then
    log "Kafka node $n: already running (pid $pid)"
    return 0
  fi
  node_write_config "$n"
  if [[ ! -f "$dir/data/meta.properties" ]]; then
    kafka_tool kafka.tools.StorageTool format -t "$(cat "$CLUSTER_DIR/cluster.id")" \
      -c "$dir/server.properties" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; die "kafka storage format of node $n failed"; }
  fi
  log "Kafka node $n: starting on 127.0.0.1:$(node_port "$n")"
  echo "==== $(date -Is) starting Kafka $KAFKA_VER node $n" >>"$dir/stdout.log"
  # A small heap and the serial collector: three brokers share a small machine.
  setsid nohup java -Xms128m -Xmx"$CLUSTER_HEAP" -XX:+UseSerialGC \
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$dir/log4j2.xml" -Dkafka.logs.dir="$dir" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$dir/server.properties" \
    </dev/null >>"$dir/stdout.log" 2>&1 &
  echo $! >"$dir/kafka.pid"
  NODE_STARTED_PIDS="${NODE_STARTED_PIDS:-} $!"
  disown || true
}

node_wait_port() {
  local n=$1 deadline=$((SECONDS + SERVICES_TIMEOUT))
  until node_port_open "$n"; do
    node_pid "$n" >/dev/null || { tail -n 40 "$(node_dir "$n")/stdout.log" >&2; die "Kafka node $n exited during startup"; }
    ((SECONDS < deadline)) || die "Kafka node $n: port $(node_port "$n") did not open in ${SERVICES_TIMEOUT}s"
    sleep 0.5
  done
}

# cluster_prepare finds the jars, writes the logging settings and the cluster id once.
cluster_prepare() {
  check_cluster_ports
  ensure_java
  ensure_kafka_libs
  mkdir -p "$CLUSTER_DIR"
  KAFKA_DIR="$CLUSTER_DIR"
  KAFKA_LOG="$CLUSTER_DIR/server.log"
  KAFKA_LOG4J="$CLUSTER_DIR/log4j2.xml"
  KAFKA_PROPS="$CLUSTER_DIR/unused.properties"
  KAFKA_DATA="$CLUSTER_DIR/unused-data"
  [[ -f "$KAFKA_LOG4J" && -f "$CLUSTER_DIR/log4j2-tools.xml" ]] || kafka_write_config
  rm -rf "$KAFKA_PROPS" "$KAFKA_DATA"
  if [[ ! -s "$CLUSTER_DIR/cluster.id" ]]; then
    local cid
    cid=$(kafka_tool kafka.tools.StorageTool random-uuid | tail -n 1)
    [[ "$cid" =~ ^[A-Za-z0-9_-]{22}$ ]] || die "bad cluster id from StorageTool: $cid"
    echo "$cid" >"$CLUSTER_DIR/cluster.id"
  fi
}

cluster_start() {
  cluster_prepare
  local n
  for n in 1 2 3; do node_start "$n"; done
  for n in 1 2 3; do node_wait_port "$n"; done
  local bs deadline=$((SECONDS + SERVICES_TIMEOUT)) probe_log="$CLUSTER_DIR/probe.log"
  bs=$(cluster_bootstrap)
  : >"$probe_log"
  # Ready: a topic with three replicas can be created and a transaction goes through (which
  # also creates the transaction state log with its three replicas).
  until kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bs" --create --if-not-exists \
      --topic "$KAFKA_PROBE_TOPIC" --partitions 1 --replication-factor 3 >>"$probe_log" 2>&1 \
    && kafka_tool org.apache.kafka.tools.ProducerPerformance --topic "$KAFKA_PROBE_TOPIC" \
      --num-records 10 --record-size 16 --throughput -1 \
      --transactional-id kpgtx-readiness-probe --transaction-duration-ms 50 \
      --producer-props "bootstrap.servers=$bs" acks=all >>"$probe_log" 2>&1; do
    ((SECONDS < deadline)) || { tail -n 30 "$probe_log" >&2; die "the cluster did not become ready in ${SERVICES_TIMEOUT}s"; }
    sleep 1
  done
  log "Kafka cluster: ready at $bs"
  echo "export KAFKA_BROKERS=$bs"
}

# node_kill kills one broker with SIGKILL, as a crash would.
node_kill() {
  local n=$1 pid i
  if pid=$(node_pid "$n"); then
    log "Kafka node $n: killing (pid $pid)"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 40; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
  fi
  rm -f "$(node_dir "$n")/kafka.pid"
}

# start_broker starts one (killed) broker again and waits until it answers the admin API.
start_broker() {
  local n=$1 deadline=$((SECONDS + SERVICES_TIMEOUT))
  cluster_prepare
  node_start "$n"
  node_wait_port "$n"
  until kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$(node_port "$n")" --list >/dev/null 2>&1; do
    node_pid "$n" >/dev/null || die "Kafka node $n exited during startup"
    ((SECONDS < deadline)) || die "Kafka node $n does not answer the admin API"
    sleep 1
  done
  log "Kafka node $n: ready"
}

cluster_stop() {
  local n pid i
  for n in 1 2 3; do
    if pid=$(node_pid "$n"); then
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  # A controlled shutdown, bounded: the last node waits for a quorum that is gone.
  for ((i = 0; i < 20; i++)); do
    node_pid 1 >/dev/null || node_pid 2 >/dev/null || node_pid 3 >/dev/null || break
    sleep 0.5
  done
  for n in 1 2 3; do node_kill "$n"; done
}

cluster_status() {
  local n pid
  for n in 1 2 3; do
    if pid=$(node_pid "$n"); then
      echo "kafka node $n: running on 127.0.0.1:$(node_port "$n") (pid $pid)"
    else
      echo "kafka node $n: not running"
    fi
  done
}

# ------------------------------------------------------------ Apicurio Registry

# Apicurio Registry 3 from Maven Central (its app archive: a Quarkus runner jar and lib/), on
# Java 17, storage in memory (H2): every start begins empty, as the tests expect (they register
# their own subjects). The tests use its Confluent-compatible API, /apis/ccompat/v7.
APICURIO_PORT=${APICURIO_PORT:-18081}
APICURIO_MGMT_PORT=$((APICURIO_PORT + 1))
APICURIO_VERSION=${APICURIO_VERSION:-3.0.9}
APICURIO_HEAP=${APICURIO_HEAP:-256m}
APICURIO_DIR="$SERVICES_DIR/apicurio"
APICURIO_PID="$APICURIO_DIR/apicurio.pid"
APICURIO_OUT="$APICURIO_DIR/stdout.log"
APICURIO_RUNNER="apicurio-registry-app-$APICURIO_VERSION-runner.jar"

apicurio_cache_dir() { echo "${APICURIO_CACHE:-$HOME/.cache/kpgtx/apicurio-$APICURIO_VERSION}"; }
apicurio_url() { echo "http://127.0.0.1:$APICURIO_PORT/apis/ccompat/v7"; }

ensure_apicurio() {
  local dir
  dir=$(apicurio_cache_dir)
  if [[ -f "$dir/.complete" && "$(cat "$dir/.complete")" == "$APICURIO_VERSION" && -f "$dir/app/$APICURIO_RUNNER" ]]; then
    return 0
  fi
  ensure_maven
  log "Apicurio Registry $APICURIO_VERSION: fetching its app archive (about 110 MB) from Maven Central into $dir"
  mkdir -p "$dir"
  rm -rf "$dir/dl" "$dir/app.tmp" "$dir/.complete"
  if ! mvn -q -B dependency:copy \
      -Dartifact="io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" \
      -DoutputDirectory="$dir/dl" >"$dir/mvn.log" 2>&1; then
    tail -n 20 "$dir/mvn.log" >&2 || true
    die "Apicurio Registry: mvn could not fetch io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all (log: $dir/mvn.log)"
  fi
  mkdir -p "$dir/app.tmp"
  tar -xzf "$dir/dl/apicurio-registry-app-$APICURIO_VERSION-all.tar.gz" -C "$dir/app.tmp" \
    || die "Apicurio Registry: could not unpack $dir/dl/apicurio-registry-app-$APICURIO_VERSION-all.tar.gz"
  [[ -f "$dir/app.tmp/$APICURIO_RUNNER" ]] \
    || die "Apicurio Registry: the archive has no $APICURIO_RUNNER at its top (its layout changed?): $(ls "$dir/app.tmp" | tr '\n' ' ')"
  rm -rf "$dir/app" "$dir/dl"
  mv "$dir/app.tmp" "$dir/app"
  echo "$APICURIO_VERSION" >"$dir/.complete"
}

apicurio_pid() {
  local pid
  [[ -f "$APICURIO_PID" ]] || return 1
  pid=$(cat "$APICURIO_PID")
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  # As kafka_pid: a reused pid is not the registry, unless this script has just started it.
  if [[ "$pid" != "${APICURIO_STARTED_PID:-}" ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'apicurio-registry-app' || return 1
  fi
  echo "$pid"
}

apicurio_port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Ready: Quarkus's readiness checks pass (storage included) and the Confluent API answers.
apicurio_ready() {
  curl -sf -o /dev/null --max-time 5 "http://127.0.0.1:$APICURIO_PORT/health/ready" \
    && curl -sf -o /dev/null --max-time 5 "$(apicurio_url)/subjects"
}

apicurio_fail() {
  log "$1"
  log "---- tail of $APICURIO_OUT"
  tail -n 40 "$APICURIO_OUT" >&2 2>/dev/null || true
  exit 1
}

apicurio_start() {
  local pid p
  mkdir -p "$APICURIO_DIR"
  if pid=$(apicurio_pid); then
    if apicurio_ready; then
      log "Apicurio Registry: already running (pid $pid) at $(apicurio_url)"
      return 0
    fi
    log "Apicurio Registry: process $pid runs but does not answer yet: waiting"
  else
    rm -f "$APICURIO_PID"
    for p in "$APICURIO_PORT" "$APICURIO_MGMT_PORT"; do
      apicurio_port_open "$p" && die "Apicurio Registry: port $p is taken by another process" \
        "(not the registry of $APICURIO_PID); free it or set APICURIO_PORT (it uses APICURIO_PORT and APICURIO_PORT+1)"
    done
    ensure_java
    command -v curl >/dev/null 2>&1 || { log "curl not found (the readiness probe): installing curl"; apt_install curl; }
    java -version 2>&1 | grep -qE 'version "(1[7-9]|[2-9][0-9])' \
      || die "Apicurio Registry $APICURIO_VERSION needs Java 17 or later; java is: $(java -version 2>&1 | head -n 1)"
    ensure_apicurio
    local app
    app="$(apicurio_cache_dir)/app"
    log "Apicurio Registry $APICURIO_VERSION: starting on 127.0.0.1:$APICURIO_PORT (heap $APICURIO_HEAP, storage in memory)"
    echo "==== $(date -Is) starting Apicurio Registry $APICURIO_VERSION" >>"$APICURIO_OUT"
    APICURIO_T0=$SECONDS
    # setsid + closed stdin + output to a file, as the broker: it outlives this script.
    (cd "$app" && exec setsid nohup java -Xms64m -Xmx"$APICURIO_HEAP" -XX:+UseSerialGC \
      -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
      -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$APICURIO_PORT" \
      -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$APICURIO_MGMT_PORT" \
      -Dquarkus.http.access-log.enabled=false \
      -jar "$APICURIO_RUNNER" </dev/null >>"$APICURIO_OUT" 2>&1) &
    echo $! >"$APICURIO_PID"
    APICURIO_STARTED_PID=$!
    disown || true
  fi
  local deadline=$((SECONDS + SERVICES_TIMEOUT))
  until apicurio_ready; do
    apicurio_pid >/dev/null || apicurio_fail "Apicurio Registry exited during startup (log: $APICURIO_OUT)"
    ((SECONDS < deadline)) || apicurio_fail "Apicurio Registry did not become ready in ${SERVICES_TIMEOUT}s (log: $APICURIO_OUT)"
    sleep 0.5
  done
  # The tests register new versions of their subjects freely: no compatibility rule. That is
  # the registry's default (NONE is the absence of its rule: setting NONE where no rule exists
  # is an error), so it is only set when another level is found.
  local level
  level=$(curl -sf --max-time 5 "$(apicurio_url)/config" | grep -o '"compatibilityLevel" *: *"[A-Z_]*"' | grep -o '[A-Z_]*"$' | tr -d '"' || true)
  if [[ "$level" != NONE ]]; then
    log "Apicurio Registry: global compatibility is '${level:-?}': setting NONE"
    curl -sf -o /dev/null --max-time 5 -X PUT -H 'Content-Type: application/vnd.schemaregistry.v1+json' \
      -d '{"compatibility":"NONE"}' "$(apicurio_url)/config" \
      || apicurio_fail "Apicurio Registry: could not set the global compatibility to NONE"
  fi
  log "Apicurio Registry: ready at $(apicurio_url) (pid $(cat "$APICURIO_PID")${APICURIO_T0:+, after $((SECONDS - APICURIO_T0))s})"
}

apicurio_stop() {
  local pid i
  if pid=$(apicurio_pid); then
    log "Apicurio Registry: stopping (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 60; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "Apicurio Registry: still running after 30s, killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$APICURIO_PID"
}

apicurio_status() {
  local pid rss
  if pid=$(apicurio_pid); then
    rss=$(awk '/^VmRSS/ {printf "%d MB", $2 / 1024}' "/proc/$pid/status" 2>/dev/null || echo '?')
    if apicurio_ready; then
      echo "apicurio: running at $(apicurio_url) (pid $pid, version $APICURIO_VERSION, RSS $rss, log $APICURIO_OUT)"
    else
      echo "apicurio: process $pid running, not answering on 127.0.0.1:$APICURIO_PORT"
    fi
  else
    echo "apicurio: not running"
  fi
}

# ------------------------------------------------- Confluent's Python client

# Confluent's Python client and its Schema Registry serdes, pinned in test/reader/requirements.txt,
# in a venv of the cache named by the file's hash: installed once, reused, and installed anew
# when the pins change. test/reader/read.py reads the coordinator's records back with it.
PYCLIENT_REQS="$SCRIPT_DIR/../test/reader/requirements.txt"

pyclient_dir() {
  local h
  h=$(sha256sum "$PYCLIENT_REQS" | cut -c1-12)
  echo "${PYCLIENT_CACHE:-$HOME/.cache/kpgtx/pyclient-$h}"
}

pyclient_ok() {
  local dir
  [[ -f "$PYCLIENT_REQS" ]] || return 1
  dir=$(pyclient_dir)
  [[ -f "$dir/.complete" && -x "$dir/bin/python" ]]
}

install_pyclient() {
  [[ -f "$PYCLIENT_REQS" ]] || die "missing $PYCLIENT_REQS"
  local dir py
  dir=$(pyclient_dir)
  if pyclient_ok; then
    log "Python client: present ($dir)"
    return 0
  fi
  py=$(command -v python3 || true)
  [[ -n "$py" ]] || { log "python3 not found: installing python3"; apt_install python3 python3-venv; py=$(command -v python3); }
  "$py" -c 'import sys; assert sys.version_info >= (3, 9)' 2>/dev/null \
    || die "Python client: $py is $("$py" --version 2>&1); confluent-kafka needs Python 3.9 or later"
  rm -rf "$dir"
  if ! "$py" -m venv "$dir" >/dev/null 2>&1; then
    log "Python client: '$py -m venv' failed: installing python3-venv"
    apt_install python3-venv
    "$py" -m venv "$dir" || die "Python client: could not create a venv at $dir with $py"
  fi
  log "Python client: installing $PYCLIENT_REQS into $dir"
  if ! "$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$PYCLIENT_REQS" >"$dir/pip.log" 2>&1; then
    tail -n 20 "$dir/pip.log" >&2 || true
    die "Python client: pip install -r $PYCLIENT_REQS failed (log: $dir/pip.log)"
  fi
  "$dir/bin/python" -W ignore -c 'import confluent_kafka, confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.json_schema, confluent_kafka.schema_registry.protobuf, grpc_tools.protoc' \
    || die "Python client: installed, but its modules do not import (log: $dir/pip.log)"
  date -Is >"$dir/.complete"
  log "Python client: ready ($("$dir/bin/python" -W ignore -c 'from importlib.metadata import version as v; import confluent_kafka as c; print("confluent-kafka", v("confluent-kafka"), "with librdkafka", c.libversion()[0])'))"
}

# ----------------------------------------------------------------------- main

print_env() {
  echo "export DATABASE_URL=postgres://postgres@127.0.0.1:$PG_PORT/coordinator?sslmode=disable"
  echo "export DATABASE_URL_2=postgres://postgres@127.0.0.1:$PG_PORT/coordinator2?sslmode=disable"
  echo "export KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
  echo "export SCHEMA_REGISTRY_URL=$(apicurio_url)"
  if pyclient_ok; then
    echo "export SCHEMA_READER_PYTHON=$(pyclient_dir)/bin/python"
  fi
}

cmd=${1:-}
case "$cmd" in
  start)
    pg_start
    kafka_start
    [[ "${APICURIO:-1}" == 0 ]] || apicurio_start
    print_env
    ;;
  stop)
    [[ "${APICURIO:-1}" == 0 ]] || apicurio_stop
    kafka_stop
    pg_stop
    ;;
  start-apicurio)
    apicurio_start
    ;;
  stop-apicurio)
    apicurio_stop
    ;;
  install-pyclient)
    install_pyclient
    ;;
  start-postgres)
    pg_start
    ;;
  stop-postgres)
    pg_stop
    ;;
  start-kafka)
    kafka_start
    ;;
  stop-kafka)
    kafka_stop
    ;;
  crash-kafka)
    kafka_crash
    ;;
  start-cluster)
    cluster_start
    ;;
  stop-cluster)
    cluster_stop
    ;;
  cluster-status)
    cluster_status
    ;;
  kill-broker)
    check_node "${2:-}"
    node_kill "$2"
    ;;
  start-broker)
    check_node "${2:-}"
    start_broker "$2"
    ;;
  status)
    pg_status
    kafka_status
    apicurio_status
    ;;
  env)
    print_env
    ;;
  reset)
    apicurio_stop
    kafka_stop
    pg_stop
    case "$SERVICES_DIR" in
      "" | / | /var | /var/tmp | /tmp | "$HOME") die "refusing to delete SERVICES_DIR=$SERVICES_DIR" ;;
    esac
    log "deleting $SERVICES_DIR"
    rm -rf "$SERVICES_DIR"
    ;;
  *)
    echo "usage: $0 {start|stop|status|env|reset|start-postgres|stop-postgres|start-kafka|stop-kafka|crash-kafka|start-cluster|stop-cluster|cluster-status|kill-broker N|start-broker N|start-apicurio|stop-apicurio|install-pyclient}" >&2
    exit 2
    ;;
esac
