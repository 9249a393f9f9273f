#!/usr/bin/env bash
# PostgreSQL for Airflow's metadata database: on the first start (an empty $PGDATA) create the
# cluster with POSTGRES_USER as its superuser, POSTGRES_PASSWORD as its password and the
# database POSTGRES_DB; then run the server in the foreground. Later starts only run it.
#
# Access: TCP connections from the container's own networks (pg_hba "samenet": the compose
# network; no port is published) with a scram-sha-256 password; the Unix socket inside the
# container is trusted (whoever can exec into the container can read the data files anyway).
# The password is read from the environment and passed to initdb through a pipe: it is
# never written to a file or printed.
set -euo pipefail

: "${PGDATA:?}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
name='^[a-z_][a-z0-9_]*$'  # plain identifiers only: they are spliced into SQL below
[[ $user =~ $name && $db =~ $name ]] || {
  echo "dkmsks-postgres: POSTGRES_USER and POSTGRES_DB must match $name" >&2; exit 2; }

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  [ -n "${POSTGRES_PASSWORD:-}" ] || {
    echo "dkmsks-postgres: set POSTGRES_PASSWORD (e.g. in .env) before the first start" >&2; exit 2; }
  [ -w "$PGDATA" ] || {
    echo "dkmsks-postgres: $PGDATA is not writable by $(id -un); use a named volume" >&2; exit 2; }
  echo "dkmsks-postgres: initialising $PGDATA (superuser $user, database $db)"
  initdb --pgdata="$PGDATA" --username="$user" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  cat >> "$PGDATA/postgresql.conf" <<'EOF'

# dkmsks: reachable from the compose network (no published port), passwords as scram-sha-256
listen_addresses = '*'
password_encryption = scram-sha-256
EOF
  cat > "$PGDATA/pg_hba.conf" <<'EOF'
# TYPE  DATABASE  USER  ADDRESS  METHOD
local   all       all            trust
host    all       all   samenet  scram-sha-256
EOF
  if [ "$db" != postgres ]; then
    # Single-user mode: the database exists before the server accepts its first connection,
    # so a passing healthcheck means Airflow can connect.
    echo "CREATE DATABASE \"$db\" OWNER \"$user\";" | postgres --single -D "$PGDATA" -j postgres >/dev/null
  fi
  echo "dkmsks-postgres: cluster ready"
fi

exec postgres -D "$PGDATA"
