"""Headless Chromium for the browser tests: Debian's ``/usr/bin/chromium`` (never a downloaded
build; ``scripts/install_test_deps.sh`` installs it) driven by Playwright, in a fresh profile
with the flags that keep it off the network (no QUIC, no background updates or sync)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import missing_prerequisite

CHROMIUM = Path(os.environ.get("DKMSKS_CHROMIUM", "/usr/bin/chromium"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def require_browser() -> Any:
    """Playwright's sync API; skips (fails under CI=true) without Chromium or Playwright."""
    if not CHROMIUM.is_file():
        missing_prerequisite(f"headless Chromium is missing: no {CHROMIUM} (scripts/install_test_deps.sh "
                             "installs Debian's chromium package with apt-get)")
    try:
        from playwright import sync_api
    except ImportError:
        missing_prerequisite("the Python package playwright is missing (pinned in requirements.lock; "
                             "scripts/bootstrap.sh installs it)")
    return sync_api


@contextlib.contextmanager
def chromium(profile: Path, **context: Any) -> Iterator[Any]:
    """A browser context in a fresh profile folder (``profile``), closed at the end."""
    sync_api = require_browser()
    with sync_api.sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(str(profile), executable_path=str(CHROMIUM), headless=True,
                                                    args=FLAGS, **{"viewport": {"width": 1400, "height": 900},
                                                                   **context})
        try:
            yield ctx
        finally:
            ctx.close()


def wait_until(page: Any, expression: str, timeout: float = 60, what: str = "") -> Any:
    """Poll ``expression`` (a JavaScript function source) in ``page`` until it returns a truthy
    value, and return that. ``page.evaluate`` runs under the page's Content-Security-Policy
    without ``eval`` (Playwright's ``wait_for_function`` would need ``unsafe-eval``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(expression)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or expression}")
        time.sleep(0.1)


def shot(page: Any, folder: Path, name: str) -> Path:
    """A PNG screenshot of ``page`` as ``folder/name.png``."""
    path = folder / f"{name}.png"
    page.screenshot(path=str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path
