#!/usr/bin/env bash
# Run follow mode as a service: one warm Spark application that processes every timestamp as
# it lands (dkm follow), in the background, with a PID file and a log.
#
#   scripts/follow.sh start [dkm follow flags...]   # e.g. --warehouse W --database D --slots 32
#   scripts/follow.sh status [--warehouse W] [--database D]
#   scripts/follow.sh stop   [--warehouse W] [--database D]   # SIGTERM: the round in flight ends first
#
# Files: <warehouse>/run/follow-<database>.pid, .log and .status.json (what it is doing); for a
# warehouse on object storage, in this host's local home of it instead (<local home>/run/...).
# The warehouse defaults to $DKMSKS_WAREHOUSE or .cache/warehouse, the database to
# $DKMSKS_DATABASE or "default". Safe to stop and start at any time, or to kill -9: every
# committed timestamp is in Delta and an interrupted round commits nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
action=${1:-status}
shift || true

warehouse=${DKMSKS_WAREHOUSE:-$REPO/.cache/warehouse}
database=${DKMSKS_DATABASE:-default}
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --warehouse) warehouse=${args[i+1]} ;;
    --warehouse=*) warehouse=${args[i]#*=} ;;
    --database) database=${args[i+1]} ;;
    --database=*) database=${args[i]#*=} ;;
  esac
done
case "$warehouse" in
  *://*)
    # On object storage (s3://bucket/prefix) the tables are there, and this host's process files
    # in its local home ($DKMSKS_LOCAL_DIR or .cache/local/<bucket>/<prefix>, dkmsks.warehouse).
    run=$("$REPO/.venv/bin/python" -c '
import sys
from dkmsks.warehouse import Warehouse
try:
    print(Warehouse(sys.argv[1]).run_dir)
except ValueError as err:
    sys.exit(f"follow: {err}")' "$warehouse") || exit 2
    ;;
  *)
    mkdir -p "$warehouse"
    warehouse=$(cd "$warehouse" && pwd)
    run=$warehouse/run
    ;;
esac
pidfile=$run/follow-$database.pid
log=$run/follow-$database.log
statusfile=$run/follow-$database.status.json

# Alive and not a zombie (a killed service whose parent has not reaped it yet is not running).
alive() { kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != "Z" ]; }
running() { [ -f "$pidfile" ] && alive "$(cat "$pidfile")"; }

case "$action" in
  start)
    if running; then echo "follow: already running (pid $(cat "$pidfile"))"; exit 0; fi
    mkdir -p "$run"
    export PYSPARK_PYTHON=$REPO/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1
    # A session of its own (setsid): stop, and a crash test's kill -9, reach its JVM and workers too.
    setsid nohup "$REPO/.venv/bin/dkm" follow --warehouse "$warehouse" --database "$database" "${args[@]}" \
      >> "$log" 2>&1 < /dev/null &
    echo $! > "$pidfile"
    echo "follow: started (pid $!), log $log"
    ;;
  status)
    if running; then echo "follow: running (pid $(cat "$pidfile"))"; else echo "follow: not running"; fi
    [ -f "$statusfile" ] && echo "status: $(cat "$statusfile")"
    [ -f "$log" ] && { echo "last log lines:"; tail -n 5 "$log"; }
    running
    ;;
  stop)
    if ! running; then echo "follow: not running"; rm -f "$pidfile"; exit 0; fi
    pid=$(cat "$pidfile")
    kill -TERM "$pid"
    for _ in $(seq 1 120); do alive "$pid" || break; sleep 0.5; done
    if alive "$pid"; then
      echo "follow: still running after 60 s; killing it (nothing is lost: see docs/design.md §8)"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
    echo "follow: stopped"
    ;;
  *)
    echo "usage: scripts/follow.sh start|status|stop [--warehouse W] [--database D] [dkm follow flags]" >&2
    exit 2
    ;;
esac
