#!/usr/bin/env bash
# Run Airflow 3 locally for dkmsks: api-server, scheduler and dag-processor as separate
# processes, bound to 127.0.0.1, authentication on (SimpleAuthManager, user "admin").
#
#   scripts/airflow.sh start     # prints the UI address and where the admin password is
#   scripts/airflow.sh status
#   scripts/airflow.sh stop      # stops the three processes by PID
#
# Settings (environment): AIRFLOW_HOME (default .cache/airflow), DKMSKS_AIRFLOW_PORT (8080),
# DKMSKS_WAREHOUSE (default .cache/warehouse), DKMSKS_SPARK_MASTER for the dkmsks_spark
# connection (default local[2]; a spark://host:7077 master works unchanged), DKMSKS_MAP_URL for
# the "Live map" menu entry (default http://127.0.0.1:8750/map: scripts/serve.sh start
# --frame-ancestor http://127.0.0.1:8080).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

export AIRFLOW_HOME=${AIRFLOW_HOME:-$REPO/.cache/airflow}
PORT=${DKMSKS_AIRFLOW_PORT:-8080}
mkdir -p "$AIRFLOW_HOME"
PIDS=$AIRFLOW_HOME/pids
LOGS=$AIRFLOW_HOME/process-logs

# Secrets are generated once per AIRFLOW_HOME, kept there (mode 600), never printed.
secret() {
  local file=$AIRFLOW_HOME/$1
  if [ ! -s "$file" ]; then
    (umask 077; .venv/bin/python -c "import secrets; print(secrets.token_hex(32))" > "$file")
  fi
  cat "$file"
}

configure() {
  export PATH=$REPO/.venv/bin:$PATH   # spark-submit must be on the scheduler's PATH
  export AIRFLOW__CORE__DAGS_FOLDER=$REPO/dags
  # plugins/dkmsks_map.py: "Live map" in the Browse menu, dkm serve's /map at $DKMSKS_MAP_URL.
  export AIRFLOW__CORE__PLUGINS_FOLDER=$REPO/plugins
  export DKMSKS_MAP_URL=${DKMSKS_MAP_URL:-http://127.0.0.1:8750/map}
  export AIRFLOW__CORE__LOAD_EXAMPLES=False
  export AIRFLOW__CORE__EXECUTOR=LocalExecutor
  export AIRFLOW__CORE__PARALLELISM=${AIRFLOW__CORE__PARALLELISM:-4}
  export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
  export AIRFLOW__CORE__AUTH_MANAGER=airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager
  export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=admin:admin
  export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated
  export AIRFLOW__CORE__EXECUTION_API_SERVER_URL=http://127.0.0.1:$PORT/execution/
  export AIRFLOW__API__HOST=127.0.0.1
  export AIRFLOW__API__PORT=$PORT
  export AIRFLOW__API__BASE_URL=http://127.0.0.1:$PORT
  export AIRFLOW__API__SECRET_KEY=$(secret api_secret_key)
  export AIRFLOW__API_AUTH__JWT_SECRET=$(secret jwt_secret)
  export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=${AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL:-10}
  export AIRFLOW__SCHEDULER__DAG_DIR_LIST_INTERVAL=10
  # SQLite metadata DB: wait up to 60 s for its write lock instead of failing after 5 s.
  if [[ "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite}" == sqlite* ]]; then
    export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS=dkmsks.airflow_db.SQLITE_CONNECT_ARGS
    export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC=dkmsks.airflow_db.SQLITE_CONNECT_ARGS_ASYNC
  fi
  export AIRFLOW_CONN_DKMSKS_SPARK="{\"conn_type\": \"spark\", \"host\": \"${DKMSKS_SPARK_MASTER:-local[2]}\"}"
  export DKMSKS_WAREHOUSE=${DKMSKS_WAREHOUSE:-$REPO/.cache/warehouse}
  export DKMSKS_HOME=$REPO
  export PYSPARK_PYTHON=$REPO/.venv/bin/python
  export SPARK_LOCAL_IP=127.0.0.1
}

running() { [ -f "$PIDS/$1" ] && kill -0 "$(cat "$PIDS/$1")" 2>/dev/null; }

start() {
  configure
  mkdir -p "$PIDS" "$LOGS"
  chmod 700 "$LOGS"  # process logs are the operator's only
  if running api-server || running scheduler || running dag-processor; then
    echo "airflow: already running (scripts/airflow.sh status)"; return 0
  fi
  .venv/bin/airflow db migrate > "$LOGS/db-migrate.log" 2>&1
  .venv/bin/airflow pools set dkmsks_writers 1 "dkmsks: one writer of the Delta tables at a time" \
    > "$LOGS/pools.log" 2>&1
  # SimpleAuthManager prints the generated admin password at start-up; it stays in its own
  # file (whose path `start` prints), not in the log. $! stays the api-server's PID. The
  # api-server writes that file with the umask it starts with: 077 keeps it the operator's only
  # (an AIRFLOW_HOME is world-readable by default), and a file an older start left is mended.
  [ ! -f "$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" ] || chmod 600 "$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"
  local umask_before
  umask_before=$(umask)
  umask 077
  nohup .venv/bin/airflow api-server --host 127.0.0.1 --port "$PORT" --workers 1 \
    > >(grep --line-buffered -v "Password for user" > "$LOGS/api-server.log" 2>&1) 2>&1 &
  echo $! > "$PIDS/api-server"
  umask "$umask_before"
  nohup .venv/bin/airflow scheduler --skip-serve-logs > "$LOGS/scheduler.log" 2>&1 &
  echo $! > "$PIDS/scheduler"
  nohup .venv/bin/airflow dag-processor > "$LOGS/dag-processor.log" 2>&1 &
  echo $! > "$PIDS/dag-processor"
  for _ in $(seq 1 120); do
    if curl -fsS "http://127.0.0.1:$PORT/api/v2/monitor/health" > /dev/null 2>&1; then
      echo "airflow: up at http://127.0.0.1:$PORT (user admin; password in $AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE)"
      return 0
    fi
    sleep 1
  done
  echo "airflow: the api-server did not answer within 120 s; see $LOGS" >&2
  return 1
}

stop() {
  for name in scheduler dag-processor api-server; do
    if running "$name"; then
      pid=$(cat "$PIDS/$name")
      pkill -TERM -P "$pid" 2>/dev/null || true
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      if kill -0 "$pid" 2>/dev/null; then pkill -KILL -P "$pid" 2>/dev/null || true; kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    rm -f "$PIDS/$name"
  done
  echo "airflow: stopped"
}

status() {
  for name in api-server scheduler dag-processor; do
    if running "$name"; then echo "$name: running (pid $(cat "$PIDS/$name"))"; else echo "$name: stopped"; fi
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
