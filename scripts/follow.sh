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

# shellcheck source=scripts/service_files.sh
source "$REPO/scripts/service_files.sh"
service_files follow "$@"
statusfile=$run/follow-$database.status.json

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
    service_stop follow 60 "nothing is lost: see docs/design.md §8"
    ;;
  *)
    echo "usage: scripts/follow.sh start|status|stop [--warehouse W] [--database D] [dkm follow flags]" >&2
    exit 2
    ;;
esac
