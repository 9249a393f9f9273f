"""Pieces every benchmark shares: real data loading, the machine description, medians.

Benchmarks may read files and clocks (unlike :mod:`dkmsks.core`); they measure the core.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
import subprocess
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from dkmsks.core.model import KeywordSets, Objects, Vocabulary

#: ``lib/dkmsks/bench`` -> repository root.
REPO = Path(__file__).resolve().parents[3]


def data_dir() -> Path:
    """Root of the real data (``$DKMSKS_DATA_DIR`` or ``../shared/data`` beside the repo)."""
    return Path(os.environ.get("DKMSKS_DATA_DIR", REPO.parent / "shared" / "data"))


#: The two real data sets (data/README.md): Place and the Twitter stand-in.
DATASETS = {
    "place": "wof_simplegeo_us/objects.tsv.gz",
    "twitter": "wof_simplegeo_us/objects_with_names.tsv.gz",
}
DATASET_NAMES = {"place": "Place", "twitter": "Twitter stand-in"}


def dataset_path(name: str) -> Path:
    try:
        rel = DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(DATASETS)}") from None
    return data_dir() / rel


def load_objects(path: Path, n: int) -> tuple[Objects, Vocabulary]:
    """The first ``n`` objects of a real objects file, in stream order, as core columns."""
    import pandas as pd

    if not path.exists():
        raise FileNotFoundError(f"real data file {path} is absent (set DKMSKS_DATA_DIR)")
    df = pd.read_csv(path, sep="\t", nrows=n, dtype={"id": np.int64, "keywords": str})
    vocab = Vocabulary()
    rows = [[vocab.id_of(w) for w in kws.split(" ")] for kws in df["keywords"]]
    objects = Objects(df["id"].to_numpy(np.int64), df["x"].to_numpy(np.float64),
                      df["y"].to_numpy(np.float64), KeywordSets.from_lists(rows),
                      df["t"].to_numpy(np.int64))
    return objects, vocab


def med(values: Iterable[float]) -> float:
    vals = list(values)
    return float(statistics.median(vals)) if vals else float("nan")


def mean(values: Iterable[float]) -> float:
    vals = list(values)
    return float(sum(vals) / len(vals)) if vals else float("nan")


def cpu_model() -> str:
    """The CPU model from /proc/cpuinfo ("unknown" where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine() -> dict[str, str]:
    """Cores, memory, CPU model, Python and numpy versions, the date (UTC)."""
    cpu = cpu_model()
    try:
        free = subprocess.run(["free", "-g"], capture_output=True, text=True, check=False).stdout
        mem = next((ln for ln in free.splitlines() if ln.startswith("Mem:")), "")
        total_g = mem.split()[1] + " GiB total (free -g)" if mem else "unknown"
    except OSError:
        total_g = "unknown"
    return {
        "nproc": str(os.cpu_count()),
        "memory": total_g,
        "cpu": cpu,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def available_memory_gib() -> float:
    """``MemAvailable`` from ``/proc/meminfo`` (``inf`` when unreadable)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("inf")


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")
