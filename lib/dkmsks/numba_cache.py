"""Where numba caches the core's compiled kernels: a directory named by a digest of the core's
sources (``lib/dkmsks/core``), set in the environment when the package is imported.

numba keys a cached function by its own file's time stamp alone and bakes in the module
constants it read: after a change to a kernel or a constant in another file, the functions
using it would load stale from the cache, silently (numba's documented limits of caching). Seen
here: a kernel's sort cut to one pass in ``core/kernel/probe.py`` passed the tests against the
cache and failed six of them against a fresh one. Naming the directory by the sources makes any
change to the core compile afresh (a cold compile of every kernel: ~50 s on the 2-core VM).

Kept out of the core, which reads no files and no environment (``tests/unit/test_core_purity.py``),
and free of a numba import: the package is imported where numba is not needed (the CLI, DAGs).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

__all__ = ["CORE", "cache_dir", "configure", "source_digest"]

#: The core: every compiled function and all it calls or reads lives under it.
CORE = Path(__file__).resolve().parent / "core"


def source_digest(root: Path) -> str:
    """A digest of every Python source under ``root``: their paths and contents."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def cache_dir(base: str | None, digest: str) -> str:
    """Where numba's cache of a core with sources of ``digest`` goes: ``base/numba-<digest>``,
    ``base`` being ``NUMBA_CACHE_DIR`` or else the core's ``__pycache__`` (a ``base`` named for
    this digest already, as a child process inherits it, is kept)."""
    name = f"numba-{digest}"
    if not base:
        return str(CORE / "__pycache__" / name)
    return base if Path(base).name == name else str(Path(base) / name)


def configure() -> str:
    """Point ``NUMBA_CACHE_DIR`` at the directory of the core's current sources and return it.

    In the environment, which numba reads when imported and again before each compilation, and
    which child processes (Spark's Python workers) inherit; and in numba's configuration too
    when numba was imported already, since each compiled function takes its cache's place when
    it is defined."""
    where = cache_dir(os.environ.get("NUMBA_CACHE_DIR"), source_digest(CORE))
    os.environ["NUMBA_CACHE_DIR"] = where
    numba = sys.modules.get("numba")
    if numba is not None:
        numba.config.CACHE_DIR = where
    return where
