#!/usr/bin/env bash
# Headless Chromium for the browser test (tests/e2e/test_airflow_ui.py): Debian's `chromium`
# package, installed with apt-get when /usr/bin/chromium is absent. Playwright drives it through
# executable_path; no browser build is ever downloaded. Idempotent: a no-op once installed.
# When it cannot install (not root, no apt-get, no network) it says why and exits 0: the test
# then skips, naming what is missing.
set -uo pipefail

CHROMIUM=${DKMSKS_CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_browser: no apt-get here; install Chromium yourself (DKMSKS_CHROMIUM=path) or the browser test skips" >&2
  exit 0
fi
SUDO=
if [ "$(id -u)" != 0 ]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "install_browser: not root and no password-less sudo; run: apt-get install -y chromium" >&2
    exit 0
  fi
fi
echo "install_browser: installing Debian's chromium with apt-get (about a minute, once)"
if $SUDO apt-get update -qq >/tmp/dkmsks-install-browser.log 2>&1 \
   && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >>/tmp/dkmsks-install-browser.log 2>&1; then
  "$CHROMIUM" --version 2>/dev/null || true
else
  echo "install_browser: apt-get failed (see /tmp/dkmsks-install-browser.log); the browser test will skip" >&2
fi
exit 0
