"""What every benchmark shares: the real data, the machine and the commit a result came from,
result files, commands run in a subprocess, and the generated sections of the docs.

Benchmarks may read files, clocks and the environment (unlike :mod:`dkmsks.core`); they
measure the core and the pipeline. Every result a benchmark saves carries
:func:`provenance`: the commit of the code under measurement, the machine and the date.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dkmsks.core.model import KeywordSets, Objects, Vocabulary

#: ``lib/dkmsks/bench`` -> repository root.
REPO = Path(__file__).resolve().parents[3]

#: ``dkm`` in a subprocess, from the same interpreter and ``PYTHONPATH`` as this process.
DKM = (sys.executable, "-m", "dkmsks.cli")


# --------------------------------------------------------------------------- real data
def data_dir() -> Path:
    """Root of the real data (``$DKMSKS_DATA_DIR`` or ``../shared/data`` beside the repo)."""
    return Path(os.environ.get("DKMSKS_DATA_DIR", REPO.parent / "shared" / "data"))


#: The two real data sets (data/README.md): Place and the Twitter stand-in.
DATASETS = {
    "place": "wof_simplegeo_us/objects.tsv.gz",
    "twitter": "wof_simplegeo_us/objects_with_names.tsv.gz",
}
DATASET_NAMES = {"place": "Place", "twitter": "Twitter stand-in"}


def dataset_path(name: str, *, must_exist: bool = False) -> Path:
    """The path of the real data set ``name`` under the data folder; with ``must_exist``, it must be there."""
    try:
        path = data_dir() / DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(DATASETS)}") from None
    if must_exist and not path.exists():
        raise FileNotFoundError(f"real data file {path} is absent (set DKMSKS_DATA_DIR)")
    return path


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


# --------------------------------------------------------------------------- machine and commit
def _meminfo_gib(field: str) -> float:
    """A ``/proc/meminfo`` field in GiB (``nan`` where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


@functools.cache
def machine(*, spark: bool = False) -> dict[str, str]:
    """Cores, memory, CPU model, Python and numpy versions; with ``spark``, also PySpark, the
    Delta jar and Java."""
    out = {"nproc": str(os.cpu_count()), "memory": f"{_meminfo_gib('MemTotal'):.1f} GiB",
           "cpu": _cpu_model(), "python": platform.python_version(), "numpy": np.__version__}
    if spark:
        import pyspark

        from dkmsks.spark.session import delta_jars

        java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
        out["pyspark"] = pyspark.__version__
        out["delta"] = next((j.name for j in delta_jars() if j.name.startswith("delta-spark")),
                            "delta-spark (maven)")
        out["java"] = java.splitlines()[0] if java else "unknown"
    return out


def describe_machine(m: Mapping[str, str]) -> str:
    """One line for a report: ``2 cores, 23.4 GiB memory, CPU; Python …, numpy …``."""
    text = f"{m['nproc']} cores, {m['memory']} memory, {m['cpu']}; Python {m['python']}, numpy {m['numpy']}"
    if "pyspark" in m:
        text += f", PySpark {m['pyspark']}, {m['delta']}, {m['java']}"
    return text


def available_memory_gib() -> float:
    """``MemAvailable`` (``inf`` when unreadable, so a memory guard lets the run try)."""
    avail = _meminfo_gib("MemAvailable")
    return float("inf") if avail != avail else avail


def load_average() -> float:
    """The one-minute load average (``nan`` where the system has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def git_commit(root: Path = REPO) -> str:
    """The commit of the code under ``root``: ``git rev-parse HEAD``, with ``+dirty`` when
    tracked code (``lib``, ``spark_apps``, ``sql``) differs from it. A source snapshot made
    with ``git archive`` has no ``.git``; it carries its commit in a ``COMMIT`` file."""
    snapshot = root / "COMMIT"
    if snapshot.exists():
        return snapshot.read_text().strip()
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no",
                                  "--", "lib", "spark_apps", "sql"], capture_output=True, text=True,
                                 check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if changed else "")


def utc_now() -> str:
    """The current UTC time, to the minute, as the reports print it."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def provenance(*, spark: bool = False, code: Path = REPO) -> dict[str, Any]:
    """What every saved result carries: the commit of the code that ran, the machine, the date."""
    return {"commit": git_commit(code), "machine": machine(spark=spark), "date": utc_now()}


def say(text: str, file: Any = None) -> None:
    """A progress line with the wall-clock time, on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=file or sys.stderr, flush=True)


# --------------------------------------------------------------------------- result files
class ResultFile:
    """One benchmark run's results as JSON: :func:`provenance`, the parameters, then each step
    as it finishes (saved after every step, so a crash keeps what was measured) and the error
    of each step that failed."""

    def __init__(self, path: Path, params: Mapping[str, Any], *, spark: bool = False) -> None:
        self.path = path
        self.data: dict[str, Any] = {**provenance(spark=spark), "params": dict(params), "steps": {},
                                     "errors": {}}

    def put(self, key: str, value: Any) -> None:
        """Record the result of step ``key`` and save the file."""
        self.data["steps"][key] = value
        self.save()

    def error(self, key: str, err: BaseException) -> None:
        """Record that step ``key`` failed with ``err`` (its one-line message) and save the file."""
        self.data["errors"][key] = "".join(traceback.format_exception_only(type(err), err)).strip()
        self.save()

    def save(self) -> None:
        """Write the results to the JSON file (its folder is created)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=1, default=str))


# --------------------------------------------------------------------------- subprocesses
class TreeMemory:
    """Samples, in a background thread, the summed memory of several named process trees (a
    root and all its descendants: a Spark driver's JVM and Python workers), each process
    counted once, under the nearest root it descends from (so a root that is a child of
    another root is its own party). Keeps the peak of the sum and each party's share at that
    peak; a party may be added while sampling runs.

    With ``proportional`` each process counts its proportional set size (PSS: a page shared by
    n processes counts 1/n in each), so the sum is the memory the trees hold together; forked
    workers (PySpark's daemon forks every Python worker) share most of their pages, and summing
    their resident sizes counts those pages once per worker. Without it (or where the system
    has no PSS), resident sizes (RSS).

    A PSS sample makes the kernel walk every page of every process: 366 ms of CPU for follow
    mode's 13 GiB at |S| = 10M, against 4 ms for resident sizes (measured). Taken every 0.5 s,
    that is most of a core taken from what a benchmark measures on two. So the resident sizes
    are sampled every ``interval`` and the PSS only when their sum is at a new high (memory
    growing: a start-up) or ``pss_every`` seconds after the last PSS sample."""

    def __init__(self, roots: Mapping[str, int], interval: float = 0.5, *, proportional: bool = False,
                 pss_every: float = 5.0) -> None:
        import psutil

        self._psutil = psutil
        self.roots = dict(roots)
        self.interval = interval
        self.proportional = proportional
        self.pss_every = pss_every
        self._rss_high = 0
        self._pss_at = -math.inf
        self.peak = 0
        self.at_peak: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add(self, name: str, pid: int) -> None:
        """Sum the tree of ``pid`` too, as the party ``name``."""
        with self._lock:
            self.roots[name] = pid

    def sample(self, proportional: bool | None = None) -> dict[str, int]:
        """Each party's bytes now (0 for a root that has exited): PSS when ``proportional``
        (default: as constructed), else RSS."""
        proportional = self.proportional if proportional is None else proportional
        with self._lock:
            roots = dict(self.roots)
        trees: dict[str, list] = {}
        for name, pid in roots.items():
            try:
                root = self._psutil.Process(pid)
                trees[name] = [root, *root.children(recursive=True)]
            except self._psutil.Error:
                trees[name] = []
        seen: set[int] = set()
        out: dict[str, int] = {}
        for name in sorted(trees, key=lambda n: len(trees[n])):  # a nested tree is the smaller one
            out[name] = 0
            for p in trees[name]:
                if p.pid in seen:
                    continue
                seen.add(p.pid)
                with contextlib.suppress(self._psutil.Error):
                    out[name] += self._bytes(p, proportional)
        return {name: out[name] for name in roots}

    def _bytes(self, p: Any, proportional: bool) -> int:
        if proportional:
            with contextlib.suppress(AttributeError, self._psutil.AccessDenied):
                return int(p.memory_full_info().pss)
        return int(p.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            parts = self.sample(proportional=False)
            if self.proportional:
                resident, now = sum(parts.values()), time.monotonic()
                if resident > self._rss_high or now - self._pss_at >= self.pss_every:
                    self._rss_high = max(self._rss_high, resident)
                    parts, self._pss_at = self.sample(), now
                else:
                    parts = {}
            if sum(parts.values()) > self.peak:
                self.peak, self.at_peak = sum(parts.values()), parts
            self._stop.wait(self.interval)

    def start(self) -> TreeMemory:
        """Start sampling; returns ``self``."""
        self._thread.start()
        return self

    def stop(self) -> int:
        """The peak of the sum in bytes."""
        self._stop.set()
        self._thread.join()
        return self.peak


class PeakMemory(TreeMemory):
    """Samples the summed resident memory of one process and all its descendants."""

    def __init__(self, pid: int | None = None, interval: float = 0.5) -> None:
        super().__init__({"": pid or os.getpid()}, interval)


@dataclass(frozen=True)
class CommandRun:
    """How a command ended: exit status, wall time, output and, when sampled, its peak memory."""

    returncode: int
    seconds: float
    stdout: str
    peak_rss_mib: float | None = None  # with ``sample_memory``
    timed_out: bool = False


def run_command(cmd: Sequence[str], log: Path, *, timeout: float | None = None,
                env: Mapping[str, str] | None = None, cwd: Path | None = None,
                sample_memory: bool = False) -> CommandRun:
    """Run ``cmd`` in its own process group, its stderr and then its stdout appended to
    ``log``; a timeout kills the whole group (a JVM included)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(env if env is not None else os.environ, PYTHONUNBUFFERED="1")
    started = time.perf_counter()
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=fh, text=True, env=env,
                                cwd=str(cwd) if cwd is not None else None, start_new_session=True)
        peak = PeakMemory(proc.pid).start() if sample_memory else None
        timed_out = False
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            timed_out = True
        fh.write(stdout)
    return CommandRun(proc.returncode, time.perf_counter() - started, stdout,
                      peak.stop() / 2**20 if peak is not None else None, timed_out)


# --------------------------------------------------------------------------- generated docs
def write_doc_section(path: Path, section: str, text: str) -> None:
    """Replace the section ``section`` of the markdown file ``path`` (between its markers,
    ``<!-- begin: SECTION ...`` and ``<!-- end: SECTION -->``, where ``section`` names what
    writes it: ``dkm bench core``, ``bench/kernel.py``), or append it; the rest of the file is kept."""
    begin = f"<!-- begin: {section} (generated; edits inside are overwritten) -->"
    end = f"<!-- end: {section} -->"
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    old = path.read_text() if path.exists() else "# Benchmarks\n\n"
    pattern = re.compile(re.escape(begin.split(" (")[0]) + r".*?" + re.escape(end) + r"\n?", re.S)
    new = pattern.sub(lambda _: block, old, count=1) if pattern.search(old) else old.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)
