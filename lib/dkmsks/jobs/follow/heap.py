"""A warm worker task's heap: glibc's allocator told to keep what a round frees for the next.

A built worker allocates and frees much the same temporaries round after round; by default
glibc hands large freed blocks back to the system and the next round faults them in again.
:func:`keep_freed_memory` changes that once the worker is built, and :func:`prefault_heap`
touches the heap once so that even the first large round finds its pages
(docs/design.md §10, docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes

#: glibc's ``mallopt`` parameters (``malloc.h``).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Freed memory a warm worker task keeps for its next round instead of handing it back to the
#: system, and the largest block taken from that heap (glibc allows at most 32 MiB).
ROUND_HEAP_KEEP, ROUND_HEAP_BLOCK = 64 << 20, 32 << 20
#: The heap a built worker touches once, ready for its first large round (:func:`prefault_heap`).
ROUND_HEAP_PREFAULT = 32 << 20


def keep_freed_memory(keep: int = ROUND_HEAP_KEEP, block: int = ROUND_HEAP_BLOCK) -> bool:
    """Let this process's allocator keep up to ``keep`` bytes of freed memory and serve blocks of
    up to ``block`` bytes from it; whether glibc took both settings.

    A warm worker allocates and frees much the same temporaries round after round, and glibc's
    default hands large freed blocks back to the system, so each round faults them in anew: a
    worker task applying a 100-timestamp burst at |S| = 1M, m = 20 took 40,000 page faults and
    0.07-0.1 s of system time (the same apply in a one-off process with a used heap: ~200 faults).
    With these settings the burst round's worker phase took 4.5-4.6 s instead of 5.0-5.1 s and
    the worker processes' CPU 8.7 s instead of 9.8 s, for ~20 MiB more kept per worker after the
    round. Called once the worker is built: the build's temporaries (several times what the
    built worker keeps) have gone back by then. Elsewhere than glibc nothing changes."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, block)) and bool(mallopt(_M_TRIM_THRESHOLD, keep))


def prefault_heap(total: int = ROUND_HEAP_PREFAULT, piece: int = 1 << 20) -> None:
    """Grow this process's heap by ``total`` bytes of touched pages and free them into it, so
    that the first large round's temporaries reuse pages the process already has.

    Call after :func:`keep_freed_memory`, which keeps them. Memory new to a process costs a
    page fault per page, and on this VM a fresh page from the host costs far more than that:
    twenty built workers (1M subscriptions, m = 20, no Spark) applying a 100-timestamp burst at
    once took ~97,600 page faults, 1.9-2.4 s of system time and 4.3-5.3 s; with 32 MiB touched
    beforehand 4,450 faults, 0.7-0.8 s and 3.6-4.7 s (interleaved runs, docs/benchmarks.md). The
    pieces are below glibc's mmap threshold, so they come from the heap, not from mappings
    that freeing would unmap."""
    import numpy as np

    pieces = [np.ones(piece, dtype=np.uint8) for _ in range(total // piece)]
    del pieces
