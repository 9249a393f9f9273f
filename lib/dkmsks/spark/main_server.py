"""The main server on the driver (docs/design.md §4): routing a run's timestamps, live cost refresh.

The driver of every job plays the paper's main server: it rebuilds
:class:`~dkmsks.core.partition.MainServer` (the plan's ``C(w)`` plus every live subscription's
worker and cost) from the current state, routes each pending timestamp's deletions to the
workers holding them and assigns its insertions with the plan's cost model
(:func:`dkmsks.core.protocol.route_timestamp`, the same rule as the in-memory engine), and after
the workers ran, re-estimates the costs of new subscriptions whose balls shrank
(``new_cost = live``). Events the protocol refuses (a delete of a subscription that is not
live, an insert of one that is) are returned for the quarantine instead of stopping the run.

It also routes the objects (docs/design.md §2.6): :func:`build_router` loads the routing summary
(:class:`~dkmsks.core.routing.ObjectRouter`) with every live subscription's ball, :func:`route`
names the workers each object of the round goes to and brings the summary up to date with the
round's events, :func:`task_payload` cuts the payload of the tasks that host some workers, and
:func:`refresh_weights` hands the summary the balls the workers report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.config import Method, NewCost
from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import Objects, Op, SubscriptionEvents, Subscriptions, Vocabulary
from dkmsks.core.partition import MainServer, PartitionPlan
from dkmsks.core.protocol import ragged_ball_radius2, route_timestamp
from dkmsks.core.routing import NewBalls, ObjectRouter
from dkmsks.cores import usable_cores
from dkmsks.spark.bridge import BatchPayload, KeywordColumn
from dkmsks.storage.driver_data import keyword_sets
from dkmsks.storage.lake import Lake
from dkmsks.storage.plan_cache import oinit_statistics
from dkmsks.storage.plans import PlanInfo, read_subsets
from dkmsks.storage.state_io import StateView


def build_main_server(lake: Lake, info: PlanInfo, vocab: Vocabulary, view: StateView,
                      cache: Path | None = None) -> MainServer:
    """The main server of the current plan with ``C(w)`` of the live subscriptions.

    ``cache``: the folder of :mod:`dkmsks.storage.plan_cache` (None: build from ``O_init``).
    """
    config = info.config
    # With live costs a new subscription is costed over its actual (infinite) ball: no O_init
    # kNN is needed, so the index (and O_init itself) only for the paper's estimate.
    needs_knn = config.method is not Method.KOP and config.new_cost is NewCost.PAPER
    stats, objects = oinit_statistics(lake, config.t0, vocab, cache, need_objects=needs_knn)
    knn_index = None
    if needs_knn and objects is not None:
        knn_index = StaticKnnIndex.build(objects, len(vocab), workers=usable_cores())  # the driver's cores
    state = view.read(columns=["sub_id", "worker", "weight", "subset"])
    subset_cols = read_subsets(lake, info.plan_version, vocab)
    worker = np.asarray(state.column("worker").to_numpy(), dtype=np.int32)
    weight = np.asarray(state.column("weight").to_numpy(), dtype=np.int64)
    meta = dict(info.meta)
    meta["load_weight"] = np.bincount(worker, weights=weight, minlength=info.workers).astype(np.int64).tolist()
    order = np.argsort(np.asarray(state.column("sub_id").to_numpy(), dtype=np.int64), kind="stable")
    plan = PartitionPlan.from_tables(
        meta,
        {"sub_id": np.asarray(state.column("sub_id").to_numpy(), dtype=np.int64)[order], "worker": worker[order],
         "weight": weight[order], "subset": np.asarray(state.column("subset").to_numpy(), dtype=np.int64)[order]},
        subset_cols,
    )
    # Subscriptions restored from the state count as the plan's: their stored (last refreshed)
    # costs stay fixed; those registered from now on are re-estimated as their balls shrink.
    return MainServer(plan, stats, knn_index, new_cost=config.new_cost, ps2_new=config.ps2_new)


def build_router(view: StateView, info: PlanInfo, vocab: Vocabulary) -> ObjectRouter:
    """The routing summary of the current state: every live subscription's ball, from its
    result's k-th distance (docs/design.md §2.6)."""
    state = view.read(columns=["worker", "x", "y", "keywords", "k", "d2"])
    d2 = state.column("d2").combine_chunks()
    radius2 = ragged_ball_radius2(np.asarray(d2.offsets, dtype=np.int64), np.asarray(d2.flatten().to_numpy(),
                                  dtype=np.float64), np.asarray(state.column("k").to_numpy(), dtype=np.int64))
    router = ObjectRouter(info.space, info.workers)
    router.register(np.asarray(state.column("sub_id").to_numpy(), dtype=np.int64),
                    np.asarray(state.column("worker").to_numpy(), dtype=np.int32),
                    np.asarray(state.column("x").to_numpy(), dtype=np.float64),
                    np.asarray(state.column("y").to_numpy(), dtype=np.float64),
                    keyword_sets(state.column("keywords"), vocab), radius2)
    return router


@dataclass
class RoutedBatch:
    """A run's timestamps as routed by the main server, ready to hand to the workers."""

    payload: BatchPayload
    counts: dict[int, tuple[int, int, int]]  # t -> (objects, insertions, deletions) applied
    refused: list[tuple[int, int, str]] = field(default_factory=list)  # (t, sub id, reason)
    #: Which workers each object goes to, ``[objects, m]`` (docs/design.md §2.6); None: all.
    objects_to: np.ndarray | None = None


def route(
    server: MainServer, info: PlanInfo, timestamps: list[int], objects: Objects, events: SubscriptionEvents,
    vocab: Vocabulary, router: ObjectRouter | None = None,
) -> RoutedBatch:
    """Main-server work for the pending timestamps, one timestamp at a time (docs/design.md §1 order),
    by the protocol of :mod:`dkmsks.core.protocol`; refused events are reported, not raised.

    With a ``router``, also which workers each object goes to: routed against the summary as it
    stood before the round, the round's registrations reaching the objects of their timestamp
    on; then the round's deletions and registrations enter the summary, timestamp by
    timestamp (docs/design.md §2.6)."""
    steps = []
    refused: list[tuple[int, int, str]] = []
    counts: dict[int, tuple[int, int, int]] = {}
    for t in timestamps:
        rows = np.flatnonzero(events.t == t)
        dels = rows[events.op[rows] == Op.DELETE]
        step = route_timestamp(server, t, events.ids[dels], events.take(rows).insertions(), refuse=True)
        refused.extend((t, sid, reason) for sid, reason in step.refused)
        counts[t] = (int(np.count_nonzero(objects.t == t)), len(step.insertions.subs), int(step.deletions.ids.shape[0]))
        steps.append(step)
    dels = [s.deletions for s in steps]
    ins = [s.insertions for s in steps]
    ins_subs = Subscriptions.concat([i.subs for i in ins]) if ins else Subscriptions.build([], [], [], [], [], [])
    words = vocab.words
    payload = BatchPayload(
        method=info.method, space=info.space.as_tuple(), timestamps=list(timestamps),
        obj_ids=objects.ids, obj_x=objects.x, obj_y=objects.y, obj_t=objects.t,
        obj_keywords=KeywordColumn.from_sets(objects.keywords, words),
        del_t=_concat([np.full(d.ids.shape[0], d.t, dtype=np.int64) for d in dels], np.int64),
        del_ids=_concat([d.ids for d in dels], np.int64), del_worker=_concat([d.workers for d in dels], np.int32),
        ins_t=ins_subs.t, ins_ids=ins_subs.ids, ins_worker=_concat([i.workers for i in ins], np.int32),
        ins_x=ins_subs.x, ins_y=ins_subs.y, ins_k=ins_subs.k, ins_weight=_concat([i.weights for i in ins], np.int64),
        ins_keywords=KeywordColumn.from_sets(ins_subs.keywords, words),
        grid=info.config.grid,
    )
    objects_to = None
    if router is not None:
        workers = payload.ins_worker
        objects_to = router.route(objects, NewBalls(ins_subs.t, workers, ins_subs.keywords))
        for d, i in zip(dels, ins, strict=True):
            router.forget(d.ids)
            router.register(i.subs.ids, i.workers, i.subs.x, i.subs.y, i.subs.keywords, np.full(len(i.subs), np.inf))
    return RoutedBatch(payload, counts, refused, objects_to)


def task_payload(routed: RoutedBatch, workers: list[int]) -> BatchPayload:
    """The part of a routed round a task hosting ``workers`` needs: the objects routed to any of
    them (all of them without routing), their deletions (and those asked of every worker) and
    their insertions; every timestamp, so that each worker still steps through all of them."""
    p = routed.payload
    hosted = np.asarray(workers, dtype=np.int64)
    if routed.objects_to is None:
        obj = np.arange(p.obj_ids.shape[0])
    else:
        obj = np.flatnonzero(routed.objects_to[:, hosted].any(axis=1))
    dels = np.flatnonzero(np.isin(p.del_worker, hosted) | (p.del_worker < 0))
    ins = np.flatnonzero(np.isin(p.ins_worker, hosted))
    return replace(
        p, obj_ids=p.obj_ids[obj], obj_x=p.obj_x[obj], obj_y=p.obj_y[obj], obj_t=p.obj_t[obj],
        obj_keywords=p.obj_keywords.take(obj),
        del_t=p.del_t[dels], del_ids=p.del_ids[dels], del_worker=p.del_worker[dels],
        ins_t=p.ins_t[ins], ins_ids=p.ins_ids[ins], ins_worker=p.ins_worker[ins], ins_x=p.ins_x[ins],
        ins_y=p.ins_y[ins], ins_k=p.ins_k[ins], ins_weight=p.ins_weight[ins], ins_keywords=p.ins_keywords.take(ins),
    )


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)


def refresh_weights(server: MainServer, records: pa.Table, router: ObjectRouter | None = None) -> pa.Table:
    """Re-estimate the costs of new subscriptions whose ball changed (``new_cost = live``) on
    the main server, and carry the new weights into their ``final`` records; hand the routing
    summary (``router``) every ball the workers report (docs/design.md §2.6)."""
    # KOP's and ps2's costs do not depend on the ball (Eq. 1; counts, docs/design.md §2.5).
    recost = server.new_cost is NewCost.LIVE and server.method not in (Method.KOP, Method.PS2)
    if not (recost or router is not None) or records.num_rows == 0:
        return records
    is_upsert = pc.and_(pc.equal(records.column("record"), "final"), pc.equal(records.column("change"), "upsert"))
    rows = np.flatnonzero(np.asarray(pc.fill_null(is_upsert, False).to_numpy(zero_copy_only=False)))
    if rows.shape[0] == 0:
        return records
    d2 = records.column("d2").combine_chunks().take(pa.array(rows))
    k = np.asarray(pc.fill_null(records.column("k").take(pa.array(rows)), 0).to_numpy(), dtype=np.int64)
    ids = np.asarray(records.column("sub_id").take(pa.array(rows)).to_numpy(), dtype=np.int64)
    radius2 = ragged_ball_radius2(np.asarray(d2.offsets, dtype=np.int64),
                                  np.asarray(d2.flatten().to_numpy(), dtype=np.float64), k)
    if router is not None:
        router.shrink(ids, radius2)
    if not recost:
        return records
    server.refresh(ids, radius2)
    workers, weights = server.lookup_weights(ids)
    column = records.column("weight").combine_chunks()
    weight = np.array(pc.fill_null(column, 0).to_numpy(), dtype=np.int64)
    weight[rows[workers >= 0]] = weights[workers >= 0]
    fresh = pa.array(weight, mask=np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool))
    return records.set_column(records.schema.get_field_index("weight"), "weight", fresh)
