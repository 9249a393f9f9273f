"""Partition plans in Delta: the ``partition_plans`` and ``partition_subsets`` tables.

A plan is written once per (re)partitioning under a new ``plan_version`` (idempotent Delta
writes tagged with that version, :func:`dkmsks.jobs.partition.write_plan`) and read here by
every later job: the state a job works on belongs to the plan in ``knn_state.plan_version``
(docs/design.md §8, the tables).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.compute as pc

from dkmsks.core.config import PartitionConfig
from dkmsks.core.model import Rect, Vocabulary
from dkmsks.storage import tables
from dkmsks.storage.lake import Lake, where


@dataclass(frozen=True)
class PlanInfo:
    """The current plan as later jobs need it: its version, its configuration, its data
    space (fixed at the first partitioning, docs/design.md §1), the last timestamp processed
    before it (it serves ``t > effective_t``), plus the plan's own metadata."""

    plan_version: int
    config: PartitionConfig
    space: Rect
    effective_t: int
    meta: dict[str, Any]

    @property
    def method(self) -> str:
        """The plan's partitioning method."""
        return self.config.method.value

    @property
    def workers(self) -> int:
        """The plan's number of workers."""
        return self.config.workers


def current_plan(lake: Lake) -> PlanInfo | None:
    """The plan the state belongs to (``knn_state.plan_version``), else the newest plan."""
    plans = lake.read(tables.PLANS)
    if plans.num_rows == 0:
        return None
    in_state = lake.column_bound(tables.STATE, "plan_version")  # a repartition overwrites the state whole
    versions = np.asarray(plans.column("plan_version").to_numpy(), dtype=np.int64)
    wanted = in_state if in_state is not None else int(versions.max())
    row = plans.filter(pc.equal(plans.column("plan_version"), wanted)).to_pylist()[0]
    meta = json.loads(row["meta_json"])
    # Method and m are columns of their own; the rest of the configuration is the JSON.
    config = PartitionConfig.from_dict({**json.loads(row["params"]), "method": row["method"],
                                        "workers": row["workers"]})
    return PlanInfo(int(row["plan_version"]), config, Rect(*(float(v) for v in meta["space"])),
                    int(row["effective_t"]), meta)


def read_subsets(lake: Lake, plan_version: int, vocab: Vocabulary) -> dict[str, Any]:
    """The subset columns of a plan for :meth:`PartitionPlan.from_tables` (term words as ids
    of ``vocab``)."""
    subsets = lake.read(tables.SUBSETS, predicate=where(plan_version__eq=plan_version)).drop(["plan_version"])
    subsets = subsets.sort_by("subset")
    cols: dict[str, Any] = {name: subsets.column(name).to_numpy(zero_copy_only=False)
                            for name in subsets.column_names if name not in ("terms", "all_terms")}
    if "terms" in subsets.column_names:
        cols["all_terms"] = np.asarray(pc.fill_null(subsets.column("all_terms"), True).to_numpy(
            zero_copy_only=False), dtype=bool)
        cols["terms"] = [np.asarray([vocab.id_of(w) for w in (row or [])], dtype=np.int32)
                         for row in subsets.column("terms").to_pylist()]
    return cols
