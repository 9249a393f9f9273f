"""warm_up (dkmsks.core.warm) compiles (or loads from numba's cache) every compiled kernel a worker can
call, so that no worker task compiles one on its first large batch (~10 s each, at once in
every task: follow's first burst round took 20.7 s instead of 4.1 when the batch-sized
lookup was missing from it)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: The jitted functions of the core/kernel package that Python calls, by module (the others are
#: called only from these, compiled into them; loaded from numba's cache, their own dispatchers
#: stay empty).
ENTRY_KERNELS = (("lookup", "_lookup"), ("lookup", "_lookup_warm"), ("merge", "_merge_accepted"),
                 ("grid", "_grid_entries"), ("grid", "_grid_reindex"), ("grid", "_grid_probe"),
                 ("grid", "_grid_sorted_probe"),
                 ("probe", "_sorted_form"), ("merge", "_delta_append"), ("merge", "_merge_pending"),
                 ("merge", "_invalidate_rows"), ("key_filter", "_filter_set"))
INNER_KERNELS = (("merge", "_merge_sorted_into"), ("lookup", "_test_entries"),
                 ("lookup", "_test_fitting"), ("lookup", "_warm_fitting"),
                 ("grid", "_grid_fitting"), ("lookup", "_filter_round"), ("lookup", "_main_runs"),
                 ("lookup", "_delta_runs"), ("lookup", "_run_ends"), ("lookup", "_hold_entries"),
                 ("lookup", "_prefetch_held"), ("common", "_enters"), ("key_filter", "_filtered"),
                 ("lookup", "_gallop"), ("lookup", "_lower_bound"), ("common", "_grow"), ("lookup", "_grow_pairs"),
                 ("grid", "_lattice"),
                 ("grid", "_outside_id"), ("grid", "_first_level"), ("probe", "_radix_order"),
                 ("probe", "_stable_by"), ("probe", "_bits"))
#: The package's modules, each holding some of the kernels above.
KERNEL_MODULES = ("common", "key_filter", "probe", "lookup", "merge", "grid")
#: The main server's compiled kernels (stats_kernel, new_book) that Python calls.
SERVER_KERNELS = (("stats_kernel", "_count"), ("stats_kernel", "_sums"), ("stats_kernel", "_keyword_sums"),
                  ("stats_kernel", "_bounds_in_buckets"), ("new_book", "_pick"), ("new_book", "_boxes"))
#: A worker state's compiled sub id -> row map (dkmsks.core.sub_map) and row writes
#: (dkmsks.core.knn_state_kernel) that Python calls.
STATE_KERNELS = (("sub_map", "_hash_rows_of"), ("sub_map", "_hash_insert"), ("sub_map", "_hash_pop"),
                 ("sub_map", "_hash_rehash"), ("sub_map", "_hash_first_mapped"), ("knn_state_kernel", "check_batch"),
                 ("knn_state_kernel", "write_rows"), ("knn_state_kernel", "clear_rows"),
                 ("knn_state_kernel", "balls_after"))


@pytest.mark.unit
def test_every_worker_kernel_is_jitted() -> None:
    import numba.core.dispatcher

    # Each jitted function under every (module, name) it has: a kernel imported into another
    # module of the package is one function, listed once.
    names_of: dict[int, set[tuple[str, str]]] = {}
    for module in KERNEL_MODULES:
        for name, value in vars(importlib.import_module(f"dkmsks.core.kernel.{module}")).items():
            if isinstance(value, numba.core.dispatcher.Dispatcher):
                names_of.setdefault(id(value), set()).add((module, name))
    listed = set(ENTRY_KERNELS) | set(INNER_KERNELS)
    unlisted = [sorted(names) for names in names_of.values() if not names & listed]
    assert not unlisted, unlisted
    assert listed <= set().union(*names_of.values()), listed - set().union(*names_of.values())
    assert len(names_of) == len(listed)  # no function listed under two names


@pytest.mark.slow  # a fresh interpreter that loads or compiles the kernels: seconds
def test_warm_up_leaves_no_worker_kernel_uncompiled() -> None:
    # A fresh interpreter: the dispatchers of this one may have been compiled by other tests.
    script = (
        "import importlib\n"
        "from dkmsks.core.warm import warm_up\n"
        "warm_up()\n"
        f"missing = [f'{{m}}.{{n}}' for m, n in {ENTRY_KERNELS!r}\n"
        "           if not getattr(importlib.import_module(f'dkmsks.core.kernel.{m}'), n).signatures]\n"
        "from dkmsks.core import knn_state_kernel, stats_kernel, sub_map\n"
        "from dkmsks.core.partition import new_book\n"
        f"missing += [f'{{m}}.{{n}}' for m, n in {SERVER_KERNELS + STATE_KERNELS!r}\n"
        "            if not getattr(globals()[m], n).signatures]\n"
        "print(missing)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=600)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.slow  # a fresh interpreter that loads or compiles the kernels: seconds
def test_the_kernel_cache_is_named_by_the_core_sources(tmp_path: Path) -> None:
    """The cache directory is named by a digest of every source of the core (numba checks only a
    cached function's own file), so that a change anywhere in it (a kernel called from
    another file, a module constant) cannot load stale compiled code."""
    from dkmsks import numba_cache

    tree = tmp_path / "core"
    (tree / "kernel").mkdir(parents=True)
    (tree / "jit.py").write_text("A = 1\n")
    (tree / "kernel" / "probe.py").write_text("B = 11\n")
    (tree / "notes.txt").write_text("not a source")
    first = numba_cache.source_digest(tree)
    (tree / "notes.txt").write_text("changed, still not a source")
    assert numba_cache.source_digest(tree) == first
    (tree / "kernel" / "probe.py").write_text("B = 1\n")  # one constant in a file the caller does not live in
    assert numba_cache.source_digest(tree) not in (first, "")
    (tree / "kernel" / "probe.py").write_text("B = 11\n")
    assert numba_cache.source_digest(tree) == first
    (tree / "kernel" / "probe.py").rename(tree / "kernel" / "grid.py")
    assert numba_cache.source_digest(tree) != first

    core = numba_cache.CORE
    assert numba_cache.cache_dir(None, "abc") == str(core / "__pycache__" / "numba-abc")
    assert numba_cache.cache_dir("/var/cache/x", "abc") == "/var/cache/x/numba-abc"
    assert numba_cache.cache_dir("/var/cache/x/numba-abc", "abc") == "/var/cache/x/numba-abc"  # a child process's
    # Fresh interpreters, with and without a base given, numba imported after the package or
    # before it: numba's cache directory (its configuration, and the environment it re-reads)
    # is the one named by the digest of the sources as they are.
    digest = numba_cache.source_digest(core)
    show = "print(numba.config.CACHE_DIR, os.environ['NUMBA_CACHE_DIR'])"
    for first in ("from dkmsks.core import jit; import numba", "import numba; from dkmsks.core import jit"):
        for base, want in ((str(tmp_path / "base"), str(tmp_path / "base" / f"numba-{digest}")),
                           (None, str(core / "__pycache__" / f"numba-{digest}"))):
            env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
            if base is not None:
                env["NUMBA_CACHE_DIR"] = base
            out = subprocess.run([sys.executable, "-c", f"import os; {first}; {show}"], capture_output=True,
                                 text=True, check=True, env=env, timeout=120)
            assert out.stdout.split() == [want, want], first + out.stdout + out.stderr


#: A fresh interpreter: warm_up, then every method's engine through its initial phase and
#: three timestamps of the workload in argv[1], printing each compiled function of the core that
#: gained a signature after warm_up (numba compiles again for new argument types, a read-only
#: array among them).
_NEW_SIGNATURES = """
import importlib, pkgutil, sys
import numba.core.dispatcher
import dkmsks.core
from dkmsks.core.config import Method, PartitionConfig
from dkmsks.core.engine import build_engine
from dkmsks.core.model import Vocabulary
from dkmsks.core.warm import warm_up
from dkmsks.io.formats import read_events, read_objects

def signatures():
    seen = {}
    for info in pkgutil.walk_packages(dkmsks.core.__path__, "dkmsks.core."):
        for name, value in vars(importlib.import_module(info.name)).items():
            if isinstance(value, numba.core.dispatcher.Dispatcher):
                seen.setdefault(f"{value.py_func.__module__}.{value.py_func.__name__}", set()).update(
                    map(str, value.signatures))
    return seen

vocab = Vocabulary()
objects = read_objects(sys.argv[1] + "/objects.tsv", vocab).objects
events = read_events(sys.argv[1] + "/events.tsv", vocab).events
warm_up()
warmed = signatures()
for method in ("dkm", "kop", "sop", "ps2"):
    engine, _ = build_engine(PartitionConfig(method=Method(method), workers=4), objects, events, threads=2,
                             kernel="numba")
    for _ in engine.run(objects, events, until=3):
        pass
late = sorted(f"{name} {sig}" for name, sigs in signatures().items() for sig in sigs - warmed.get(name, set()))
print(late)
"""


@pytest.mark.slow  # a fresh interpreter that loads or compiles the kernels: seconds
def test_after_warm_up_no_timestamp_compiles_anything(tmp_path: Path) -> None:
    # A kernel missing from warm_up compiles in the first timestamp of a fresh process whose
    # cache lacks it (a new image, a source snapshot): 0.9 s of the first timestamp of a
    # paper-benchmark point, read-only arrays of the main server's refresh and id search.
    from conftest import real_objects
    from dkmsks.core.workload import WorkloadSpec, generate_workload
    from dkmsks.io.writers import write_events, write_objects

    spec = WorkloadSpec(o_init=5000, subscriptions=1000, timestamps=3, objects_per_ts=200, inserts_per_ts=40,
                        deletes_per_ts=40, k_max=5, seed=3)
    source, vocab = real_objects(spec.objects_needed)
    objects, events = generate_workload(source, spec)
    write_objects(tmp_path / "objects.tsv", objects, vocab)
    write_events(tmp_path / "events.tsv", events, vocab)
    out = subprocess.run([sys.executable, "-c", _NEW_SIGNATURES, str(tmp_path)], capture_output=True, text=True,
                         check=True, timeout=600)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr[-3000:]
