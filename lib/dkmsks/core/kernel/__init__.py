"""Compiled kernels of a worker's kNN update (numba), beside the numpy reference path.

The numpy path of :mod:`dkmsks.core.update` and :mod:`dkmsks.core.worker_index` makes a few
dozen small array calls per worker and timestamp; at the paper's scale a worker sees ~1,000
objects and accepts a few hundred pairs per timestamp, so those calls' fixed costs, not the
arithmetic, set its update time (docs/design.md §11, "Two kernels, one answer"). The kernels
below do the same work in one compiled loop each:

- :func:`lookup_accept` — steps 1–3 of :mod:`dkmsks.core.update`: every probe key is looked up
  in the postings (sorted main part and sorted delta), stale entries are skipped by epoch, and
  each live entry is tested exactly (liveness interval, ``d²``, the k-th result), so no
  candidate pair is ever materialised. It works in rounds of probe keys and asks for the
  cache lines a round will read before reading them (:func:`_lookup`): at the paper's scale a
  lookup mostly waits for memory;
- :func:`merge_accepted` — step 4: per row, the accepted objects (deduplicated, the ones
  already in the result ignored) are merged with the current result by ``(d², id)``;
- :func:`grid_entries`, :func:`grid_probe` — the DkM-SKS grid's postings of a ball and an
  object's probe keys (paper §4.3; :class:`~dkmsks.core.worker_index.GridIndex`);
  :func:`grid_reindex` — the grid's whole re-index of new and shrunken balls (which rows, their
  radii, epochs and postings) as one call.

Both give byte-identical results and the same work counters as the reference path
(``tests/unit/test_kernel.py`` compares them with each other and with the oracle). ``d²`` is
``dx*dx + dy*dy`` in float64 as the oracle computes it: numba does not contract it into a
fused multiply-add unless ``fastmath`` is asked for, which it is not here.

The package's modules: :mod:`~dkmsks.core.kernel.common` (the exact test, compiled; array
growth), :mod:`~dkmsks.core.kernel.key_filter` (the postings' key filter),
:mod:`~dkmsks.core.kernel.probe` (the shared probe's sorted form), :mod:`~dkmsks.core.kernel.lookup`,
:mod:`~dkmsks.core.kernel.merge` and :mod:`~dkmsks.core.kernel.grid`; :mod:`dkmsks.core.warm`
compiles them all before a process's first timestamp. What
they are compiled with (numba's decorator, the prefetch, the kernel choice) is
:mod:`dkmsks.core.jit`.

Which path runs is a parameter (``kernel=`` of :class:`~dkmsks.core.update.Worker`,
:class:`~dkmsks.core.engine.Engine` and :func:`~dkmsks.core.engine.build_engine`): ``numba`` by
default, ``numpy`` for the reference (also the default where numba cannot be imported).
"""

from __future__ import annotations

from dkmsks.core.jit import HAVE_NUMBA, KERNELS, kernel_name
from dkmsks.core.kernel.grid import grid_entries, grid_probe, grid_reindex, grid_sorted_probe
from dkmsks.core.kernel.key_filter import FILTER_BITS, FILTER_BLOCK_BITS, FILTER_MUL1, FILTER_MUL2, filter_set
from dkmsks.core.kernel.lookup import FENCE_STRIDE, NO_BOUND, lookup_accept, lookup_accept_sorted
from dkmsks.core.kernel.merge import delta_append, invalidate_rows, merge_accepted, merge_pending
from dkmsks.core.kernel.probe import Probe, SortedProbe, stable_order

__all__ = ["FENCE_STRIDE", "FILTER_BITS", "FILTER_BLOCK_BITS", "FILTER_MUL1", "FILTER_MUL2", "HAVE_NUMBA", "KERNELS",
           "NO_BOUND", "Probe", "SortedProbe", "delta_append", "filter_set", "grid_entries", "grid_probe",
           "grid_reindex", "grid_sorted_probe", "invalidate_rows", "kernel_name", "lookup_accept",
           "lookup_accept_sorted", "merge_accepted", "merge_pending", "stable_order"]
