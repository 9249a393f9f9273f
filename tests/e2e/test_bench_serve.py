"""``dkm bench serve --quick`` runs end to end — the initial phase, follow mode, dkm serve, a
hundred clients registering and following their subscriptions over HTTP while a publisher
posts a timestamp a second, streams cut and resumed, a ramp of streams — and writes its
section; every stream is exact against the journal and the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import require_real_data
from dkmsks.cli import main

pytestmark = [pytest.mark.e2e, pytest.mark.realdata]

BEGIN = "<!-- begin: dkm bench serve (generated; edits inside are overwritten) -->"


def test_bench_serve_quick_is_exact_and_writes_its_section(tmp_path: Path) -> None:
    require_real_data()
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## Other\n\nkept\n")
    work = tmp_path / "work"
    assert main(["bench", "serve", "--quick", "--workdir", str(work), "--doc", str(docs)]) == 0
    text = docs.read_text()
    assert "## Other\n\nkept" in text and text.count(BEGIN) == 1 and "## Delivery through dkm serve" in text
    data = json.loads((work / "results.json").read_text())
    steps = data["steps"]
    exact = steps["exactness"]
    assert (exact["lost"], exact["repeated"], exact["wrong"], exact["incomplete_streams"]) == (0, 0, 0, 0), exact
    assert exact["oracle_agrees"] and exact["received_changes"] == exact["journal_changes"] > 0
    run = steps["run"]
    assert run["reconnects"] >= 1 and run["streams"] == 100
    assert [s["streams"] for s in run["steps"]] == [100, 200, 400]
    assert run["delivery"]["samples"] > 0 and steps["idle"]["kib_per_stream"] > 0
    assert all(p["t"] > 0 for p in run["published"])
