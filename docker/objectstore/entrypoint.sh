#!/usr/bin/env bash
# The object store of docker-compose.yml (image dkmsks-objectstore, docker/objectstore/Dockerfile).
#
#   serve   make the credentials once (random, mode 600, never printed) in the shared-credentials
#           file every client of the stack reads (AWS_SHARED_CREDENTIALS_FILE, profile AWS_PROFILE),
#           then run the Versity S3 Gateway with them as its root user on :7070, its objects in
#           /var/lib/versitygw/data (a named volume; a bucket is a folder, an object a file)
#   check   the healthcheck: a signed ListBuckets on 127.0.0.1 answers 200 (up, and the
#           credentials are the gateway's)
#   init    the one-shot objectstore-init: create bucket $DKMSKS_BUCKET (default dkmsks) at
#           $AWS_ENDPOINT_URL unless it exists
#
# As scripts/objectstore.sh does on a host: the gateway gets its root user from the environment
# (ROOT_ACCESS_KEY_ID/ROOT_SECRET_ACCESS_KEY, set here for its process only), and requests are
# signed by curl's SigV4 with the secret in a file only this user reads, never on a command line.
set -euo pipefail

CREDENTIALS=${AWS_SHARED_CREDENTIALS_FILE:-/etc/dkmsks/objectstore/credentials}
PROFILE=${AWS_PROFILE:-dkmsks}
DATA=/var/lib/versitygw/data
PORT=7070
REGION=${AWS_REGION:-us-east-1}
BUCKET=${DKMSKS_BUCKET:-dkmsks}
EMPTY_SHA256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855

make_credentials() {
  [ -s "$CREDENTIALS" ] && return 0
  (umask 077
   printf '[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$PROFILE" \
     "dkmsks$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" \
     > "$CREDENTIALS.tmp"
   mv "$CREDENTIALS.tmp" "$CREDENTIALS")
  echo "objectstore: credentials made in $CREDENTIALS (profile $PROFILE)"
}

read_credentials() {
  [ -s "$CREDENTIALS" ] || { echo "objectstore: no credentials in $CREDENTIALS" >&2; exit 1; }
  KEY=$(sed -n 's/^aws_access_key_id *= *//p' "$CREDENTIALS")
  SECRET=$(sed -n 's/^aws_secret_access_key *= *//p' "$CREDENTIALS")
  [ -n "$KEY" ] && [ -n "$SECRET" ] || { echo "objectstore: $CREDENTIALS holds no key and secret" >&2; exit 1; }
}

# One signed request to ENDPOINT/PATH; prints the HTTP status.
s3() {
  local method=$1 endpoint=$2 path=$3 netrc host
  host=${endpoint#*://}
  host=${host%%[:/]*}
  netrc=$(umask 077; mktemp)
  printf 'machine %s login %s password %s\n' "$host" "$KEY" "$SECRET" > "$netrc"
  local how=(-X "$method")
  [ "$method" = HEAD ] && how=(--head)
  curl -s -o /dev/null -w '%{http_code}' --max-time 10 --netrc-file "$netrc" --aws-sigv4 "aws:amz:$REGION:s3" \
    -H "x-amz-content-sha256: $EMPTY_SHA256" "${how[@]}" "$endpoint/$path" || true
  rm -f "$netrc"
}

case "${1:-serve}" in
  serve)
    make_credentials
    read_credentials
    mkdir -p "$DATA"
    # --quiet: no line per request in the service's log.
    ROOT_ACCESS_KEY_ID=$KEY ROOT_SECRET_ACCESS_KEY=$SECRET exec versitygw --quiet --port ":$PORT" \
      --region "$REGION" posix "$DATA"
    ;;
  check)
    read_credentials
    [ "$(s3 GET "http://127.0.0.1:$PORT" "")" = 200 ]
    ;;
  init)
    read_credentials
    endpoint=${AWS_ENDPOINT_URL:-http://127.0.0.1:$PORT}
    code=$(s3 HEAD "$endpoint" "$BUCKET")
    case "$code" in
      200) echo "objectstore-init: bucket $BUCKET exists" ;;
      404) code=$(s3 PUT "$endpoint" "$BUCKET")
           [ "$code" = 200 ] || { echo "objectstore-init: creating bucket $BUCKET failed (HTTP $code)" >&2; exit 1; }
           echo "objectstore-init: created bucket $BUCKET" ;;
      *) echo "objectstore-init: bucket $BUCKET at $endpoint: HTTP $code" >&2; exit 1 ;;
    esac
    ;;
  *)
    echo "usage: dkmsks-objectstore serve|check|init" >&2
    exit 2
    ;;
esac
