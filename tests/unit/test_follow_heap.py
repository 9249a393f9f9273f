"""A warm follow worker keeps the memory it frees for its next round (jobs/follow.py,
keep_freed_memory): round after round the same temporaries come back without page faults."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

#: Temporaries of a round, MiB (mixed sizes, as a worker's arrays are).
SIZES_MIB = (4, 6, 2, 8, 1, 3)
#: A child process that allocates and frees them ten times (as rounds do), after an optional
#: call of keep_freed_memory; it prints the page faults of the repeats.
CHILD = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from dkmsks.jobs.follow import keep_freed_memory

    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    def round_():
        parts = [np.ones(int(mib) * 2**20 // 8) for mib in sys.argv[2].split(",")]
        return sum(float(p[-1]) for p in parts)
    round_()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        round_()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str) -> int:
    sizes = ",".join(str(mib) for mib in SIZES_MIB)
    done = subprocess.run([sys.executable, "-c", CHILD, mode, sizes], capture_output=True, text=True, check=True,
                          timeout=120)
    return int(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_temporaries_come_back_without_page_faults():
    pages = 10 * sum(SIZES_MIB) * 2**20 // 4096  # the repeats' temporaries, in 4 KiB pages
    default = _faults("default")
    kept = _faults("keep")
    # Measured here: 25,619 faults of 61,440 pages by default, none with the setting.
    assert default > pages / 5, f"glibc's default faulted only {default} of {pages} pages: the test shows nothing"
    assert kept < pages / 50, f"{kept} page faults for {pages} pages of temporaries"
