"""``dkm bench core --quick`` runs end to end (real data, small sizes, a few seconds) and
rewrites only its own section of the benchmarks file."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import require_real_data
from dkmsks.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.realdata]  # a benchmark's quick run: seconds

BEGIN = "<!-- begin: dkm bench core (generated; edits inside are overwritten) -->"
END = "<!-- end: dkm bench core -->"


def test_bench_core_quick_writes_its_section(tmp_path: Path) -> None:
    require_real_data()
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\n## Other\n\nkept\n\n{BEGIN}\nold text\n{END}\n\n## Tail\n")
    args = ["bench", "core", "--quick", "--objects", "8000", "--subscriptions", "8000", "--timestamps", "3",
            "--no-extras", "--docs", str(docs)]
    assert main(args) == 0
    text = docs.read_text()
    assert "## Other\n\nkept" in text and text.rstrip().endswith("## Tail")
    assert "old text" not in text and text.count(BEGIN) == 1 and text.count(END) == 1
    assert "## Core (in-memory engine)" in text and "### Issue targets" in text
    for name in ("KOP", "SOP", "DkM-SKS"):
        assert f"| {name} |" in text
    # a second run replaces the section instead of appending another
    assert main(args) == 0
    assert docs.read_text().count(BEGIN) == 1
