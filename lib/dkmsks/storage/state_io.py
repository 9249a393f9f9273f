"""The current kNN state: the ``knn_state`` snapshot overlaid with the journal's tail.

A micro-batch run commits one journal append (its commit point) and does not touch
``knn_state``; a compaction later MERGEs the journal's ``final`` records into the snapshot.
So the state of a subscription is its newest ``final`` record of the snapshot's plan that is
newer than the snapshot's mark (``t >`` the files' largest ``updated_t``), else its snapshot row. "Newest" is by ``t``,
then an upsert before a delete: a subscription deleted on one worker and registered again on
another at the same timestamp leaves two final records with equal ``t``, and within a
timestamp deletions apply before insertions (docs/design.md §1), so the upsert is the later one. The mark may lag a
compaction (a merged delete leaves no row behind) but never lead it, and applying a merged
record again changes nothing — the overlay is exact either way. ``sql/views/knn_current.sql``
is the same rule in Spark SQL, stated without the mark (docs/design.md §9: the newest of the
snapshot row and every final record, the row winning ties); this module applies it with delta-rs and numpy for the
driver and the worker tasks, optionally pinned to table versions so a retried task reads
exactly what the first attempt read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.knn_state import StateArrays
from dkmsks.core.model import Vocabulary
from dkmsks.core.sets import in_any_sorted, member
from dkmsks.storage import tables
from dkmsks.storage.lake import Lake, where

STATE_COLUMNS = ["plan_version", "worker", "sub_id", "x", "y", "keywords", "k", "registered_t", "weight",
                 "subset", "object_ids", "d2", "updated_t"]
MIN_T = -(2**63)


@dataclass(frozen=True)
class StateView:
    """Which snapshot and journal versions a job reads, and the overlay's plan and mark."""

    lake: Lake
    state_version: int
    journal_version: int
    plan_version: int
    through_t: int  # the snapshot's newest row (journal finals after it are overlaid)

    @staticmethod
    def open(lake: Lake, fallback_plan: int | None = None) -> StateView:
        """A view of the state and journal tables at their latest versions (``fallback_plan``: the plan of
        an empty state)."""
        state_version = lake.version(tables.STATE)
        journal_version = lake.version(tables.JOURNAL)
        plan = lake.column_bound(tables.STATE, "plan_version", state_version)
        through = snapshot_mark(lake, state_version)
        if plan is None or through is None:
            if fallback_plan is None:
                raise ValueError("knn_state is empty and no plan version was given")
            plan, through = int(fallback_plan), MIN_T
        return StateView(lake, state_version, journal_version, plan, through)

    def read(self, columns: list[str] | None = None, worker: int | None = None,
             sub_ids: Sequence[int] | None = None) -> pa.Table:
        """Current rows (``columns`` of :data:`STATE_COLUMNS`, ``sub_id`` always included), of
        ``worker`` and of the subscriptions ``sub_ids`` when given (both scans keep only their rows,
        :meth:`Lake.read`: a publisher asking about ~100 ids at |S| = 10M overlaid the whole tail)."""
        columns = list(columns or STATE_COLUMNS)
        if "sub_id" not in columns:
            columns.append("sub_id")
        snapshot = self.lake.read(tables.STATE, columns=columns, predicate=where(worker__eq=worker),
                                  version=self.state_version, sub_ids=sub_ids)
        tail_columns = [("t" if c == "updated_t" else c) for c in columns]
        tail = self.lake.read(
            tables.JOURNAL, columns=sorted(set(tail_columns) | {"t", "change"}), version=self.journal_version,
            predicate=where(record__eq="final", plan_version__eq=self.plan_version, t__gt=self.through_t,
                            worker__eq=worker), sub_ids=sub_ids,
        )
        return overlay(snapshot, tail, columns)

    def live_among(self, sub_ids: np.ndarray) -> np.ndarray:
        """Which of ``sub_ids`` are live in the current state (sorted, distinct): the ids
        :meth:`read` would return for them, without reading their rows.

        The snapshot's ids come from :meth:`Lake.sorted_values_on_reuse` (read once per
        ``knn_state`` version, from a process's second call on: a publisher's ~200 ids in the
        scan's ``IN`` list cost ~40 ms a call at |S| = 1M, which the first call still pays);
        the journal's tail after the mark is a few thousand records, read whole
        and filtered here, as :meth:`Lake.read` does for long id lists."""
        wanted = np.unique(np.asarray(sub_ids, dtype=np.int64))
        snapshot_ids = self.lake.sorted_values_on_reuse(tables.STATE, "sub_id", version=self.state_version)
        if snapshot_ids is not None:
            in_snapshot = in_any_sorted(wanted, snapshot_ids)
        else:  # this process's first ask: only the batch's rows, by the predicate
            found = self.lake.read(tables.STATE, columns=["sub_id"], version=self.state_version,
                                   sub_ids=wanted.tolist()).column("sub_id")
            in_snapshot = member(wanted, found.to_numpy())
        tail = self.lake.read(tables.JOURNAL, columns=["sub_id", "t", "change"], version=self.journal_version,
                              predicate=where(record__eq="final", plan_version__eq=self.plan_version,
                                              t__gt=self.through_t))
        tail = tail.filter(pc.is_in(tail.column("sub_id"), value_set=pa.array(wanted)))
        snapshot = pa.table({"sub_id": pa.array(wanted[in_snapshot], type=pa.int64())})
        live = overlay(snapshot, tail, ["sub_id"]).column("sub_id").to_numpy()
        return np.sort(np.asarray(live, dtype=np.int64))


def snapshot_mark(lake: Lake, version: int | None = None) -> int | None:
    """The snapshot's mark: every journal ``final`` record with ``t`` at or below it is merged
    into ``knn_state`` (at ``version``); None for an empty snapshot.

    From the files' statistics (no data file opened): an upper bound of the rows' newest
    ``updated_t``, which counts rows a compaction deleted (deletion vectors) — all of them no
    newer than that compaction's last merged final, so the mark never leads a compaction.
    """
    return lake.column_bound(tables.STATE, "updated_t", version)


def overlay(snapshot: pa.Table, tail: pa.Table, columns: list[str]) -> pa.Table:
    """Snapshot rows replaced by each subscription's newest tail record (deletes drop it)."""
    snapshot = snapshot.select(columns)
    if tail.num_rows == 0:
        return snapshot
    sub = np.asarray(tail.column("sub_id").to_numpy(), dtype=np.int64)
    t = np.asarray(tail.column("t").to_numpy(), dtype=np.int64)
    deleted = np.asarray(pc.equal(tail.column("change"), "delete").to_numpy(zero_copy_only=False), dtype=np.int8)
    order = np.lexsort((deleted, -t, sub))  # equal t: the upsert (re-registration) wins
    first = np.ones(order.shape[0], dtype=bool)
    first[1:] = sub[order][1:] != sub[order][:-1]
    newest = tail.take(pa.array(order[first]))
    newest_ids = np.asarray(newest.column("sub_id").to_numpy(), dtype=np.int64)
    keep = ~member(np.asarray(snapshot.column("sub_id").to_numpy(), dtype=np.int64), newest_ids)
    upserts = newest.filter(pc.equal(newest.column("change"), "upsert"))
    if "updated_t" in columns:
        upserts = upserts.append_column("updated_t", upserts.column("t"))
    upserts = upserts.select(columns).cast(snapshot.schema)
    return pa.concat_tables([snapshot.filter(pa.array(keep)), upserts])


def state_arrays(table: pa.Table, vocab: Vocabulary) -> StateArrays:
    """Rows with the state columns -> core :class:`StateArrays` (kNN lists as padded matrices)."""
    from dkmsks.storage.driver_data import keyword_sets

    n = table.num_rows
    k = np.asarray(table.column("k").to_numpy(), dtype=np.int32)
    oid_col = table.column("object_ids").combine_chunks()
    d2_col = table.column("d2").combine_chunks()
    offsets = np.asarray(oid_col.offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    width = max(int(k.max()) if n else 1, int(lengths.max()) if n else 1, 1)
    ids = np.full((n, width), -1, dtype=np.int64)
    d2 = np.full((n, width), np.inf, dtype=np.float64)
    rows = np.repeat(np.arange(n), lengths)
    pos = np.arange(offsets[-1] - offsets[0]) - np.repeat(offsets[:-1] - offsets[0], lengths)
    ids[rows, pos] = np.asarray(oid_col.flatten().to_numpy(), dtype=np.int64)
    d2[rows, pos] = np.asarray(d2_col.flatten().to_numpy(), dtype=np.float64)
    return StateArrays(
        np.asarray(table.column("sub_id").to_numpy(), dtype=np.int64),
        np.asarray(table.column("x").to_numpy(), dtype=np.float64),
        np.asarray(table.column("y").to_numpy(), dtype=np.float64),
        keyword_sets(table.column("keywords"), vocab), k,
        np.asarray(table.column("registered_t").to_numpy(), dtype=np.int64), ids, d2,
    )
