"""Benchmark of the lookup kernel's language: numba against the same loop in Rust, same inputs.

Issue 18 lets the compiled worker kernel be numba or a Rust extension, "chosen by measurement".
The lookup is most of a timestamp's compiled work (every probe key through the key filter, its
postings found by binary search, each live entry tested exactly). Its warm form
(``_lookup_warm`` in :mod:`dkmsks.core.kernel.lookup`, what a batch of millions of keys runs)
is written a second time in Rust (``bench/kernel_rust``, no dependencies, built with the host's
CPU features as numba compiles, called through a C ABI with ctypes), step for step, so that
both return the same pairs in the same order. Measured on the real inputs of an in-memory
engine at the issue's setting (Place data, |O_init| = |S| = 1M, m = 20, DkM-SKS): at every
lookup of the timed timestamps, the worker's live arrays are looked up by each variant in turn
(the order rotated between repeats) and the medians kept:

- numba, the engine's per-timestamp lookup (``_lookup`` over the shared sorted probe, with the
  cache-line prefetches of docs/design.md §11): the production path, for scale;
- numba, warm (``_lookup_warm`` over the same probe as plain keys);
- Rust, the same loop with Rust's bounds checks, and without them (numba checks no bounds);

then the same over a batch: the timestamp's plain probe repeated ``--batch`` times (a
catch-up's many keys against one index). The Rust side's time includes its Python wrapper
(output arrays allocated, the C call, the results cut to size), as an extension's would. Each
lookup's results must be equal (Rust's to numba's warm, array for array; numba's two forms as
multisets of pairs, with the same per-object counts), or the benchmark fails.

Usage: ``.venv/bin/python bench/rust.py [--timestamps T] [--warmup W] [--repeats R] [--batch B] [--quick] [--doc F]``.
Needs ``cargo`` (rustup's or Debian's package); without it the benchmark stops and says so.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dkmsks.bench.common import (
    REPO,
    Refused,
    Report,
    ResultFile,
    add_doc_flags,
    add_quick_flag,
    add_workload_flags,
    bench_main,
    load_average,
    paper_workload,
    say,
    workload_spec,
)
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median, ratio
from dkmsks.core import kernel
from dkmsks.core.config import Method, PartitionConfig
from dkmsks.core.engine import build_engine
from dkmsks.core.kernel.lookup import _lookup, _lookup_warm
from dkmsks.cores import usable_cores

HERE = Path(__file__).resolve().parent
prose = Prose.read(HERE / "templates" / "rust.md")
SECTION = "bench/rust.py"
CRATE = HERE / "kernel_rust"
TARGET = REPO / ".cache" / "kernel_rust"
LIBRARY = TARGET / "release" / "libdkmsks_kernel_rust.so"
#: The variants of one timestamp's lookup and of a batch's, in the report's order.
ONE = ("numba_engine", "numba_warm", "rust_checked", "rust_unchecked")
BATCH = ("numba_warm", "rust_checked", "rust_unchecked")
LABELS = {"numba_engine": "numba, the engine's lookup (sorted probe, prefetches)",
          "numba_warm": "numba, warm lookup (plain probe)",
          "rust_checked": "Rust, the same loop, bounds-checked",
          "rust_unchecked": "Rust, the same loop, no bounds checks"}

# Every pointer is a void pointer set from an array's address; the type each field points to
# is checked against the array's dtype when it is set (_p).
_PTR = ctypes.c_void_p
_N = ctypes.c_size_t


class Lookup(ctypes.Structure):
    """``struct Lookup`` of ``bench/kernel_rust/src/lib.rs``, field for field (pointers as addresses)."""

    _fields_ = [  # noqa: RUF012 - ctypes' own declaration
        ("n_q", _N), ("qkeys", _PTR), ("qowner", _PTR), ("n_present", _N), ("present", _PTR),
        ("n_keys", _N), ("keys", _PTR), ("prow", _PTR), ("n_prow_epoch", _N), ("prow_epoch", _PTR),
        ("n_dkeys", _N), ("dkeys", _PTR), ("drow", _PTR), ("dep", _PTR), ("n_epoch", _N), ("epoch", _PTR),
        ("n_rows", _N), ("width", _N), ("s_t", _PTR), ("s_end", _PTR), ("s_x", _PTR), ("s_y", _PTR),
        ("s_k", _PTR), ("s_ids", _PTR), ("s_d2", _PTR), ("n_r", _N), ("s_r", _PTR),
        ("n_obj", _N), ("o_t", _PTR), ("o_x", _PTR), ("o_y", _PTR), ("o_ids", _PTR),
        ("tested", _PTR), ("start_q", _N), ("n", _N), ("stop_q", _N), ("need", _N),
        ("cap", _N), ("a_row", _PTR), ("a_oid", _PTR), ("a_d2", _PTR), ("a_ot", _PTR),
    ]


def build_library() -> ctypes.CDLL:
    """Build the crate (release, host CPU) and load it; a clear stop without cargo."""
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    if not os.access(cargo, os.X_OK):
        raise SystemExit("bench/rust.py: cargo not found (install rustup's toolchain or Debian's cargo package); "
                         "the Rust side of this benchmark cannot be built without it")
    # cargo reads bench/kernel_rust/.cargo/config.toml (target-cpu=native) from the working directory.
    subprocess.run([cargo, "build", "--release", "--quiet", "--target-dir", str(TARGET)], cwd=CRATE, check=True)
    lib = ctypes.CDLL(str(LIBRARY))
    for name in ("lookup_warm_checked", "lookup_warm_unchecked", "lookup_nothing"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.POINTER(Lookup)]
        fn.restype = ctypes.c_size_t
    return lib


class Inputs:
    """One lookup's arrays as both kernels take them (the worker's live arrays, not copies)."""

    def __init__(self, probe: kernel.SortedProbe, postings: Any, epoch: Any, state: Any, objects: Any,
                 bound: Any) -> None:
        dk, dr, de = postings._sorted_delta()  # noqa: SLF001 - the kernel reads the index's arrays
        n = state.n_rows
        self.probe = probe
        self.qkeys = np.repeat(probe.keys, np.diff(probe.ptr))  # the plain probe: a key per (key, object)
        self.qowner = probe.owners
        self.index = (postings._present, postings.keys, postings.fences, postings.rows,  # noqa: SLF001
                      postings.row_epochs, dk, dr, de, epoch)
        self.rows = (state.t[:n], state.end_t[:n], state.x[:n], state.y[:n], state.k[:n], state.ids[:n],
                     state.d2[:n], bound[:n] if bound.shape[0] else bound)
        self.objects = (objects.t, objects.x, objects.y, objects.ids)
        for a in (*self.index, *self.rows, *self.objects, self.qkeys, self.qowner):
            if not a.flags.c_contiguous:
                raise ValueError("the lookup's arrays must be contiguous")
        # The struct's fields that do not change between calls on these arrays, set once.
        present, keys, _, prow, prow_epoch, dk, dr, de, epoch = self.index
        s_t, s_end, s_x, s_y, s_k, s_ids, s_d2, s_r = self.rows
        o_t, o_x, o_y, o_ids = self.objects
        self.base = Lookup(
            0, None, None, present.shape[0], _p(present, np.uint8),
            keys.shape[0], _p(keys, np.int64), _p(prow, np.int32), prow_epoch.shape[0], _p(prow_epoch, np.int32),
            dk.shape[0], _p(dk, np.int64), _p(dr, np.int32), _p(de, np.int32), epoch.shape[0], _p(epoch, np.int32),
            s_t.shape[0], s_ids.shape[1], _p(s_t, np.int64), _p(s_end, np.int64), _p(s_x, np.float64),
            _p(s_y, np.float64), _p(s_k, np.int32), _p(s_ids, np.int64), _p(s_d2, np.float64), s_r.shape[0],
            _p(s_r, np.float64), o_ids.shape[0], _p(o_t, np.int64), _p(o_x, np.float64), _p(o_y, np.float64),
            _p(o_ids, np.int64))

    def numba_engine(self) -> tuple[np.ndarray, ...]:
        """The engine's own lookup of one timestamp (``_lookup`` over the sorted probe)."""
        present, keys, fences, prow, prow_epoch, dk, dr, de, epoch = self.index
        p = self.probe
        return _lookup(p.keys, p.ptr, p.owners, True, present, keys, fences, prow, prow_epoch, dk, dr, de, epoch,
                       *self.rows, *self.objects)

    def numba_warm(self, qkeys: np.ndarray, qowner: np.ndarray) -> tuple[np.ndarray, ...]:
        """The warm lookup (numba) of the plain probe ``(qkeys, qowner)``."""
        present, keys, _, prow, prow_epoch, dk, dr, de, epoch = self.index
        return _lookup_warm(qkeys, qowner, present, keys, prow, prow_epoch, dk, dr, de, epoch, *self.rows,
                            *self.objects)

    def rust(self, fn: Callable[[Any], int], qkeys: np.ndarray, qowner: np.ndarray) -> tuple[np.ndarray, ...]:
        """What an extension's wrapper would do, as numba's ``_lookup_warm`` does: output arrays
        of 1,024 pairs, grown (doubled, or to what the next key needs) whenever the next key's
        entries might not fit, the call going on from that key."""
        tested = np.zeros(self.objects[3].shape[0], dtype=np.int64)
        out = [np.empty(1024, np.int64), np.empty(1024, np.int64), np.empty(1024, np.float64), np.empty(1024, np.int64)]
        arg = Lookup.from_buffer_copy(self.base)
        arg.n_q, arg.qkeys, arg.qowner = qkeys.shape[0], _p(qkeys, np.int64), _p(qowner, np.int64)
        arg.tested = _p(tested, np.int64)
        while True:
            arg.cap = out[0].shape[0]
            arg.a_row, arg.a_oid, arg.a_d2, arg.a_ot = (_p(a, a.dtype) for a in out)
            arg.n = fn(ctypes.byref(arg))
            if arg.stop_q == arg.n_q:
                return (*(a[: arg.n].copy() for a in out), tested)
            # The key at stop_q has more entries than the room left: grow as numba's _grow does.
            for i, a in enumerate(out):
                grown = np.empty(max(2 * a.shape[0], arg.need, 64), dtype=a.dtype)
                grown[: arg.n] = a[: arg.n]
                out[i] = grown
            arg.start_q = arg.stop_q


def _p(a: np.ndarray, dtype: Any) -> int:
    """``a``'s address, after checking that its type is the one the Rust kernel reads there."""
    if a.dtype != dtype:
        raise TypeError(f"an array of {a.dtype} where the Rust kernel reads {np.dtype(dtype)}")
    return int(a.__array_interface__["data"][0])


def _as_pairs(out: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """The accepted pairs in one canonical order (numba's two forms meet them in different orders)."""
    order = np.lexsort((out[3], out[2], out[1], out[0]))
    return tuple(a[order] for a in out[:4])


def _same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


class Recorder:
    """Times every variant on each lookup the engine makes, and checks that they agree."""

    def __init__(self, lib: ctypes.CDLL, repeats: int, batch: int) -> None:
        self.lib, self.repeats, self.batch = lib, repeats, batch
        self.calls: list[dict[str, Any]] = []
        self.agree = True

    def lookup(self, inputs: Inputs) -> None:
        """Time each variant ``repeats`` times in rotated order; keep the medians (µs) and the pairs."""
        rust = {"rust_checked": self.lib.lookup_warm_checked, "rust_unchecked": self.lib.lookup_warm_unchecked}
        q, o = inputs.qkeys, inputs.qowner
        one: dict[str, Callable[[], tuple[np.ndarray, ...]]] = {
            "numba_engine": inputs.numba_engine,
            "numba_warm": partial(inputs.numba_warm, q, o),
            **{k: partial(inputs.rust, f, q, o) for k, f in rust.items()},
        }
        bq, bo = np.tile(q, self.batch), np.tile(o, self.batch)
        many: dict[str, Callable[[], tuple[np.ndarray, ...]]] = {
            "numba_warm": partial(inputs.numba_warm, bq, bo),
            **{k: partial(inputs.rust, f, bq, bo) for k, f in rust.items()},
        }
        call: dict[str, Any] = {"keys": int(q.shape[0])}
        for shape, variants in (("one", one), ("batch", many)):
            times: dict[str, list[float]] = {v: [] for v in variants}
            outs: dict[str, tuple[np.ndarray, ...]] = {}
            names = list(variants)
            for r in range(self.repeats):
                for v in names[r % len(names):] + names[: r % len(names)]:
                    t0 = time.perf_counter_ns()
                    outs[v] = variants[v]()
                    times[v].append((time.perf_counter_ns() - t0) / 1e3)
            self.agree &= all(_same(outs[v], outs["numba_warm"]) for v in rust)
            if shape == "one":
                warm, eng = outs["numba_warm"], outs["numba_engine"]
                self.agree &= _same(_as_pairs(warm), _as_pairs(eng)) and bool(np.array_equal(warm[4], eng[4]))
                call["pairs"] = int(warm[0].shape[0])
                call["tested"] = int(warm[4].sum())
            call[shape] = {v: median(ts) for v, ts in times.items()}
        self.calls.append(call)

    def call_overhead_us(self, n: int = 2000) -> float:
        """The median time of a ctypes call of an empty Rust function with the struct (µs)."""
        arg = Lookup()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            self.lib.lookup_nothing(ctypes.byref(arg))
            ts.append((time.perf_counter_ns() - t0) / 1e3)
        return median(ts)


def record_lookups(a: argparse.Namespace, lib: ctypes.CDLL) -> tuple[Recorder, list[int]]:
    """Build the engine, then run the timed timestamps with every lookup measured by the recorder."""
    objects, events, _ = paper_workload(workload_spec(a, timestamps=a.warmup + a.timestamps))
    config = PartitionConfig(method=Method.DKM, workers=a.workers)
    say("rust: initial phase, plan and workers (numba) ...")
    engine, _ = build_engine(config, objects, events, threads=usable_cores(), clock=time.perf_counter, kernel="numba")
    list(engine.run(objects, events, until=config.t0 + a.warmup))
    rec = Recorder(lib, a.repeats, a.batch)
    original = kernel.lookup_accept_sorted

    def measured(probe: kernel.SortedProbe, postings: Any, epoch: Any, state: Any, objects: Any,
                 bound: Any = kernel.NO_BOUND) -> Any:
        rec.lookup(Inputs(probe, postings, epoch, state, objects, bound))
        return original(probe, postings, epoch, state, objects, bound)

    calls_per_ts: list[int] = []
    kernel.lookup_accept_sorted = measured  # the worker index calls it through the module
    try:
        for t in range(config.t0 + a.warmup + 1, config.t0 + a.warmup + a.timestamps + 1):
            before = len(rec.calls)
            list(engine.run(objects, events, until=t))
            calls_per_ts.append(len(rec.calls) - before)
            say(f"t={t}: {calls_per_ts[-1]} lookups measured")
    finally:
        kernel.lookup_accept_sorted = original
    if not rec.calls:
        raise SystemExit("bench/rust.py: the engine made no sorted-probe lookup to measure")
    return rec, calls_per_ts


def per_timestamp(calls: list[dict[str, Any]], counts: list[int], shape: str, variant: str) -> list[float]:
    """Each timed timestamp's sum over its lookups of one variant's median (ms)."""
    out, at = [], 0
    for c in counts:
        out.append(sum(call[shape][variant] for call in calls[at: at + c]) / 1e3)
        at += c
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``bench/rust.py``: measure, save ``results.json``, print (and with ``--doc`` write) the section."""
    p = argparse.ArgumentParser(prog="bench/rust.py", description=__doc__.splitlines()[0])
    add_workload_flags(p, o_init=1_000_000, subscriptions=1_000_000, timestamps=10, seed=7, workers=20,
                       helps={"timestamps": "timed timestamps"})
    p.add_argument("--warmup", type=int, default=5, help="untimed timestamps first (%(default)s)")
    p.add_argument("--repeats", type=int, default=5, help="runs of each variant per lookup (%(default)s)")
    p.add_argument("--batch", type=int, default=40, help="a batch is the probe this many times (%(default)s)")
    p.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench" / "rust",
                   help="results.json goes here (%(default)s)")
    add_quick_flag(p, "100k objects, 100k subscriptions, 3 timestamps", o_init=100_000, subscriptions=100_000,
                   timestamps=3, repeats=3, batch=10)
    add_doc_flags(p)
    return bench_main(p, argv, run)


def run(a: argparse.Namespace) -> Report:
    """Every lookup of the timed timestamps in numba and in Rust; the report, or why they disagree."""
    if min(a.o_init, a.subscriptions, a.workers, a.timestamps, a.repeats, a.batch) < 1 or a.warmup < 0:
        raise Refused("sizes, --workers, --timestamps, --repeats and --batch must be at least 1, --warmup at least 0")
    lib = build_library()
    params = {k: getattr(a, k) for k in ("o_init", "subscriptions", "workers", "timestamps", "warmup", "repeats",
                                         "batch", "seed")}
    res = ResultFile(a.workdir / "results.json", params)
    res.put("load_before", load_average())
    rec, counts = record_lookups(a, lib)
    overhead = rec.call_overhead_us()
    res.put("load_after", load_average())
    ms = {shape: {v: per_timestamp(rec.calls, counts, shape, v) for v in variants}
          for shape, variants in (("one", ONE), ("batch", BATCH))}
    res.put("per_timestamp_ms", ms)
    res.put("calls", rec.calls)
    res.put("checks", {"agree": rec.agree, "call_overhead_us": overhead})
    if not rec.agree:
        return Report(SECTION, "", "the kernels disagree on some lookup's results")
    base = {shape: median(ms[shape]["numba_warm"]) for shape in ms}
    rows = {shape: "\n".join(prose("row", label=LABELS[v], median=f"{median(ms[shape][v]):.2f}",
                                   ratio=f"{ratio(median(ms[shape][v]), base[shape]):.2f}") for v in variants)
            for shape, variants in (("one", ONE), ("batch", BATCH))}
    fastest = {shape: min(median(ms[shape]["rust_checked"]), median(ms[shape]["rust_unchecked"])) for shape in ms}
    head = prose("head", **res.head(), objects=f"{a.o_init:,}", subscriptions=f"{a.subscriptions:,}",
                 workers=a.workers, warmup=a.warmup, timestamps=a.timestamps, repeats=a.repeats,
                 lookups=f"{median(counts):.0f}", keys=f"{median(c['keys'] for c in rec.calls):,.0f}",
                 pairs=f"{median(c['tested'] for c in rec.calls):,.0f}")
    batch = prose("batch", batch=a.batch)
    tail = prose("tail", overhead=f"{overhead:.1f}", one_ratio=f"{ratio(fastest['one'], base['one']):.2f}",
                 batch_ratio=f"{ratio(fastest['batch'], base['batch']):.2f}")
    return Report(SECTION, f"{head}\n{rows['one']}\n\n{batch}\n{rows['batch']}\n\n{tail}")


if __name__ == "__main__":
    sys.exit(main())
