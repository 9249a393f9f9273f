"""``bench/bench_core.py --quick`` runs end to end (real data, small sizes, a few seconds) and
rewrites only its own section of the benchmarks file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from conftest import require_real_data

pytestmark = [pytest.mark.unit, pytest.mark.realdata]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_core.py"


def test_bench_core_quick_writes_its_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_real_data()
    spec = importlib.util.spec_from_file_location("bench_core", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_core", bench)  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\n## Other\n\nkept\n\n{bench.BEGIN}\nold text\n{bench.END}\n\n## Tail\n")
    args = ["--quick", "--objects", "8000", "--subscriptions", "8000", "--timestamps", "3",
            "--no-extras", "--docs", str(docs)]
    assert bench.main(args) == 0
    text = docs.read_text()
    assert "## Other\n\nkept" in text and text.rstrip().endswith("## Tail")
    assert "old text" not in text and text.count(bench.BEGIN) == 1 and text.count(bench.END) == 1
    assert "## Core (in-memory engine)" in text and "### Issue targets" in text
    for name in ("KOP", "SOP", "DkM-SKS"):
        assert f"| {name} |" in text
    # a second run replaces the section instead of appending another
    assert bench.main(args) == 0
    assert docs.read_text().count(bench.BEGIN) == 1
