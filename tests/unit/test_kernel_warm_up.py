"""kernel.warm_up compiles (or loads from numba's cache) every compiled kernel a worker can
call, so that no worker task compiles one on its first large batch (~10 s each, at once in
every task: follow's first burst round took 20.7 s instead of 4.1 when the batch-sized
lookup was missing from it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dkmsks.core import kernel

pytestmark = pytest.mark.unit

#: The jitted functions of core/kernel.py that Python calls (the others are called only from
#: these, compiled into them; loaded from numba's cache, their own dispatchers stay empty).
ENTRY_KERNELS = ("_lookup", "_lookup_warm", "_merge_accepted", "_grid_entries", "_grid_probe", "_sorted_form",
                 "_filter_set", "_merge_sorted_into")
INNER_KERNELS = ("_test_entries", "_test_fitting", "_warm_fitting", "_grid_fitting", "_filter_round", "_main_runs",
                 "_delta_runs", "_run_ends", "_hold_entries", "_prefetch_held", "_enters", "_filtered", "_gallop",
                 "_grow", "_grow_pairs", "_lattice", "_outside_id", "_first_level", "_radix_order")
#: The main server's compiled kernels (stats_kernel, new_book) that Python calls.
SERVER_KERNELS = (("stats_kernel", "_count"), ("stats_kernel", "_sums"), ("stats_kernel", "_keyword_sums"),
                  ("stats_kernel", "_bounds_in_buckets"), ("new_book", "_pick"), ("new_book", "_boxes"))


def test_every_worker_kernel_is_jitted() -> None:
    import numba.core.dispatcher

    jitted = {name for name, value in vars(kernel).items() if isinstance(value, numba.core.dispatcher.Dispatcher)}
    assert jitted == set(ENTRY_KERNELS) | set(INNER_KERNELS), jitted


def test_warm_up_leaves_no_worker_kernel_uncompiled() -> None:
    # A fresh interpreter: the dispatchers of this one may have been compiled by other tests.
    script = (
        "from dkmsks.core import kernel\n"
        "kernel.warm_up()\n"
        f"missing = [n for n in {ENTRY_KERNELS!r} if not getattr(kernel, n).signatures]\n"
        "from dkmsks.core import stats_kernel\n"
        "from dkmsks.core.partition import new_book\n"
        f"missing += [f'{{m}}.{{n}}' for m, n in {SERVER_KERNELS!r} if not getattr(globals()[m], n).signatures]\n"
        "print(missing)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=600)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
