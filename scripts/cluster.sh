#!/usr/bin/env bash
# A clockd cluster on one machine: a throwaway PostgreSQL and etcd on 127.0.0.1,
# `clockd migrate`, then two processes of each mode (leader, materializer, relay,
# worker). Everything lives under ./var/cluster; `stop` ends every process by PID.
#
#   scripts/cluster.sh start     # or: make cluster
#   scripts/cluster.sh status
#   scripts/cluster.sh kill NAME # SIGKILL one clockd process (e.g. leader-1)
#   scripts/cluster.sh restart NAME  # start it again
#   scripts/cluster.sh stop
#
# Ports: PGPORT (default 55432), ETCD_PORT (default 23790), ETCD_PEER_PORT (23800).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${CLUSTER_DIR:-$PWD/var/cluster}
PGPORT=${PGPORT:-55432}
ETCD_PORT=${ETCD_PORT:-23790}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23800}
BIN=$PWD/.venv/bin
DSN="postgresql://postgres@127.0.0.1:$PGPORT/clockd"
ETCD="http://127.0.0.1:$ETCD_PORT"
MODES=(leader materializer relay worker api)

pgbin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

start() {
  [ -x "$BIN/clockd" ] || { echo "run 'make install' first" >&2; exit 1; }
  mkdir -p "$DIR/logs"
  local pg; pg=$(pgbin)
  [ -n "$pg" ] || { echo "PostgreSQL server binaries not found: run 'make servers'" >&2; exit 1; }
  command -v etcd >/dev/null || { echo "etcd not found: run 'make servers'" >&2; exit 1; }

  if [ ! -d "$DIR/pg" ]; then
    mkdir -p "$DIR/pg"
    [ "$(id -u)" -eq 0 ] && chown postgres "$DIR/pg"
    as_pg "$pg/initdb" -D "$DIR/pg" -A trust -U postgres >/dev/null
  fi
  [ "$(id -u)" -eq 0 ] && chown postgres "$DIR/logs" "$DIR"
  as_pg "$pg/pg_ctl" -D "$DIR/pg" -w -l "$DIR/logs/postgres.log" \
    -o "-p $PGPORT -k $DIR/pg -c listen_addresses=127.0.0.1 -c jit=off" start >/dev/null
  as_pg "$pg/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -qtc "SELECT 1 FROM pg_database WHERE datname='clockd'" \
    | grep -q 1 || as_pg "$pg/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres clockd
  echo "PostgreSQL on 127.0.0.1:$PGPORT"

  etcd --name clockd-dev --data-dir "$DIR/etcd" \
    --listen-client-urls "$ETCD" --advertise-client-urls "$ETCD" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "clockd-dev=http://127.0.0.1:$ETCD_PEER_PORT" \
    --logger zap --log-outputs stderr --log-level warn >"$DIR/logs/etcd.log" 2>&1 &
  echo $! >"$DIR/etcd.pid"
  for _ in $(seq 50); do curl -sf "$ETCD/health" >/dev/null 2>&1 && break; sleep 0.2; done
  echo "etcd on $ETCD"

  CLOCKD_STORE=$DSN "$BIN/clockd" migrate
  for mode in "${MODES[@]}"; do
    for i in 1 2; do run_node "$mode-$i"; done
  done
  echo
  echo "Use it:  export CLOCKD_STORE=$DSN"
  echo "         $BIN/clockctl add '* * * * *' --name hello -- echo hi"
}

# Whether PID runs (a zombie does not: a killed node is one until it is reaped).
alive() { [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# SIGTERM the processes of the pid files given, then wait (bounded) until they are gone.
term_and_wait() {
  local pids=() f pid
  for f in "$@"; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null && pids+=("$pid")
    rm -f "$f"
  done
  for _ in $(seq 600); do  # 60 s: a worker's drain_grace (30 s) and kill_grace (10 s), and margin
    local running=0
    for pid in "${pids[@]}"; do alive "$pid" && running=1; done
    [ "$running" -eq 0 ] && return 0
    sleep 0.1
  done
  echo "still running after 60 s: ${pids[*]}" >&2
}

# One clockd process, NAME = MODE-N (N 1 or 2): its metrics port follows from its place
# in MODES, so a node started again (`restart NAME`) gets the same one.
run_node() {
  local name=$1 mode=${1%-*} i=${1##*-} k port
  for k in "${!MODES[@]}"; do [ "${MODES[$k]}" = "$mode" ] && port=$((9465 + 2 * k + i - 1)); done
  [ -n "${port:-}" ] && [[ $i == [12] ]] || { echo "no node $name: give MODE-1 or MODE-2 (modes: ${MODES[*]})" >&2; exit 2; }
  CLOCKD_STORE=$DSN "$BIN/clockd" run --mode "$mode" --etcd "$ETCD" --node-id "$name" \
    --metrics-addr "127.0.0.1:$port" --api-addr "127.0.0.1:$((8469 + i))" --log-format json \
    >>"$DIR/logs/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
  echo "clockd $name (pid $!) metrics on http://127.0.0.1:$port/metrics"
}

restart() {
  local name=${1:?name, e.g. worker-1} pid
  if [ -e "$DIR/$name.pid" ]; then
    pid=$(cat "$DIR/$name.pid")
    if alive "$pid"; then
      echo "$name is running (pid $pid): kill it first" >&2
      exit 2
    fi
  fi
  run_node "$name"
}

stop() {
  # clockd first, and wait for it: a worker stopping records its finished runs in the
  # store, so PostgreSQL and etcd must outlive it (stopped first, a run that had finished
  # was left unrecorded and ran again at the next start).
  local clockd_pids=()
  for f in "$DIR"/*.pid; do
    [ -e "$f" ] && [ "$(basename "$f")" != etcd.pid ] && clockd_pids+=("$f")
  done
  term_and_wait "${clockd_pids[@]}"
  term_and_wait "$DIR/etcd.pid"
  local pg; pg=$(pgbin)
  [ -d "$DIR/pg" ] && as_pg "$pg/pg_ctl" -D "$DIR/pg" -m fast -w stop >/dev/null 2>&1 || true
  echo "stopped"
}

kill_one() {
  local name=${1:?name, e.g. leader-1} pid
  if [ ! -e "$DIR/$name.pid" ]; then
    echo "no process named $name (running: $(cd "$DIR" 2>/dev/null && ls -- *.pid 2>/dev/null | sed 's/\.pid$//' | tr '\n' ' '))" >&2
    exit 2
  fi
  pid=$(cat "$DIR/$name.pid")
  if alive "$pid" && kill -KILL "$pid" 2>/dev/null; then
    echo "killed $name (pid $pid)"
  else
    echo "$name (pid $pid) was not running"
  fi
}

status() {
  for f in "$DIR"/*.pid; do
    [ -e "$f" ] || continue
    local name; name=$(basename "$f" .pid)
    if kill -0 "$(cat "$f")" 2>/dev/null; then echo "$name running (pid $(cat "$f"))"; else echo "$name dead"; fi
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  kill) kill_one "${2:-}" ;;
  restart) restart "${2:-}" ;;
  *) echo "usage: $0 start|status|kill NAME|restart NAME|stop" >&2; exit 2 ;;
esac
