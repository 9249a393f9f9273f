#!/usr/bin/env bash
# Run the HTTP service (dkm serve) over a warehouse in the background, with a PID file and a log.
#
#   scripts/serve.sh start [dkm serve flags...]   # e.g. --warehouse W --database D --port 8750
#   scripts/serve.sh status [--warehouse W] [--database D]
#   scripts/serve.sh stop   [--warehouse W] [--database D]   # SIGTERM: streams end, the publisher drains
#
# Files: <warehouse>/run/serve-<database>.pid and .log. The warehouse defaults to
# $DKMSKS_WAREHOUSE or .cache/warehouse, the database to $DKMSKS_DATABASE or "default". A token
# must exist first (dkm token create --name NAME --scope admin). The log holds request lines
# (method, path, status), never a header or a token.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
action=${1:-status}
shift || true

# shellcheck source=scripts/service_files.sh
source "$REPO/scripts/service_files.sh"
service_files serve "$@"

case "$action" in
  start)
    if running; then echo "serve: already running (pid $(cat "$pidfile"))"; exit 0; fi
    mkdir -p "$run"
    setsid nohup "$REPO/.venv/bin/dkm" serve --warehouse "$warehouse" --database "$database" "${args[@]}" \
      >> "$log" 2>&1 < /dev/null &
    echo $! > "$pidfile"
    # Up when it answers /healthz, or failed when it has exited (the log says why).
    for _ in $(seq 1 100); do
      if ! alive "$(cat "$pidfile")"; then echo "serve: exited at start; last log lines:"; tail -n 5 "$log"; exit 1; fi
      grep -q "Uvicorn running\|Application startup complete" "$log" 2>/dev/null && break
      sleep 0.2
    done
    echo "serve: started (pid $(cat "$pidfile")), log $log"
    grep "dkm serve:" "$log" | tail -n 1
    ;;
  status)
    service_status serve
    ;;
  stop)
    service_stop serve 10 "published rows are in Delta; streams resume"
    ;;
  *)
    echo "usage: scripts/serve.sh start|status|stop [--warehouse W] [--database D] [dkm serve flags]" >&2
    exit 2
    ;;
esac
