"""Small helpers shared by command modules."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from dkmsks.io.rejections import Rejection

#: ``lib/dkmsks/commands`` -> repository root; the shared data folder sits beside it.
_REPO = Path(__file__).resolve().parents[3]


def data_dir() -> Path:
    """Root of the real data (``$DKMSKS_DATA_DIR`` or ``../shared/data`` beside the repo)."""
    return Path(os.environ.get("DKMSKS_DATA_DIR", _REPO.parent / "shared" / "data"))


def default_source() -> Path:
    """The real objects file the commands read by default."""
    return data_dir() / "wof_simplegeo_us" / "objects.tsv.gz"


def print_rejections(rejections: Sequence[Rejection], what: str, limit: int = 10) -> None:
    """Report quarantined rows on stderr: the count and the first few with reasons."""
    if not rejections:
        return
    print(f"{len(rejections):,} {what} row(s) rejected:", file=sys.stderr)
    for r in rejections[:limit]:
        print(f"  {r.source}:{r.line}: {r.reason}", file=sys.stderr)
    if len(rejections) > limit:
        print(f"  ... and {len(rejections) - limit:,} more", file=sys.stderr)
