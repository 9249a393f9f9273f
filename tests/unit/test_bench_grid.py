"""``dkm bench grid`` (lib/dkmsks/bench/grid.py): layouts are parsed strictly, and a small run
on real data writes its section, with every layout's results byte-identical to the others'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import require_real_data
from dkmsks.bench.grid import parse_layouts
from dkmsks.cli import main


@pytest.mark.unit
def test_layouts_are_parsed_strictly() -> None:
    assert parse_layouts("1:9:9:64, 3:25:64:64/unbounded") == [
        {"level_step": 1, "max_cells": 9, "wide_cells": 9, "wide_side": 64, "unbounded": 0},
        {"level_step": 3, "max_cells": 25, "wide_cells": 64, "wide_side": 64, "unbounded": 1},
    ]
    for bad in ("3:25:64", "3:25:64:x", "0:9:9:64", "3:25:64:64:1", "3:25:64:64/bounded"):
        with pytest.raises(ValueError, match="STEP:CELLS:WIDE:SIDE"):
            parse_layouts(bad)


@pytest.mark.slow  # a benchmark's quick run: seconds
@pytest.mark.realdata
def test_bench_grid_small_run_writes_its_section(tmp_path: Path) -> None:
    require_real_data()
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## Other\n\nkept\n")
    args = ["bench", "grid", "--objects", "8000", "--subscriptions", "4000", "--workers", "4", "--timestamps", "3",
            "--warmup", "1", "--layouts", "1:9:9:64,2:4:16:8/unbounded", "--workdir", str(tmp_path), "--doc", str(docs)]
    assert main(args) == 0
    text = docs.read_text()
    assert "## Other\n\nkept" in text and "## The DkM-SKS grid's layouts, side by side" in text
    assert "| `1:9:9:64` |" in text and "| `2:4:16:8/unbounded` |" in text
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["steps"]["checks"] == {"results_equal": True}
    assert [r["layout"] for r in saved["steps"]["layouts"]] == ["1:9:9:64", "2:4:16:8/unbounded"]
