#!/usr/bin/env bash
# What the test suite needs from Debian's packages: headless Chromium for the browser test
# (tests/e2e/test_airflow_ui.py; Playwright drives it through executable_path, no browser
# build is downloaded), and for tests/e2e/test_compose*.py the docker-compose client, the
# Docker daemon (docker.io; the test starts dockerd itself when none runs) and debootstrap (the
# base images are made from Debian's packages: no image registry is needed). Installed with
# apt-get when absent; a no-op once installed.
#
# When it cannot install (not root, no apt-get, no network) it says why. On a developer's
# machine it then exits 0 and the tests that need the package skip, naming it; under CI=true
# it exits 1: a CI run must not pass by skipping.
set -uo pipefail

CHROMIUM=${DKMSKS_CHROMIUM:-/usr/bin/chromium}
missing=()
[ -x "$CHROMIUM" ] || missing+=(chromium)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v dockerd >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
[ ${#missing[@]} -eq 0 ] && exit 0

fail() {
  echo "install_test_deps: $1" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "install_test_deps: the tests that need ${missing[*]} will skip" >&2
  exit 0
}
command -v apt-get >/dev/null 2>&1 || fail "no apt-get here; install ${missing[*]} yourself"
SUDO=
if [ "$(id -u)" != 0 ]; then
  sudo -n true 2>/dev/null || fail "not root and no password-less sudo; run: apt-get install -y ${missing[*]}"
  SUDO="sudo -n"
fi
echo "install_test_deps: installing Debian's ${missing[*]} with apt-get (about a minute, once)"
log=/tmp/dkmsks-install-test-deps.log
if $SUDO apt-get update -qq >"$log" 2>&1 \
   && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
  exit 0
fi
fail "apt-get failed (see $log)"
