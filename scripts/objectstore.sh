#!/usr/bin/env bash
# An S3-compatible object store on 127.0.0.1 for a warehouse every host can reach: the Versity
# S3 Gateway (Apache-2.0) over a local folder, installed from the Go module proxy on first use.
#
#   scripts/objectstore.sh start    # installs (once, ~3 min), starts, creates the bucket
#   scripts/objectstore.sh status
#   scripts/objectstore.sh stop     # by PID
#   scripts/objectstore.sh env      # the path of the client settings (below)
#   scripts/objectstore.sh install  # only the binary (.cache/bin; docker/build-base.sh copies it
#                                   # into the compose stack's object-store image)
#
# Settings (environment): DKMSKS_OBJECTSTORE_DIR (default .cache/objectstore: data, PID, log,
# credentials), DKMSKS_OBJECTSTORE_PORT (7070), DKMSKS_BUCKET (dkmsks).
#
# Every start writes what a client needs to $DKMSKS_OBJECTSTORE_DIR/env (mode 600, KEY=value
# lines: the endpoint, the credentials, DKMSKS_WAREHOUSE=s3://<bucket>/warehouse), so
#   set -a; . .cache/objectstore/env; set +a
# points every dkm command, job, DAG and the client at it. The credentials are made once per
# folder (random, mode 600) and never printed.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

VERSITYGW_MODULE=github.com/versity/versitygw/cmd/versitygw
VERSITYGW_VERSION=v1.8.0
DIR=${DKMSKS_OBJECTSTORE_DIR:-$REPO/.cache/objectstore}
PORT=${DKMSKS_OBJECTSTORE_PORT:-7070}
BUCKET=${DKMSKS_BUCKET:-dkmsks}
BIN=$REPO/.cache/bin/versitygw-$VERSITYGW_VERSION
PIDFILE=$DIR/versitygw.pid
LOG=$DIR/versitygw.log
ENVFILE=$DIR/env
ENDPOINT=http://127.0.0.1:$PORT
REGION=us-east-1
EMPTY_SHA256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855

alive() { kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != "Z" ]; }
running() { [ -f "$PIDFILE" ] && alive "$(cat "$PIDFILE")"; }

# A static binary (no cgo): the same file runs on this host and in any Linux container.
install() {
  [ -x "$BIN" ] && return 0
  command -v go >/dev/null 2>&1 || { echo "objectstore: Go is needed to build the Versity S3 Gateway (go not found)" >&2; exit 2; }
  echo "objectstore: building versitygw $VERSITYGW_VERSION from the Go module proxy (once, ~3 min)"
  mkdir -p "$REPO/.cache/bin" "$DIR"
  local gobin
  gobin=$(mktemp -d)
  if ! CGO_ENABLED=0 GOBIN=$gobin go install -trimpath "$VERSITYGW_MODULE@$VERSITYGW_VERSION" > "$DIR/build.log" 2>&1; then
    echo "objectstore: go install failed (see $DIR/build.log)" >&2
    rm -rf "$gobin"
    exit 2
  fi
  mv "$gobin/versitygw" "$BIN"
  rm -rf "$gobin"
}

credentials() {
  if [ ! -s "$DIR/credentials" ]; then
    (umask 077
     printf 'key=%s\nsecret=%s\n' "dkmsks$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" \
       "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" > "$DIR/credentials")
  fi
  KEY=$(sed -n 's/^key=//p' "$DIR/credentials")
  SECRET=$(sed -n 's/^secret=//p' "$DIR/credentials")
}

# One signed S3 request (curl's SigV4); prints the HTTP status. The secret goes through a
# file that only this user reads, never the command line.
s3() {
  local method=$1 path=$2 netrc
  netrc=$(umask 077; mktemp)
  printf 'machine 127.0.0.1 login %s password %s\n' "$KEY" "$SECRET" > "$netrc"
  local how=(-X "$method")
  [ "$method" = HEAD ] && how=(--head)
  # The hash of an empty body: the gateway wants every request to say what it signed.
  curl -s -o /dev/null -w '%{http_code}' --netrc-file "$netrc" --aws-sigv4 "aws:amz:$REGION:s3" \
    -H "x-amz-content-sha256: $EMPTY_SHA256" "${how[@]}" "$ENDPOINT/$path" || true
  rm -f "$netrc"
}

write_env() {
  (umask 077
   cat > "$ENVFILE.tmp" <<EOF
AWS_ACCESS_KEY_ID=$KEY
AWS_SECRET_ACCESS_KEY=$SECRET
AWS_ENDPOINT_URL=$ENDPOINT
AWS_REGION=$REGION
DKMSKS_WAREHOUSE=s3://$BUCKET/warehouse
EOF
   mv "$ENVFILE.tmp" "$ENVFILE")
}

action=${1:-status}
case "$action" in
  start)
    mkdir -p "$DIR/data"
    chmod 700 "$DIR"
    credentials
    if running; then
      echo "objectstore: already running (pid $(cat "$PIDFILE")) at $ENDPOINT"
    else
      install
      if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
        echo "objectstore: 127.0.0.1:$PORT is taken by another process; set DKMSKS_OBJECTSTORE_PORT" >&2
        exit 2
      fi
      ROOT_ACCESS_KEY_ID=$KEY ROOT_SECRET_ACCESS_KEY=$SECRET setsid nohup "$BIN" --port "127.0.0.1:$PORT" \
        posix "$DIR/data" >> "$LOG" 2>&1 < /dev/null &
      echo $! > "$PIDFILE"
      for _ in $(seq 1 100); do
        [ "$(s3 GET "")" = 200 ] && break
        alive "$(cat "$PIDFILE")" || { echo "objectstore: versitygw exited at start (see $LOG)" >&2; exit 1; }
        sleep 0.1
      done
      [ "$(s3 GET "")" = 200 ] || { echo "objectstore: versitygw does not answer at $ENDPOINT (see $LOG)" >&2; exit 1; }
      echo "objectstore: started (pid $(cat "$PIDFILE")) at $ENDPOINT, data in $DIR/data"
    fi
    case "$(s3 HEAD "$BUCKET")" in
      200) ;;
      404) code=$(s3 PUT "$BUCKET")
           [ "$code" = 200 ] || { echo "objectstore: creating bucket $BUCKET failed (HTTP $code)" >&2; exit 1; }
           echo "objectstore: created bucket $BUCKET" ;;
      *) echo "objectstore: bucket $BUCKET: unexpected answer" >&2; exit 1 ;;
    esac
    write_env
    echo "objectstore: client settings in $ENVFILE (set -a; . $ENVFILE; set +a)"
    ;;
  status)
    if running; then echo "objectstore: running (pid $(cat "$PIDFILE")) at $ENDPOINT"; else echo "objectstore: not running"; fi
    running
    ;;
  stop)
    if ! running; then echo "objectstore: not running"; rm -f "$PIDFILE"; exit 0; fi
    pid=$(cat "$PIDFILE")
    kill -TERM "$pid"
    for _ in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
    echo "objectstore: stopped"
    ;;
  env)
    echo "$ENVFILE"
    ;;
  install)
    install
    echo "$BIN"
    ;;
  *)
    echo "usage: scripts/objectstore.sh start|status|stop|env|install" >&2
    exit 2
    ;;
esac
