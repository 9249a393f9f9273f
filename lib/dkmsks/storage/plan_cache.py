"""The main server's ``O_init`` statistics, kept beside the warehouse for later jobs.

Every micro-batch run rebuilds the main server (docs/design.md §4), whose cost model asks counting
questions about ``O_init`` (Eq. 1, 2, 4). Reading ``O_init`` and building the statistics took
2.8 s of a cold run's 4 s main-server start at ``|O_init| = 1M`` — a fifth of a 100-timestamp
catch-up. ``O_init`` does not change once the first plan exists (a row with ``t <= t0`` that arrives
later is refused as late, docs/design.md §1), so the partition job (or the first run) writes the
statistics and the keyword words they are numbered by to
``<warehouse root>/cache/<database>/oinit-stats-t0_<t0>.npz``, and later runs (micro-batches,
repartitions) load them.

The file holds plain arrays, loaded without pickle: a file someone else put there cannot run
code. A file that is unreadable, from another ``O_init`` (another ``objects`` table id or
object count) or does not fit together is rebuilt with a message, never trusted. Deleting the
folder is always safe.
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from dkmsks.core.model import Objects, Vocabulary
from dkmsks.core.stats import ObjectStatistics
from dkmsks.cores import usable_cores
from dkmsks.storage import tables
from dkmsks.storage.lake import Lake, where

#: Bump when the layout of the arrays changes: older files are then rebuilt, not misread.
FORMAT = 1


def _path(folder: Path, t0: int) -> Path:
    # Keyed by t0, not by plan: a repartition keeps the first plan's O_init (docs/design.md §1).
    return folder / f"oinit-stats-t0_{int(t0)}.npz"


def _kernel() -> str | None:
    """DKMSKS_KERNEL=numpy keeps the main server's counts on the numpy path too (docs/design.md §11)."""
    return os.environ.get("DKMSKS_KERNEL") or None


def _oinit_identity(lake: Lake, t0: int) -> tuple[str, int]:
    """(Delta table id of ``objects``, objects with ``t <= t0``): a table dropped and created
    again gets a new id, and within one table O_init only grows, so equal means the same set."""
    table_id = str(lake.table(tables.OBJECTS).metadata().id)
    return table_id, lake.read(tables.OBJECTS, columns=["t"], predicate=where(t__le=t0)).num_rows


def _load(path: Path, vocab: Vocabulary, identity: tuple[str, int]) -> ObjectStatistics | None:
    try:
        with np.load(path, allow_pickle=False) as saved:
            arrays = dict(saved)
        if int(arrays.pop("format")) != FORMAT:
            raise ValueError("another format version")
        saved_identity = (str(arrays.pop("objects_table_id")), int(arrays.pop("n_objects")))
        if saved_identity != identity:
            raise ValueError(f"built for another O_init: {saved_identity} (now {identity})")
        words = arrays.pop("words").tolist()
        stats = ObjectStatistics.from_arrays(arrays, workers=usable_cores(), kernel=_kernel())
    except (OSError, EOFError, KeyError, ValueError, TypeError, zipfile.BadZipFile) as err:
        print(f"plan cache: ignoring {path} ({err}); rebuilding it", file=sys.stderr)
        return None
    # Keyword ids are positions in `words`: the vocabulary must number them the same way.
    if any(vocab.id_of(w) != i for i, w in enumerate(words)):
        raise ValueError("the plan cache must be loaded into an empty vocabulary")
    return stats


def _save(path: Path, stats: ObjectStatistics, words: list[str], table_id: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write aside, then rename: a reader never sees half a file, a crash leaves at most a temp.
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, format=np.array(FORMAT), n_objects=np.array(stats.n_objects),
                     objects_table_id=np.array(table_id, dtype=np.str_),
                     words=np.array(words, dtype=np.str_),
                     **stats.to_arrays())  # type: ignore[arg-type]  # mypy matches ** against allow_pickle
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        print(f"plan cache: could not write {path} ({err}); the next run rebuilds it", file=sys.stderr)


def oinit_statistics(
    lake: Lake, t0: int, vocab: Vocabulary, folder: Path | None, *, need_objects: bool = False,
) -> tuple[ObjectStatistics, Objects | None]:
    """The statistics of ``O_init`` (objects with ``t <= t0``), and ``O_init`` itself when
    ``need_objects`` (else None when the statistics came from the cache).

    ``vocab`` must be empty: the keyword ids of the statistics are set in it first.
    """
    from dkmsks.storage.driver_data import read_objects_between

    if len(vocab):
        raise ValueError("oinit_statistics needs an empty vocabulary")
    path = _path(folder, t0) if folder is not None else None
    identity = _oinit_identity(lake, t0) if path is not None else ("", 0)
    stats = _load(path, vocab, identity) if path is not None and path.exists() else None
    objects = None
    if stats is None or need_objects:
        objects = read_objects_between(lake, vocab, after=None, upto=t0)
        if len(objects) == 0:
            raise ValueError(f"no objects with t <= {t0} in table {tables.OBJECTS}: ingest O_init first")
    if stats is None:
        assert objects is not None
        stats = ObjectStatistics.build(objects, len(vocab), workers=usable_cores(), kernel=_kernel())
        if path is not None:
            _save(path, stats, vocab.words, identity[0])
    return stats, objects
