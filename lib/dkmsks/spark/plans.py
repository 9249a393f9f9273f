"""Partition plans in Delta: the ``partition_plans`` and ``partition_subsets`` tables.

A plan is written once per (re)partitioning under a new ``plan_version`` (idempotent Delta
writes tagged with that version) and read by every later job: the state a job works on
belongs to the plan in ``knn_state.plan_version`` (docs/design.md §8, the tables).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.config import Method, PartitionConfig
from dkmsks.core.model import Rect, Vocabulary
from dkmsks.core.partition import PartitionPlan
from dkmsks.spark import tables
from dkmsks.spark.lake import Lake, where

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class PlanInfo:
    """The current plan as later jobs need it: its version, its configuration and its data
    space (fixed at the first partitioning, docs/design.md §1), plus the plan's own metadata."""

    plan_version: int
    config: PartitionConfig
    space: Rect
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
    return PlanInfo(int(row["plan_version"]), config, Rect(*(float(v) for v in meta["space"])), meta)


def write_plan(spark: SparkSession, plan: PartitionPlan, version: int, config: PartitionConfig,
               effective_t: int, vocab: Vocabulary) -> None:
    """Both plan tables for ``version`` (each write skipped when already committed). ``ps2``
    term sets are stored as words (``vocab`` numbers them in this job only)."""
    from dkmsks.spark.delta_io import insert

    meta, _, subsets = plan.to_tables()
    row = {
        "plan_version": version, "method": plan.method.value, "workers": plan.m,
        "params": config.to_json(), "subsets": int(len(plan.subsets)), "subscriptions": int(len(plan)),
        "o_init": int(plan.n_objects), "effective_t": int(effective_t), "meta_json": json.dumps(meta),
    }
    insert(spark, spark.createDataFrame([row], schema=spark.table(tables.PLANS).schema), tables.PLANS,
           app_id="dkmsks-plans", version=version)
    cols = {k: np.asarray(v) for k, v in subsets.items()}
    n = cols["subset"].shape[0]
    target = spark.table(tables.SUBSETS).schema
    numpy_type = {"long": np.int64, "integer": np.int32, "double": np.float64}
    arrow = pa.table({
        "plan_version": pa.array(np.full(n, version, dtype=np.int64)),
        **{name: pa.array(cols[name].astype(numpy_type[target[name].dataType.typeName()]))
           for name in ("subset", "xmin", "ymin", "xmax", "ymax", "rxmin", "rymin", "rxmax", "rymax",
                        "weight", "size", "worker", "kind", "depth")},
    })
    if "terms" in target.fieldNames():
        words = np.asarray(vocab.words, dtype=object)
        arrow = arrow.append_column("all_terms", pa.array(cols["all_terms"].astype(bool)))
        arrow = arrow.append_column("terms", pa.array([words[np.asarray(t, dtype=np.int64)].tolist()
                                                       for t in cols["terms"]], type=pa.list_(pa.string())))
    elif plan.method is Method.PS2:
        raise ValueError(f"{tables.SUBSETS} predates ps2 (no terms column): use a fresh warehouse for ps2")
    insert(spark, spark.createDataFrame(arrow.to_pandas(), schema=target), tables.SUBSETS,
           app_id="dkmsks-subsets", version=version)


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
