"""What every benchmark shares: the real data and its workloads, the machine and the commit a
result came from, result files, commands run in a subprocess, the command line (the workload
flags, ``--quick``, ``--doc``) and the end of every ``main`` (:func:`bench_main`: print the
report, write its section of the docs, the exit status).

Benchmarks may read files, clocks and the environment (unlike :mod:`dkmsks.core`); they
measure the core and the pipeline. Every result a benchmark saves carries
:func:`provenance`: the commit of the code under measurement, the machine and the date.
"""

from __future__ import annotations

import argparse
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dkmsks.core.config import PARAMETERS
from dkmsks.core.model import KeywordSets, Objects, SubscriptionEvents, Vocabulary
from dkmsks.core.workload import WorkloadSpec, generate_workload

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


def paper_workload(spec: WorkloadSpec, dataset: str = "place") -> tuple[Objects, SubscriptionEvents, Vocabulary]:
    """The workload ``spec`` generated the paper's way (docs/design.md §5) from the real data set
    ``dataset``: its objects (``O_init`` and the stream), its subscription events, its keywords."""
    source, vocab = load_objects(dataset_path(dataset, must_exist=True), spec.objects_needed)
    objects, events = generate_workload(source, spec)
    return objects, events, vocab


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

    def head(self) -> dict[str, str]:
        """What a report's head says of the run: the commit, the date, the CPU and its cores, and
        the load average before and after it (the steps ``load_before`` and ``load_after``, when
        recorded)."""
        d, steps = self.data, self.data["steps"]
        out = {"commit": d["commit"], "date": d["date"], "machine": d["machine"].get("cpu", ""),
               "nproc": d["machine"]["nproc"]}
        out.update({key: f"{steps[step]:.1f}" for key, step in (("load", "load_before"), ("load_after", "load_after"))
                    if step in steps})
        return out


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


# --------------------------------------------------------------------------- command lines
#: The flags of a workload generated the paper's way (docs/design.md §5), declared once for
#: every benchmark that takes them: a field of :class:`~dkmsks.core.workload.WorkloadSpec`,
#: its flags (``dkm generate``'s; ``--objects`` is another name for ``--o-init``) and its help.
WORKLOAD_FLAGS: dict[str, tuple[tuple[str, ...], str]] = {
    "o_init": (("--o-init", "--objects"), "|O_init|, the objects at t = 0"),
    "subscriptions": (("--subscriptions",), "|S|, the initial subscriptions"),
    "timestamps": (("--timestamps",), "T, the stream's timestamps"),
    "objects_per_ts": (("--objects-per-ts",), "objects per timestamp"),
    "inserts_per_ts": (("--inserts-per-ts",), "insertions per timestamp"),
    "deletes_per_ts": (("--deletes-per-ts",), "deletions per timestamp"),
    "k_max": (("--k-max",), "k is uniform in [1, k_max]"),
    "seed": (("--seed",), "the workload's seed"),
}
_TUNING = {p.name: p for p in PARAMETERS}


def add_workload_flags(parser: argparse.ArgumentParser, *, helps: Mapping[str, str] | None = None,
                       **defaults: Any) -> None:
    """The flags named in ``defaults``, each with this benchmark's default: the workload's
    (:data:`WORKLOAD_FLAGS`) and the tuning parameters' (``--workers``, ``--method``, ``--theta``,
    ... as :data:`dkmsks.core.config.PARAMETERS` declares them). ``helps`` replaces a flag's
    help where the benchmark gives it a narrower meaning (``--timestamps``: the timed ones); a
    default of ``None`` (the benchmark's own configuration decides) is left to that help to say."""
    group = parser.add_argument_group("workload and partitioning")
    for name, default in defaults.items():
        if name in WORKLOAD_FLAGS:
            flags, text = WORKLOAD_FLAGS[name]
            kind: Any = int
            choices = None
        else:
            par = _TUNING[name]
            flags, text = (par.flag,), par.help
            kind, choices = (str, par.choices) if par.choices is not None else (par.kind, None)
        text = (helps or {}).get(name, text)
        group.add_argument(*flags, dest=name, type=kind, choices=choices, default=default,
                           help=text if default is None else f"{text} ({_number(default)})")


def add_quick_flag(parser: argparse.ArgumentParser, summary: str, **values: Any) -> None:
    """``--quick``: a small run, ``values`` standing for the defaults of the flags (declared
    before) that are not given; each flag's help says both defaults."""
    sizes = {}
    for action in parser._actions:
        if action.dest not in values:
            continue
        full, quick = action.default, values[action.dest]
        text = (action.help or "").replace("%(default)s", _number(full))
        note = f"--quick: {_number(quick)}"
        action.help = f"{text[:-1]}; {note})" if text.endswith(")") else f"{text} ({note})"
        action.default = None  # not given: parse_args puts the full or the quick value
        sizes[action.dest] = (full, quick)
    if set(values) - set(sizes):
        raise ValueError(f"--quick names flags that are not declared: {sorted(set(values) - set(sizes))}")
    parser.add_argument("--quick", action="store_true", help=summary)
    parser.set_defaults(_quick_sizes=sizes)


def _number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def add_doc_flags(parser: argparse.ArgumentParser, *, default: Path | None = None) -> None:
    """``--doc FILE`` (or ``--docs``): write the report's section into this Markdown file; with
    ``default``, the file written without ``--doc`` (none with ``--quick``), and ``--no-docs``."""
    where = ""
    if default is not None:
        where = f" (default {default.relative_to(REPO) if default.is_relative_to(REPO) else default}; --quick: none)"
    parser.add_argument("--doc", "--docs", dest="doc", type=Path, default=None,
                        help="write the report's section into this Markdown file" + where)
    if default is not None:
        parser.add_argument("--no-docs", action="store_true", help="print the report only")
    parser.set_defaults(_default_doc=default)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with ``--quick``'s values (:func:`add_quick_flag`) standing
    for the defaults of the flags not given, and the file the report goes to as ``doc``."""
    args = parser.parse_args(argv)
    for dest, (full, quick) in vars(args).pop("_quick_sizes", {}).items():
        if getattr(args, dest) is None:
            setattr(args, dest, quick if args.quick else full)
    default = vars(args).pop("_default_doc", None)
    if default is not None and args.doc is None and not (getattr(args, "quick", False) or args.no_docs):
        args.doc = default
    return args


def workload_spec(args: argparse.Namespace, **over: int) -> WorkloadSpec:
    """The workload of the flags in ``args`` (:func:`add_workload_flags`; the paper's rates for
    those the benchmark does not take), with the fields of ``over`` replaced."""
    fields = {name: getattr(args, name) for name in WORKLOAD_FLAGS if hasattr(args, name)}
    return WorkloadSpec(**{**fields, **over})


class Refused(Exception):
    """Flags a benchmark cannot use, found once it looks at its input (a warehouse with too few
    pending timestamps): reported as a usage error, exit status 2."""


@dataclass(frozen=True)
class Report:
    """What a benchmark's run ends with: its Markdown ``text``, the generated ``section`` of the
    docs it replaces (the markers' name: ``dkm bench core``, ``bench/kernel.py``), and, when one
    of its own checks failed (results that differ), why: then no section is written."""

    section: str
    text: str
    failure: str = ""


def bench_main(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
               run: Callable[[argparse.Namespace], Report]) -> int:
    """What every benchmark's ``main`` does: parse the flags (:func:`parse_args`), run, print the
    report and write its section into ``--doc``'s file; the exit status: 0, 1 when one of the
    run's checks failed, 2 for flags it refused (:class:`Refused`)."""
    args = parse_args(parser, argv)
    try:
        report = run(args)
    except Refused as err:
        parser.error(str(err))
    if report.text:
        print(report.text)
    if report.failure:
        say(f"{parser.prog}: {report.failure}")
        return 1
    doc: Path | None = getattr(args, "doc", None)
    if doc is not None:
        write_doc_section(doc, report.section, report.text)
        say(f"wrote the section {report.section!r} of {doc}")
    return 0


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
