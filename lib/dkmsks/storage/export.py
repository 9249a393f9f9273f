"""Results at any processed timestamp, read from the Delta logs without Spark (delta-rs).

Every ``knn_state`` commit (partition, repartition, compaction) records in its commit
metadata the timestamp it is exact at (``through_t``). The results at a processed ``T`` are
those of the newest such version with ``through_t <= T`` with the journal's result changes in
``(through_t, T]`` applied in order (docs/design.md §1: deletions, insertions, updates). Readers never
take a lock: each reads committed table versions, so a run committing meanwhile is either
wholly visible or not at all.

How far back this reaches is the *as-of horizon* (:mod:`dkmsks.storage.retention`): the journal
is read at its current version, which always holds every record, but the ``knn_state`` version
must still have its log entry and its files. A maintenance ``VACUUM`` or Delta's log cleanup
eventually removes old ones; a ``T`` that needs one of those is refused with the horizon and the
oldest timestamp still available, rather than a storage error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.model import KnnResult, Results
from dkmsks.core.sets import member
from dkmsks.storage import tables
from dkmsks.storage.journal import last_processed
from dkmsks.storage.lake import Lake, MissingTable, file_exists, where
from dkmsks.storage.retention import ENV, describe_retention

#: Order of changes of one subscription within one timestamp (docs/design.md §1).
_CHANGE_ORDER = ("delete", "insert", "update")
_DELETE = _CHANGE_ORDER.index("delete")
#: Delta operations that change no row: the version they make holds what its predecessor held.
_NO_DATA_CHANGE = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES"})


def processed_timestamps(lake: Lake) -> list[int]:
    """Every processed timestamp, in order (from the journal's ledger records)."""
    t = lake.read(tables.JOURNAL, columns=["t"], predicate=where(record__eq="ledger")).column("t")
    return sorted(int(v) for v in pc.unique(t).to_pylist())


def state_checkpoints(lake: Lake) -> list[tuple[int, int]]:
    """``(through_t, version)`` of every ``knn_state`` version known to be exact at a timestamp."""
    return checkpoints_of(lake.table(tables.STATE).history())


def checkpoints_of(history: Iterable[dict[str, Any]]) -> list[tuple[int, int]]:
    """``(through_t, version)`` pairs, sorted, from ``knn_state``'s commit history.

    A commit that names ``through_t`` in its metadata (partition, repartition, compaction,
    maintenance) is exact there; a commit that changes no row (:data:`_NO_DATA_CHANGE`, e.g. a
    user's own OPTIMIZE) is exact where its predecessor was. Any other commit, or one whose
    predecessor's entry has expired from the log, is exact at no known timestamp. Later versions
    of one content matter: they are the last to lose their files to VACUUM.
    """
    found = []
    through: int | None = None
    for commit in sorted((c for c in history if "version" in c), key=lambda c: int(c["version"])):
        meta = _user_metadata(commit)
        if "through_t" in meta:
            through = int(meta["through_t"])
        elif commit.get("operation") not in _NO_DATA_CHANGE:
            through = None
        if through is not None:
            found.append((through, int(commit["version"])))
    return sorted(found)


def _user_metadata(commit: dict[str, Any]) -> dict[str, Any]:
    text = commit.get("userMetadata")
    try:
        meta = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {}  # someone else's free-text metadata
    return meta if isinstance(meta, dict) else {}


def resolve_as_of(lake: Lake, as_of: int | None) -> int:
    """``as_of`` checked against the ledger (default: the last processed timestamp)."""
    empty = "nothing processed yet: the ledger is empty (run the partition job first)"
    if as_of is None:  # from the journal's log: no scan of the ledger's files (one per run)
        last = last_processed(lake)
        if last is None:
            raise ValueError(empty)
        return last
    done = processed_timestamps(lake)
    if not done:
        raise ValueError(empty)
    t = int(as_of)
    if t not in set(done):
        raise ValueError(
            f"timestamp {t} has not been processed; processed timestamps run from {done[0]} to {done[-1]}"
            + (f" ({len(done)} in all)" if len(done) > 2 else "")
        )
    return t


def results_as_of(lake: Lake, as_of: int | None = None, sub_ids: list[int] | None = None) -> tuple[int, Results]:
    """``(T, results)`` of every live subscription (or of ``sub_ids``) at processed timestamp
    ``T`` (default: the last)."""
    t, table = results_table_as_of(lake, as_of, sub_ids)
    return t, _results(table)


def exact_base(lake: Lake, as_of: int | None) -> tuple[int, int, int]:
    """``(T, through, version)``: processed timestamp ``as_of`` resolved (default: the last),
    and the newest ``knn_state`` version exact through a timestamp ``through <= T`` whose
    journal changes since are still in the log — what every as-of read replays from. A ``T``
    beyond the as-of horizon raises ValueError naming the horizon."""
    t = resolve_as_of(lake, as_of)
    checkpoints = state_checkpoints(lake)
    base = [(through, version) for through, version in checkpoints if through <= t]
    if not base:
        raise ValueError(beyond_horizon(lake, t, f"no knn_state version exact at or before t={t} is left in its "
                                                 "Delta log (its entries expired)", checkpoints))
    through, version = max(base)
    gone = missing_history(lake, version)
    if gone is not None:
        raise ValueError(beyond_horizon(lake, t, gone, checkpoints))
    return t, through, version


def results_table_as_of(lake: Lake, as_of: int | None = None,
                        sub_ids: list[int] | None = None) -> tuple[int, pa.Table]:
    """``(T, table)``: :func:`results_as_of` as columns ``sub_id``, ``object_ids``, ``d2``
    ordered by ``sub_id``, computed column-wise (the export of 1M subscriptions never holds a
    Python object per subscription)."""
    t, through, version = exact_base(lake, as_of)
    # A few subscriptions (dkm results, the client) go into the scans' predicate: knn_state's
    # files are sorted by sub_id, so the Parquet statistics skip most of them.
    picked = None if sub_ids is None else sorted({int(s) for s in sub_ids})
    state = lake.read(tables.STATE, columns=["sub_id", "object_ids", "d2"], version=version, sub_ids=picked)
    changes = lake.read(tables.JOURNAL, columns=["t", "sub_id", "change", "object_ids", "d2"],
                        predicate=where(record__eq="change", t__gt=through, t__le=t), sub_ids=picked)
    return t, _apply_changes(state, changes)


def _apply_changes(state: pa.Table, changes: pa.Table) -> pa.Table:
    """``state``'s rows with each changed subscription's last change applied (its new result,
    or no row after a deletion), ordered by ``sub_id``.

    The rows are chosen and ordered as numpy indices and the list columns copied once, by one
    ``take``: filtering the state, appending the changes and sorting the table copied them three
    times (docs/benchmarks.md, the 1M freshness run at ``df6cbd3``). The table is made one chunk
    first: a ``take`` across the state's chunks (160 at |S| = 1M, one per scanned batch) cost
    0.39-0.64 s, a copy into one chunk and the ``take`` from it 0.16-0.39 s."""
    state_sub = state.column("sub_id").to_numpy()
    if changes.num_rows == 0:
        rows = np.argsort(state_sub, kind="stable")
        return state.combine_chunks().take(pa.array(rows))
    sub = changes.column("sub_id").to_numpy()
    kind = change_kinds(changes.column("change"))
    last = last_change_rows(sub, changes.column("t").to_numpy(), kind)
    live = last[kind[last] != _DELETE]
    kept = np.flatnonzero(~member(state_sub, sub[last]))
    rows = np.concatenate([kept, state.num_rows + np.arange(live.shape[0])])
    rows = rows[np.argsort(np.concatenate([state_sub[kept], sub[live]]), kind="stable")]
    results = changes.take(pa.array(live)).select(["sub_id", "object_ids", "d2"]).cast(state.schema)
    return pa.concat_tables([state, results]).combine_chunks().take(pa.array(rows))


def change_kinds(change: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The journal's ``change`` values as their rank within one timestamp (:data:`_CHANGE_ORDER`)."""
    kind = pc.index_in(change, value_set=pa.array(_CHANGE_ORDER))
    if kind.null_count:
        raise ValueError("a journal change record is neither a delete, an insert nor an update")
    return np.asarray(kind.to_numpy())


def last_change_rows(sub: np.ndarray, t: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Row numbers of each subscription's last change in the order changes apply, ordered by
    ``sub``: by timestamp ``t``, within one timestamp by ``kind`` (deletions, insertions, updates:
    docs/design.md §1), then as recorded. The result after them all is what that change says."""
    order = np.lexsort((np.arange(len(sub)), kind, t, sub))
    last = np.ones(len(order), dtype=bool)
    last[:-1] = sub[order[1:]] != sub[order[:-1]]
    return order[last]


def missing_history(lake: Lake, version: int) -> str | None:
    """Why ``knn_state`` at ``version`` can no longer be read (expired log entry, files or
    deletion vectors removed by VACUUM), or None when it is intact; files are looked for where
    they lie (a folder, or object storage)."""
    from deltalake.exceptions import DeltaError

    try:
        table = lake.table(tables.STATE, version)
    except (MissingTable, DeltaError):
        return f"the Delta log entry of knn_state version {version} has expired"
    missing = [uri for uri in table.file_uris() if not file_exists(uri)]
    if missing:
        return f"{len(missing)} data file(s) of knn_state version {version} were removed by VACUUM"
    try:
        table.deletion_vectors().read_all()
    except DeltaError:
        return f"deletion vectors of knn_state version {version} were removed by VACUUM"
    return None


def oldest_available(lake: Lake, checkpoints: list[tuple[int, int]]) -> int | None:
    """The earliest processed timestamp whose results can still be rebuilt (None: none can).

    Each content of ``knn_state`` (one ``through_t``) serves the timestamps up to the next one;
    history is lost oldest first, so contents are checked from the newest back until one is gone.
    """
    newest: dict[int, int] = {}
    for through, version in checkpoints:
        newest[through] = max(version, newest.get(through, version))
    available = None
    for through in sorted(newest, reverse=True):
        if missing_history(lake, newest[through]) is not None:
            break
        available = through
    if available is None:
        return None
    later = [t for t in processed_timestamps(lake) if t >= available]
    return later[0] if later else None


def beyond_horizon(lake: Lake, t: int, reason: str, checkpoints: list[tuple[int, int]]) -> str:
    """The error of an ``--as-of t`` older than the history that is left: why, the horizon the
    table keeps, the oldest timestamp still available, and how to keep more."""
    keeps = describe_retention(lake.table(tables.STATE).metadata().configuration)
    oldest = oldest_available(lake, checkpoints)
    return (f"t={t} is beyond the as-of horizon: {reason}. knn_state keeps {keeps}; "
            + (f"the oldest timestamp still available is t={oldest}. " if oldest is not None
               else "no timestamp can be rebuilt from the history left. ")
            + f"To reach further back, raise the horizon ({ENV}, or dkm maintain --retention-hours) "
              "before the history is vacuumed.")


def _results(table: pa.Table) -> Results:
    """The result map of columns ``sub_id``, ``object_ids``, ``d2`` (one list row each)."""
    sub_ids = table.column("sub_id").to_numpy()
    out: Results = {}
    if not len(sub_ids):
        return out
    ids_col, d2_col = table.column("object_ids").combine_chunks(), table.column("d2").combine_chunks()
    ids, d2 = pc.list_flatten(ids_col).to_numpy(), pc.list_flatten(d2_col).to_numpy()
    ends = np.cumsum(pc.list_value_length(ids_col).fill_null(0).to_numpy(zero_copy_only=False))
    starts = ends - pc.list_value_length(ids_col).fill_null(0).to_numpy(zero_copy_only=False)
    for s, a, b in zip(sub_ids.tolist(), starts.tolist(), ends.tolist(), strict=True):
        out[int(s)] = KnnResult(ids[a:b].copy(), d2[a:b].copy())
    return out
