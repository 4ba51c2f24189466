#!/usr/bin/env bash
# A clockd cluster on one machine: a throwaway PostgreSQL and etcd on 127.0.0.1,
# `clockd migrate`, then two processes of each mode (leader, materializer, relay,
# worker). Everything lives under ./var/cluster; `stop` ends every process by PID.
#
#   scripts/cluster.sh start     # or: make cluster
#   scripts/cluster.sh status
#   scripts/cluster.sh kill NAME # SIGKILL one clockd process (e.g. leader-1)
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
  local port=9465
  for mode in "${MODES[@]}"; do
    for i in 1 2; do
      CLOCKD_STORE=$DSN "$BIN/clockd" run --mode "$mode" --etcd "$ETCD" --node-id "$mode-$i" \
        --metrics-addr "127.0.0.1:$port" --api-addr "127.0.0.1:$((8469 + i))" --log-format json \
        >"$DIR/logs/$mode-$i.log" 2>&1 &
      echo $! >"$DIR/$mode-$i.pid"
      echo "clockd $mode-$i (pid $!) metrics on http://127.0.0.1:$port/metrics"
      port=$((port + 1))
    done
  done
  echo
  echo "Use it:  export CLOCKD_STORE=$DSN"
  echo "         $BIN/clockctl add '* * * * *' --name hello -- echo hi"
}

stop() {
  for f in "$DIR"/*.pid; do
    [ -e "$f" ] || continue
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  local pg; pg=$(pgbin)
  [ -d "$DIR/pg" ] && as_pg "$pg/pg_ctl" -D "$DIR/pg" -m fast stop >/dev/null 2>&1 || true
  echo "stopped"
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
  kill) kill -KILL "$(cat "$DIR/${2:?name, e.g. leader-1}.pid")" && echo "killed ${2}" ;;
  *) echo "usage: $0 start|status|kill NAME|stop" >&2; exit 2 ;;
esac
