# Sourced by the scripts that run a service in the background (follow.sh, serve.sh,
# spark_connect.sh): where the service NAME of the warehouse and database its arguments name
# keeps its files, and whether it runs.
#
#   service_files NAME "$@"   # sets warehouse, database, args, run, pidfile (NAME-DB.pid), log (NAME-DB.log)
#   running                   # true while the PID file's process lives
#
# The warehouse is --warehouse, else $DKMSKS_WAREHOUSE, else .cache/warehouse; the database
# --database, else $DKMSKS_DATABASE, else "default". A folder's files are in <warehouse>/run; a
# warehouse on object storage (s3://bucket/prefix) keeps its tables there and this host's
# process files in its local home ($DKMSKS_LOCAL_DIR or .cache/local/<bucket>/<prefix>, as
# dkmsks.warehouse says). A URI it cannot use is one line and exit 2.

service_files() {
  local name=$1
  shift
  warehouse=${DKMSKS_WAREHOUSE:-$REPO/.cache/warehouse}
  database=${DKMSKS_DATABASE:-default}
  args=("$@")
  local i
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
      run=$("$REPO/.venv/bin/python" -c '
import sys
from dkmsks.warehouse import Warehouse
try:
    print(Warehouse(sys.argv[1]).run_dir)
except ValueError as err:
    sys.exit(f"{sys.argv[2]}: {err}")' "$warehouse" "$name") || exit 2
      ;;
    *)
      mkdir -p "$warehouse"
      warehouse=$(cd "$warehouse" && pwd)
      run=$warehouse/run
      ;;
  esac
  pidfile=$run/$name-$database.pid
  log=$run/$name-$database.log
}

# Alive and not a zombie (a killed service whose parent has not reaped it yet is not running).
alive() { kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != "Z" ]; }
running() { [ -f "$pidfile" ] && alive "$(cat "$pidfile")"; }

# Whether NAME runs, and the last lines of its log; true while it runs.
service_status() {
  if running; then echo "$1: running (pid $(cat "$pidfile"))"; else echo "$1: not running"; fi
  [ -f "$log" ] && { echo "last log lines:"; tail -n 5 "$log"; }
  running
}

# Stop NAME: SIGTERM, SECONDS for it to end by itself, then SIGKILL to its process group (each
# service starts in a session of its own, so its JVM and Python workers go with it), saying WHY
# that loses nothing.
service_stop() {
  local name=$1 seconds=$2 why=$3 pid
  if ! running; then echo "$name: not running"; rm -f "$pidfile"; return 0; fi
  pid=$(cat "$pidfile")
  kill -TERM "$pid"
  for _ in $(seq 1 $((seconds * 4))); do alive "$pid" || break; sleep 0.25; done
  if alive "$pid"; then
    echo "$name: still running after $seconds s; killing it and its process group ($why)"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  echo "$name: stopped"
}
