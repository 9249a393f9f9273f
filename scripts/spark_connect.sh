#!/usr/bin/env bash
# Run a Spark Connect server over a warehouse (dkm spark-connect) in the background, with a PID
# file, a log and a token, so that clients without a JVM can query the tables and views:
#
#   scripts/spark_connect.sh start [dkm spark-connect flags...]   # e.g. --warehouse W --port 15002
#   scripts/spark_connect.sh status [--warehouse W] [--database D]
#   scripts/spark_connect.sh stop   [--warehouse W] [--database D]   # SIGTERM to the PID, then waits
#   dkm sql --remote sc://localhost:15002 "SELECT * FROM ledger ORDER BY t DESC LIMIT 5"
#
# Files: <warehouse>/run/spark-connect-<database>.pid, .log and .token (mode 600; made at the
# first start: 32 random bytes that every client must send; delete it and restart to change it).
# The server binds to 127.0.0.1 unless --host says otherwise, and Spark Connect has no TLS: a
# client on another host reaches it through an SSH tunnel or a TLS-terminating proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
action=${1:-status}
shift || true

# shellcheck source=scripts/service_files.sh
source "$REPO/scripts/service_files.sh"
service_files spark-connect "$@"
token=$run/spark-connect-$database.token

case "$action" in
  start)
    if running; then echo "spark-connect: already running (pid $(cat "$pidfile"))"; exit 0; fi
    mkdir -p "$run"
    if [ ! -s "$token" ]; then
      PYTHONPATH=$REPO/lib${PYTHONPATH:+:$PYTHONPATH} "$REPO/.venv/bin/python" -c \
        'import sys; from pathlib import Path; from dkmsks.spark.connect import make_token; make_token(Path(sys.argv[1]))' \
        "$token"
      echo "spark-connect: made the token $token (mode 600)"
    fi
    : > "$log"
    setsid nohup "$REPO/.venv/bin/dkm" spark-connect --warehouse "$warehouse" --database "$database" "${args[@]}" \
      >> "$log" 2>&1 < /dev/null &
    echo $! > "$pidfile"
    # Up when the server says it serves (after the tables and views are registered: ~10-30 s).
    for _ in $(seq 1 600); do
      if ! alive "$(cat "$pidfile")"; then echo "spark-connect: exited at start; last log lines:"; tail -n 20 "$log"; exit 1; fi
      grep -q "dkm spark-connect: serving" "$log" 2>/dev/null && break
      sleep 0.5
    done
    if ! grep -q "dkm spark-connect: serving" "$log"; then echo "spark-connect: not serving after 300 s; see $log"; exit 1; fi
    echo "spark-connect: started (pid $(cat "$pidfile")), log $log"
    grep "dkm spark-connect: serving" "$log" | tail -n 1
    ;;
  status)
    service_status spark-connect
    ;;
  stop)
    service_stop spark-connect 60 "it holds no state: its clients reconnect"
    ;;
  *)
    echo "usage: scripts/spark_connect.sh start|status|stop [--warehouse W] [--database D] [dkm spark-connect flags]" >&2
    exit 2
    ;;
esac
