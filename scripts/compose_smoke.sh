#!/usr/bin/env bash
# Start the docker-compose stack for real and check it end to end, then take it down again:
#
#   scripts/compose_smoke.sh            # up, check, down -v
#   DKMSKS_SMOKE_KEEP=1 scripts/compose_smoke.sh    # leave the stack running afterwards
#
# or one step at a time, so that several checks share one start (tests/e2e/test_compose_stack.py):
#
#   scripts/compose_smoke.sh up         # base images if missing, build, up, wait until all are healthy
#   scripts/compose_smoke.sh check [ARGS]   # docker/compose_e2e.py ARGS on the running stack
#   scripts/compose_smoke.sh down       # down -v: containers, network and volumes removed
#
# The checks (docker/compose_e2e.py): Airflow's REST API on 127.0.0.1:8080 signs in, the ingest
# DAG loads a small real-data workload, the partition and micro-batch DAGs process its first
# timestamps on the Spark cluster, the follow service processes the rest as they are
# published and stops cleanly on SIGTERM, and `dkm export` equals `dkm oracle` (host) at two
# timestamps — all on the stack's object store, which no other container's volume shares.
# docs/deployment.md records a run and its timings.
#
# A compose project of its own (dkmsks-smoke): its volumes start empty and are removed at
# the end, so a stack started with plain `docker-compose up` keeps its data; both publish
# 127.0.0.1:8080 and :8090, so only one of them can run at a time.
#
# Needs: a running Docker daemon, docker-compose, debootstrap and root for the base images and
# Go for the object store's (docker/build-base.sh), the host's .venv (dkm generate/oracle) and
# the real data set (DKMSKS_SHARED_DATA, default ../shared/data). DKMSKS_EXTRA_CA names CA
# certificate files (PEM, .crt) for builds behind a TLS-inspecting proxy (docker/extra-ca/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-dkmsks-smoke}
export DKMSKS_INPUT=${DKMSKS_INPUT:-$PWD/.cache/compose/input}
started=$SECONDS
step() { echo "[smoke $((SECONDS - started)) s] $*"; }

# The services `up` starts: all but follow (the check starts it once the DAGs have done their
# part) and the one-off client; and those with a healthcheck to wait for.
started_services() { docker-compose config --services | grep -vx -e follow -e client; }
checked_services() { started_services | grep -vx -e airflow-init -e objectstore-init; }
# The services' last log lines, beside the input folder, for whoever reads a failure.
failure_log() { docker-compose logs --no-color --tail 40 > "$DKMSKS_INPUT/../smoke-failure.log" 2>&1 || true; }

up() {
  for tool in docker docker-compose; do
    command -v "$tool" > /dev/null || { echo "compose_smoke: $tool not found (Debian: apt-get install docker.io docker-compose)" >&2; exit 1; }
  done
  docker info > /dev/null 2>&1 || { echo "compose_smoke: no Docker daemon answers (start dockerd)" >&2; exit 1; }
  for ca in ${DKMSKS_EXTRA_CA:-}; do cp "$ca" docker/extra-ca/; done
  docker/build-base.sh
  step "base images ready"
  docker-compose build follow  # one build: every dkmsks service runs the image dkmsks:0.1.0
  step "image dkmsks:0.1.0 built"
  mkdir -p "$DKMSKS_INPUT"
  docker-compose up -d $(started_services) || { failure_log; exit 1; }
  # Debian's docker-compose v1 has no `up --wait`: poll every started service's healthcheck.
  unhealthy() {
    for service in $(checked_services); do
      state=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$(docker-compose ps -q "$service")")
      [ "$state" = healthy ] || echo "$service:$state"
    done
  }
  for _ in $(seq 1 120); do [ -z "$(unhealthy)" ] && break; sleep 5; done
  [ -z "$(unhealthy)" ] || { echo "compose_smoke: not healthy after 10 minutes: $(unhealthy | tr '\n' ' ')" >&2; failure_log; exit 1; }
  step "stack up: $(docker-compose ps --services --filter status=running | tr '\n' ' ')"
}

check() {
  [ -x .venv/bin/dkm ] || { echo "compose_smoke: .venv/bin/dkm missing (make venv)" >&2; exit 1; }
  python3 docker/compose_e2e.py "$@" || { failure_log; exit 1; }
  step "end-to-end check passed"
}

down() {
  docker-compose down -v > /dev/null 2>&1 || true
  step "stack down, its volumes removed"
}

case "${1:-all}" in
  up) up ;;
  check) shift; check "$@" ;;
  down) down ;;
  all | --*)
    [ "${1:-all}" = all ] && [ $# -gt 0 ] && shift
    finish() {
      status=$?
      if [ "${DKMSKS_SMOKE_KEEP:-0}" = 1 ]; then
        step "left running (project $COMPOSE_PROJECT_NAME): docker-compose -p $COMPOSE_PROJECT_NAME down -v"
      else
        down
      fi
      exit $status
    }
    trap finish EXIT
    up
    check "$@"
    ;;
  *) echo "usage: scripts/compose_smoke.sh [up | check [ARGS] | down]" >&2; exit 2 ;;
esac
