"""How the paper report writes numbers, links and table rows."""

from __future__ import annotations

import math
from pathlib import Path


def f0(x: float | None) -> str:
    """A number without decimals, ``–`` when missing."""
    return "–" if x is None or math.isnan(x) else f"{x:,.0f}"


def f1(x: float | None) -> str:
    """A number with one decimal, ``–`` when missing."""
    return "–" if x is None or math.isnan(x) else f"{x:,.1f}"


def f2(x: float | None) -> str:
    """A number with two decimals, ``–`` when missing."""
    return "–" if x is None or math.isnan(x) else f"{x:.2f}"


def rel(path: Path, docs: Path) -> str:
    """``path`` relative to the report's folder (as given when outside it)."""
    try:
        return str(path.resolve().relative_to(docs.parent.resolve()))
    except ValueError:
        return str(path)


def table_row(*cells: object) -> str:
    """A Markdown table row of ``cells``."""
    return "| " + " | ".join(str(c) for c in cells) + " |"
