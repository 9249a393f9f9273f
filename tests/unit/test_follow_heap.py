"""A warm follow worker keeps the memory it frees for its next round (jobs/follow/heap.py,
keep_freed_memory): round after round the same temporaries come back without page faults; and
with its heap touched once beforehand (prefault_heap) even the first round's do."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import missing_prerequisite

pytestmark = pytest.mark.slow  # four fresh interpreters counting page faults: seconds

#: Temporaries of a round, MiB (mixed sizes, as a worker's arrays are).
SIZES_MIB = (4, 6, 2, 8, 1, 3)
#: A child process that allocates and frees them ten times (as rounds do), after an optional
#: call of keep_freed_memory; it prints the page faults of the repeats.
CHILD = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from dkmsks.jobs.follow.heap import keep_freed_memory, prefault_heap

    if sys.argv[1] in ("keep", "prefault"):
        assert keep_freed_memory()
    if sys.argv[1] == "prefault":
        prefault_heap()
    def round_():
        parts = [np.ones(int(mib) * 2**20 // 8) for mib in sys.argv[2].split(",")]
        return sum(float(p[-1]) for p in parts)
    faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    before = faults()
    round_()
    first = faults() - before
    before = faults()
    for _ in range(10):
        round_()
    print(first, faults() - before)
""")


def _faults(mode: str) -> tuple[int, int]:
    """Page faults of the first round and of the ten repeats, in a fresh process."""
    sizes = ",".join(str(mib) for mib in SIZES_MIB)
    done = subprocess.run([sys.executable, "-c", CHILD, mode, sizes], capture_output=True, text=True, check=True,
                          timeout=120)
    first, repeats = done.stdout.split()
    return int(first), int(repeats)


def _needs_linux() -> None:
    if not sys.platform.startswith("linux"):
        missing_prerequisite("glibc's mallopt: Linux only")


def test_freed_temporaries_come_back_without_page_faults():
    _needs_linux()
    pages = 10 * sum(SIZES_MIB) * 2**20 // 4096  # the repeats' temporaries, in 4 KiB pages
    default = _faults("default")[1]
    kept = _faults("keep")[1]
    # Measured here: 25,619 faults of 61,440 pages by default, none with the setting.
    assert default > pages / 5, f"glibc's default faulted only {default} of {pages} pages: the test shows nothing"
    assert kept < pages / 50, f"{kept} page faults for {pages} pages of temporaries"


def test_a_touched_heap_serves_the_first_round_without_page_faults():
    _needs_linux()
    from dkmsks.jobs.follow.heap import ROUND_HEAP_PREFAULT

    assert sum(SIZES_MIB) * 2**20 <= ROUND_HEAP_PREFAULT, "the round must fit in the touched heap"
    pages = sum(SIZES_MIB) * 2**20 // 4096
    first_kept, _ = _faults("keep")
    first_touched, repeats = _faults("prefault")
    # Measured here: 3,030 faults for 6,144 pages with a fresh heap (numpy asks for huge pages
    # for its larger arrays), none after the touch.
    assert first_kept > pages / 5, f"a fresh heap faulted only {first_kept} of {pages} pages: the test shows nothing"
    assert first_touched < pages / 20, f"{first_touched} page faults for a first round of {pages} pages"
    assert repeats < 10 * pages / 50, f"{repeats} page faults in ten repeats after the touch"
