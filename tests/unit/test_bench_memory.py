"""``bench/memory.py --quick`` runs end to end (real data, two small sizes, each in its own
process) and its report agrees with the measurements it saved."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from conftest import REPO, require_real_data

pytestmark = [pytest.mark.slow, pytest.mark.realdata]  # a benchmark's quick run: seconds

SCRIPT = REPO / "bench" / "memory.py"


def script() -> ModuleType:
    """``bench/memory.py`` as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("bench_memory", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_array_bytes_counts_each_buffer_once() -> None:
    class Holder:
        def __init__(self) -> None:
            self.a = np.zeros(100, dtype=np.int64)
            self.view = self.a[10:20]
            self.parts = [np.zeros(10, dtype=np.int32), {"x": np.zeros(3)}]

    h = Holder()
    array_bytes = script().array_bytes
    assert array_bytes(h, set()) == 800 + 40 + 24
    assert array_bytes([h, h], set()) == 800 + 40 + 24


def test_bench_memory_quick(tmp_path: Path) -> None:
    require_real_data()
    doc = tmp_path / "benchmarks.md"
    # as users run it: the script, by its path, from the venv's interpreter
    subprocess.run([sys.executable, str(SCRIPT), "--quick", "--workdir", str(tmp_path), "--doc", str(doc)], check=True)
    runs = json.loads((tmp_path / "results.json").read_text())["steps"]["runs"]
    assert [r["subscriptions"] for r in runs] == [10_000, 40_000]
    for r in runs:
        # Insertions and deletions balance: the engine still holds |S| subscriptions.
        assert r["live"] == r["subscriptions"]
        # The walk found the columns every subscription needs: id, x, y and one result slot
        # (state), one posting of a key and a row (index).
        assert r["parts"]["state"] >= r["live"] * (8 + 8 + 8 + 8 + 8)
        assert r["parts"]["index"] >= r["live"] * (8 + 4)
        assert r["rss_before"] <= r["peak_rss"] and r["rss_run"] <= r["peak_rss"]
    text = doc.read_text()
    assert text.count("<!-- begin: bench/memory.py") == 1
    assert "| 10,000 |" in text and "| 40,000 |" in text and "| 10,000 | 40,000 |" in text
    assert "GiB per million" in text
