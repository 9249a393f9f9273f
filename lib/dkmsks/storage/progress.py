"""How far a warehouse's pipeline is, read from the Delta logs without Spark: whether the initial
partitioning is done, and why a partition, repartition or micro-batch job would have nothing to
do.

The DAGs' first tasks (``check_partition``, ``check_plan``, ``check_pending``) ask here before
they submit a Spark job, so a run with nothing to do costs a log read instead of a Spark
application and updates no asset. They read what the jobs read: the ledger through
:func:`dkmsks.storage.journal.last_processed`, the plan the state belongs to through
:func:`dkmsks.storage.plans.current_plan`, the newest landed timestamp through
:meth:`dkmsks.storage.lake.Lake.column_bound`. A table that does not exist yet counts as empty,
except that without a journal the ledger is unknown and the job runs and decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from dkmsks.storage import tables
from dkmsks.storage.journal import last_processed
from dkmsks.storage.lake import Lake, MissingTable
from dkmsks.storage.plans import PlanInfo, current_plan
from dkmsks.warehouse import Warehouse


def partition_done(warehouse: Warehouse) -> bool:
    """Whether the initial partitioning completed (its ledger record is in the journal)."""
    return _last_processed(Lake.of(warehouse)) is not None


def partition_skip_reason(warehouse: Warehouse) -> str | None:
    """Why the initial partitioning would do nothing, or ``None`` when it has work: it is done
    once its ledger record is in the journal (:func:`partition_done`). An interrupted first run
    left no ledger record, and the job redoes it."""
    last = _last_processed(Lake.of(warehouse))
    if last is None:
        return None
    return (f"the initial partitioning of {warehouse} is done (ledger through t = {last}): nothing to do "
            "(dkmsks_repartition makes new plans)")


def repartition_skip_reason(warehouse: Warehouse, *, scheduled: bool) -> str | None:
    """Why a repartitioning would do nothing, or ``None`` when it has work (or we cannot tell).

    No plan yet; or, for a scheduled run, no timestamp processed since the current plan (it
    serves the timestamps after its ``effective_t``). A triggered run may ask for other
    parameters, so it always runs once a plan exists.
    """
    lake = Lake.of(warehouse)
    plan = _current_plan(lake)
    if plan is None:
        return f"no partition plan yet in {warehouse}: nothing to repartition (the partition DAG makes the first)"
    if not scheduled:
        return None
    try:
        last = last_processed(lake)
    except MissingTable:
        return None
    if last is not None and last > plan.effective_t:
        return None
    return (f"no timestamp processed since the current plan (it serves t > {plan.effective_t}, "
            f"last processed t = {'none' if last is None else last}): nothing to repartition")


def microbatch_skip_reason(warehouse: Warehouse, *, scheduled: bool) -> str | None:
    """Why a micro-batch run would do nothing, or ``None`` when it has work (or we cannot tell).

    Only a scheduled run skips (one triggered by hand or by a new plan always runs the job, which
    decides): no plan yet; or no landed timestamp after the last processed one (the landing
    tables' newest ``t`` against the ledger's). On a warehouse that follow mode keeps up to date,
    the schedule then costs a log read instead of a Spark application (30-100 s of both cores on
    a 2-core machine, measured in the compose stack); a timestamp that lands while follow runs
    is still pending for whichever takes the writer lock first.
    """
    if not scheduled:
        return None
    lake = Lake.of(warehouse)
    if _current_plan(lake) is None:
        return f"no partition plan yet in {warehouse}: nothing to process (the partition DAG makes the first)"
    last = _last_processed(lake)
    if last is None:  # the first run has not finished: the job finds out what to do
        return None
    landed = [t for t in (_newest_t(lake, tables.OBJECTS), _newest_t(lake, tables.EVENTS)) if t is not None]
    newest = max(landed, default=None)
    if newest is not None and newest > last:
        return None
    return (f"no timestamp landed after the last processed one (t = {last}; newest landed "
            f"t = {'none' if newest is None else newest}): nothing to process")


def _current_plan(lake: Lake) -> PlanInfo | None:
    """The current plan; ``None`` while the warehouse has no plan table."""
    try:
        return current_plan(lake)
    except MissingTable:
        return None


def _last_processed(lake: Lake) -> int | None:
    """The newest timestamp in the ledger; ``None`` while the warehouse has no journal."""
    try:
        return last_processed(lake)
    except MissingTable:
        return None


def _newest_t(lake: Lake, name: str) -> int | None:
    """The newest landed timestamp of landing table ``name``, ``None`` when it holds nothing: the
    files' bound (:meth:`~dkmsks.storage.lake.Lake.column_bound`), exact since landing rows are
    never deleted, and otherwise too high, which errs towards running the job."""
    try:
        return lake.column_bound(name, "t")
    except MissingTable:
        return None


@dataclass(frozen=True)
class Summary:
    """A warehouse's pipeline in one look (``dkm status``, the service's ``/v1/status``): the
    current plan, the ledger, the pending timestamps, and the live subscriptions per worker."""

    plan: PlanInfo | None
    last_processed: int | None
    processed: int  # timestamps in the ledger
    pending: list[int]
    live: int | None  # live subscriptions (None before the first plan)
    result_rows: int | None
    worker_subscriptions: list[int]
    worker_loads: list[float]  # C(w) of each worker, normalised by |O_init| as in the plan


def summary(lake: Lake) -> Summary:
    """The :class:`Summary` of ``lake``'s warehouse database, read from the Delta logs (one
    committed state; :class:`MissingTable` before anything was ingested)."""
    import numpy as np
    import pyarrow.compute as pc

    from dkmsks.storage.journal import pending_timestamps
    from dkmsks.storage.lake import where
    from dkmsks.storage.state_io import StateView

    info = current_plan(lake)
    last = last_processed(lake)
    ledger = lake.read(tables.JOURNAL, columns=["t"], predicate=where(record__eq="ledger"))
    pending = pending_timestamps(lake, last) if last is not None else []
    live = rows = None
    count: list[int] = []
    load: list[float] = []
    if info is not None:
        state = StateView.open(lake, fallback_plan=info.plan_version).read(
            columns=["sub_id", "worker", "weight", "object_ids"])
        live = state.num_rows
        rows = int(pc.sum(pc.list_value_length(state.column("object_ids"))).as_py() or 0)
        worker = np.asarray(state.column("worker").to_numpy(), dtype=np.int64)
        weight = np.asarray(state.column("weight").to_numpy(), dtype=np.float64)
        count = np.bincount(worker, minlength=info.workers).tolist()
        load = (np.bincount(worker, weights=weight, minlength=info.workers)
                / max(int(info.meta.get("n_objects", 1)), 1)).tolist()
    return Summary(info, last, len(pc.unique(ledger.column("t"))), pending, live, rows, count, load)
