"""In-memory engine: the whole DkM-SKS protocol in one process with ``m`` simulated workers.

The engine plays the main server and the workers of the paper (§3, §4; docs/design.md §4 "System
shape"): after the initial phase each initial subscription sits on the worker chosen by the
partition plan with its exact kNN within ``O_init`` as state. Then, per timestamp ``t``
(docs/design.md §1 order): deletions (each worker drops the ids it holds, the main server updates
``C(w)``), insertions (the main server assigns each new subscription to a worker; it starts
with an empty result), and the new objects, handed to every worker. With a main server that
re-estimates costs as balls shrink (``MainServer(new_cost="live")``, see :class:`Refresher`),
the engine then reports every subscription whose result changed, with its new radius², so the
server's ``C(w)`` follows the actual balls of new subscriptions (``time_refresh``).

Per timestamp it records the paper's metrics (docs/design.md §5): update time split into kNN update /
insertion / deletion, per-worker time and work (pairs tested, docs/design.md §3 fact 4), the load
balance (max − min worker time; max / mean work) and the minimum possible work (pairs whose
object lies in the subscription's ball, equal for every index).

Workers run one after another here, so the simulated kNN-update time of a timestamp is the
*slowest worker's* time (they would run in parallel), and ``wall`` holds the sequential sum.
Insertion and deletion likewise count the main server's part in full and the workers' index
updates by the slowest worker.
The engine never reads a clock itself: pass one in (e.g. ``time.perf_counter``); without one
every time is ``0`` and only the deterministic work counters are meaningful. Nor does it count
the machine's cores: :func:`build_engine` takes its ``threads``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from dkmsks.core.config import PartitionConfig, thread_count
from dkmsks.core.kernel import Probe
from dkmsks.core.model import (
    Float64Array,
    Int64Array,
    Objects,
    Op,
    Rect,
    Results,
    SubscriptionEvents,
    Subscriptions,
)
from dkmsks.core.oracle import INITIAL_REGISTRATION
from dkmsks.core.postings import DEFAULT_BUDGET
from dkmsks.core.protocol import deletions_by_worker, insertions_by_worker, route_deletions, route_insertions
from dkmsks.core.routing import NewBalls, ObjectRouter
from dkmsks.core.update import Worker
from dkmsks.core.worker_index import DEFAULT_GRID

Clock = Callable[[], float]

#: The engine's routing modes (:func:`build_engine`).
ROUTING = ("off", "count", "route")


class Assigner(Protocol):
    """The main server's side of insertions and deletions (docs/design.md §2 "new subscription");
    :class:`dkmsks.core.partition.MainServer` is one.

    ``assign`` returns a worker (``0..m-1``) per new subscription. ``delete`` forgets ids and
    may return the worker each was on (``-1`` when not live); returning ``None`` makes the
    engine ask every worker.
    """

    def assign(self, subs: Subscriptions) -> npt.ArrayLike:
        """The worker (``0..m-1``) of each new subscription."""

    def delete(self, sub_ids: Int64Array) -> npt.ArrayLike | None:
        """Forget ``sub_ids``; the worker of each (``-1`` when not live), or ``None`` when unknown."""


class Refresher(Protocol):
    """An assigner that re-estimates costs when balls shrink (``MainServer(new_cost="live")``).

    After each timestamp the engine calls ``refresh(sub_ids, radius2)`` with every subscription
    whose result changed and its current squared radius (``inf`` while ``|A(s)| < k``), if the
    assigner has a ``refresh`` method and its ``new_cost`` is not ``"paper"``.
    """

    def refresh(self, sub_ids: Int64Array, radius2: Float64Array) -> int:
        """Re-cost the subscriptions whose balls shrank to ``radius2``; how many were re-costed."""


@dataclass
class TimestampMetrics:
    """What one timestamp cost (docs/design.md §5 metrics, §3 fact 4 counters)."""

    t: int
    n_objects: int
    n_inserted: int
    n_deleted: int
    time_delete: float  # main server's part + the slowest worker's index removals
    time_insert: float  # main server's assignment + the slowest worker's index insertions
    time_knn: float  # slowest worker's kNN update (workers are parallel in the real system)
    wall: float  # sequential time of this whole timestamp in the simulation
    worker_time: Float64Array = field(repr=False)
    worker_work: Int64Array = field(repr=False)  # pairs tested per worker
    worker_accepted: Int64Array = field(repr=False)
    worker_updated: Int64Array = field(repr=False)
    worker_subs: Int64Array = field(repr=False)  # subscriptions held after the timestamp
    time_refresh: float = 0.0  # main server re-estimating changed balls ("live" costs only)
    #: Objects handed to each worker: all of them (the paper's broadcast) unless the engine
    #: routes them (``routing="route"``), when only those its summary sends (docs/design.md §2.6).
    worker_sent: Int64Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    #: Objects the routing summary would send each worker (``routing`` on; empty otherwise).
    worker_routed: Int64Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    #: Objects each worker needs: those entering one of its results (the routing's minimum).
    worker_needed: Int64Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)

    @property
    def update_time(self) -> float:
        """The update time: kNN update + insertion + deletion (paper Table 3), plus the main
        server's cost refresh when it is enabled (``0`` under the paper's estimates)."""
        return self.time_knn + self.time_insert + self.time_delete + self.time_refresh

    @property
    def load_balance(self) -> float:
        """Max − min worker finishing time (the paper's load-balance metric)."""
        return float(self.worker_time.max() - self.worker_time.min()) if self.worker_time.size else 0.0

    @property
    def work(self) -> int:
        """The pairs tested by all workers at this timestamp."""
        return int(self.worker_work.sum())

    @property
    def work_imbalance(self) -> float:
        """Max / mean of the per-worker work: the noise-free load balance (fact 4)."""
        mean = float(self.worker_work.mean()) if self.worker_work.size else 0.0
        return float(self.worker_work.max()) / mean if mean > 0 else 1.0

    @property
    def min_work(self) -> int:
        """Pairs whose object lies in the subscription's ball (every index must test them)."""
        return int(self.worker_accepted.sum())

    def as_dict(self) -> dict[str, float | int]:
        """The timestamp's metrics as a flat dict of numbers (for tables and JSON)."""
        return {
            "t": self.t,
            "objects": self.n_objects,
            "inserted": self.n_inserted,
            "deleted": self.n_deleted,
            "update_time": self.update_time,
            "time_knn": self.time_knn,
            "time_insert": self.time_insert,
            "time_delete": self.time_delete,
            "time_refresh": self.time_refresh,
            "load_balance": self.load_balance,
            "work": self.work,
            "work_max": int(self.worker_work.max()) if self.worker_work.size else 0,
            "work_imbalance": self.work_imbalance,
            "min_work": self.min_work,
            "subs_updated": int(self.worker_updated.sum()),
            "wall": self.wall,
            "objects_sent": int(self.worker_sent.sum()),
            "objects_routed": int(self.worker_routed.sum()),
            "objects_needed": int(self.worker_needed.sum()),
        }


def _no_clock() -> float:
    return 0.0


class Engine:
    """``m`` workers of one method plus the main server's bookkeeping (paper §3, §4).

    Parameters
    ----------
    method
        ``"kop"``, ``"sop"``, ``"dkm"`` (docs/design.md §2) or ``"ps2"`` (docs/design.md §2.5).
    space
        Data space fixed at partition time (docs/design.md §1).
    workers
        ``m``.
    assigner
        The main server: places new subscriptions and forgets deleted ones (its ``C(w)``).
    clock
        A monotonic clock in seconds (``time.perf_counter``); ``None`` disables timing.
    grid, budget, kernel, index_options
        Passed to every :class:`~dkmsks.core.update.Worker` (``kernel``: :mod:`dkmsks.core.kernel`).
    router
        The main server's routing summary (:class:`~dkmsks.core.routing.ObjectRouter`, loaded
        with the initial subscriptions), kept current with every timestamp; ``None``: no routing.
    route
        With a ``router``: hand each worker only the objects the summary sends it (what follow
        and catch-up runs do), instead of every object (the paper's broadcast) while counting
        what it would send.
    """

    def __init__(
        self,
        method: str,
        space: Rect,
        workers: int,
        assigner: Assigner,
        *,
        clock: Clock | None = None,
        grid: int = DEFAULT_GRID,
        budget: int = DEFAULT_BUDGET,
        kernel: str | None = None,
        router: ObjectRouter | None = None,
        route: bool = False,
        **index_options: float,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.method = method.lower()
        self.space = space
        self.m = int(workers)
        self.assigner = assigner
        self.clock: Clock = clock or _no_clock
        self.workers = [
            # Index options only: mypy also matches them against ``width`` (an int), hence the ignore.
            Worker(self.method, space, grid=grid, budget=budget, kernel=kernel, **index_options)  # type: ignore[arg-type]
            for _ in range(self.m)
        ]
        self.last_t: int | None = None
        self.history: list[TimestampMetrics] = []
        if route and router is None:
            raise ValueError("route=True needs a router")
        self.router = router
        self.route = bool(route)
        # Registration times up to this one are the initial subscriptions', whose costs are
        # never re-estimated: only rows registered later are reported to the refresh.
        # ``None``: report every changed row (before the initial phase, or once an
        # insertion came with an earlier time than the initial phase's).
        self._initial_t: int | None = None
        self._shared_probe = all(w.index.shared_probe for w in self.workers)
        refresh = getattr(assigner, "refresh", None)
        live = getattr(assigner, "new_cost", "live") != "paper"
        self._refresh: Callable[[Int64Array, Float64Array], object] | None = (
            refresh if callable(refresh) and live else None
        )

    # ------------------------------------------------------------------ initial phase
    def load_initial(
        self,
        subs: Subscriptions,
        knn: tuple[Int64Array, Float64Array],
        assignment: npt.ArrayLike,
        *,
        groups: npt.ArrayLike | None = None,
        t0: int = 0,
    ) -> None:
        """Place the initial subscriptions with their exact kNN within ``O_init`` (paper §3).

        ``assignment[i]`` is the worker of ``subs[i]`` (the partition plan); ``groups[i]`` its
        region subset (SOP) or home leaf (PS²Stream).
        """
        assignment = np.asarray(assignment, dtype=np.int64)
        if assignment.shape[0] != len(subs):
            raise ValueError(f"assignment has {assignment.shape[0]} entries for {len(subs)} subscriptions")
        if len(subs) and (assignment.min() < 0 or assignment.max() >= self.m):
            raise ValueError(f"assignment must name workers 0..{self.m - 1}")
        g = None if groups is None else np.asarray(groups, dtype=np.int64)
        ids, d2 = knn
        for w, worker in enumerate(self.workers):
            rows = np.flatnonzero(assignment == w)
            worker.add(subs.take(rows), (ids[rows], d2[rows]), groups=None if g is None else g[rows])
            worker.index.maintain(worker.state, force=True)
            worker.state.advance(t0)
        self.last_t = t0
        self._initial_t = t0

    # ------------------------------------------------------------------ one timestamp
    def step(
        self, t: int, deletions: npt.ArrayLike, insertions: Subscriptions, objects: Objects
    ) -> TimestampMetrics:
        """Process timestamp ``t``: deletions, insertions, then objects (docs/design.md §1)."""
        if self.last_t is not None and t <= self.last_t:
            raise ValueError(f"timestamp {t} is not after the last processed one ({self.last_t})")
        clock = self.clock
        wall0 = clock()
        dels = np.asarray(deletions, dtype=np.int64)

        # The protocol of docs/design.md §1 (dkmsks.core.protocol). Main-server parts run in sequence;
        # the workers' parts run in parallel in the real system, so (as for the kNN update)
        # the slowest worker's part counts.
        m = self.m
        c0 = clock()
        routed_del = route_deletions(self.assigner, t, dels)
        # Handing each worker its part is the main server's work here.
        del_parts = list(deletions_by_worker(routed_del, m))
        server_del = clock() - c0
        held = 0
        del_wt = np.zeros(m)
        for w, ids in del_parts:
            c0 = clock()
            held += self.workers[w].remove(ids)
            del_wt[w] = clock() - c0
        time_delete = server_del + float(del_wt.max())
        if held != dels.shape[0]:
            raise ValueError(
                f"t={t}: {dels.shape[0] - held} deleted subscription(s) are not live; "
                "the events file must only delete registered subscriptions"
            )

        if len(insertions) and self._initial_t is not None and int(insertions.t.min()) <= self._initial_t:
            self._initial_t = None
        c0 = clock()
        routed_ins = route_insertions(self.assigner, t, insertions)
        # Ordering the insertions by worker is the main server's work here (each worker slices its part).
        by_worker, spans = insertions_by_worker(routed_ins)
        server_ins = clock() - c0
        ins_wt = np.zeros(m)
        for w, lo, hi in spans:
            c0 = clock()
            # A new subscription starts with an empty result (docs/design.md §1).
            self.workers[w].add(by_worker.slice_rows(lo, hi), None)
            ins_wt[w] = clock() - c0
        time_insert = server_ins + float(ins_wt.max())

        wt = np.zeros(m)
        work = np.zeros(m, dtype=np.int64)
        acc = np.zeros(m, dtype=np.int64)
        upd = np.zeros(m, dtype=np.int64)
        changed: list[tuple[Int64Array, Float64Array]] = []
        # Workers built alike with a subscription-independent probe (grid, KOP) share one probe
        # here; each worker of the real system computes it itself, so its time counts for each.
        # The compiled kernel reads it sorted (Worker.shared_probe), sorted once for all.
        routed_to = None
        if self.router is not None:
            # Routed before the timestamp's events enter the summary; its registrations reach
            # the objects of t as infinite balls (docs/design.md §2.6).
            new = NewBalls(np.full(len(routed_ins.subs), t, dtype=np.int64), routed_ins.workers,
                           routed_ins.subs.keywords)
            routed_to = self.router.route(objects, new)
            self.router.forget(routed_del.ids)
            subs = routed_ins.subs
            self.router.register(subs.ids, routed_ins.workers, subs.x, subs.y, subs.keywords,
                                 np.full(len(subs), np.inf))
        sent = np.full(m, len(objects), dtype=np.int64)
        needed = np.zeros(m, dtype=np.int64)
        probe: Probe | None = None
        probe_time = 0.0
        if len(objects) and self._shared_probe and not self.route:
            c0 = clock()
            probe = self.workers[0].shared_probe(objects)
            probe_time = clock() - c0
        shrunk: list[tuple[Int64Array, Float64Array]] = []
        for w, worker in enumerate(self.workers):
            mine = objects
            if self.route and routed_to is not None:
                mine = objects.take(np.flatnonzero(routed_to[:, w]))
                sent[w] = len(mine)
            c0 = clock()
            stats = worker.process(mine, probe)
            wt[w] = clock() - c0 + probe_time
            work[w], acc[w], upd[w] = stats.pairs_tested, stats.pairs_accepted, stats.subs_updated
            needed[w] = stats.objects_accepted
            if not len(mine):
                worker.state.advance(t)
            if self._refresh is not None and stats.updated_rows.shape[0]:
                changed.append(worker.state.balls_after(stats.updated_rows, self._initial_t))
            if self.router is not None and stats.updated_rows.shape[0]:
                shrunk.append(worker.state.balls_after(stats.updated_rows, None))
        if shrunk:  # the balls that shrank, as the workers report them (the final records' radii)
            assert self.router is not None
            self.router.shrink(np.concatenate([s[0] for s in shrunk]), np.concatenate([s[1] for s in shrunk]))
        time_refresh = 0.0
        if self._refresh is not None:
            c0 = clock()
            if changed:
                self._refresh(
                    np.concatenate([c[0] for c in changed]), np.concatenate([c[1] for c in changed])
                )
            time_refresh = clock() - c0
        metrics = TimestampMetrics(
            t=int(t),
            n_objects=len(objects),
            n_inserted=len(insertions),
            n_deleted=int(dels.shape[0]),
            time_delete=time_delete,
            time_insert=time_insert,
            time_knn=float(wt.max()) if m else 0.0,
            wall=clock() - wall0,
            worker_time=wt,
            worker_work=work,
            worker_accepted=acc,
            worker_updated=upd,
            worker_subs=np.array([len(w) for w in self.workers], dtype=np.int64),
            time_refresh=time_refresh,
            worker_sent=sent,
            worker_routed=routed_to.sum(axis=0).astype(np.int64) if routed_to is not None else np.zeros(0, np.int64),
            worker_needed=needed,
        )
        self.last_t = int(t)
        self.history.append(metrics)
        return metrics

    def run(
        self,
        objects: Objects,
        events: SubscriptionEvents,
        *,
        until: int | None = None,
    ) -> Iterator[TimestampMetrics]:
        """Process every timestamp after the last processed one up to ``until`` (default:
        the last timestamp in the inputs), yielding each timestamp's metrics.

        Timestamps with neither objects nor events are skipped (nothing changes).
        """
        start = self.last_t if self.last_t is not None else np.iinfo(np.int64).min
        o_order = np.argsort(objects.t, kind="stable")
        o_t = objects.t[o_order]
        e_order = np.argsort(events.t, kind="stable")
        e_t = events.t[e_order]
        ts = np.union1d(o_t[o_t > start], e_t[e_t > start])
        if until is not None:
            ts = ts[ts <= until]
        for t in ts.tolist():
            oa, ob = np.searchsorted(o_t, [t, t + 1])
            ea, eb = np.searchsorted(e_t, [t, t + 1])
            erows = e_order[ea:eb]
            dels = events.ids[erows[events.op[erows] == Op.DELETE]]
            ins = events.take(erows[events.op[erows] == Op.INSERT]).insertions()
            yield self.step(t, dels, ins, objects.take(o_order[oa:ob]))
        if until is not None and (self.last_t is None or until > self.last_t):
            self.last_t = int(until)

    # ------------------------------------------------------------------ outputs
    def results(self) -> Results:
        """Exact results of every live subscription after the last processed timestamp."""
        out: Results = {}
        for worker in self.workers:
            out.update(worker.results())
        return out

    def where(self, sub_ids: npt.ArrayLike) -> Int64Array:
        """Worker holding each subscription (``-1`` when none does)."""
        q = np.asarray(sub_ids, dtype=np.int64)
        out = np.full(q.shape[0], -1, dtype=np.int64)
        for w, worker in enumerate(self.workers):
            out[worker.state.contains(q)] = w
        return out


def initial_phase(
    objects: Objects, events: SubscriptionEvents, t0: int = 0
) -> tuple[Objects, Subscriptions]:
    """``O_init`` (objects with ``t <= t0``) and the initial subscriptions (docs/design.md §6).

    An initial subscription is one whose last event with ``t <= t0`` is an insertion (within a
    timestamp deletions come first, docs/design.md §1). Its registration time becomes
    :data:`~dkmsks.core.oracle.INITIAL_REGISTRATION`: all of ``O_init`` qualifies for it
    (paper §3, initial phase). Vectorised; the readers have already validated the events.
    """
    o_init = objects.take(np.flatnonzero(objects.t <= t0))
    rows = np.flatnonzero(events.t <= t0)
    # Order each id's events by (t, insertion after deletion); the last one decides.
    is_ins = (events.op[rows] == Op.INSERT).astype(np.int8)
    order = np.lexsort((is_ins, events.t[rows], events.ids[rows]))
    rows = rows[order]
    ids = events.ids[rows]
    last = np.concatenate([ids[1:] != ids[:-1], [True]]) if rows.shape[0] else np.zeros(0, bool)
    keep = rows[last & (events.op[rows] == Op.INSERT)]
    keep = np.sort(keep)  # file order
    e = events.take(keep)
    t = np.full(keep.shape[0], INITIAL_REGISTRATION, dtype=np.int64)
    return o_init, Subscriptions(e.ids, e.x, e.y, e.keywords, e.k, t)


@dataclass
class Setup:
    """What :func:`build_engine` did before the stream (the initial phase, paper §3)."""

    plan: object  # dkmsks.core.partition.PartitionPlan
    server: object  # dkmsks.core.partition.MainServer
    n_objects: int
    n_subscriptions: int
    time_knn_init: float
    time_partition: float
    time_load: float


def build_engine(
    config: PartitionConfig,
    objects: Objects,
    events: SubscriptionEvents,
    *,
    threads: int,
    clock: Clock | None = None,
    budget: int = DEFAULT_BUDGET,
    kernel: str | None = None,
    routing: str = "off",
    **index_options: float,
) -> tuple[Engine, Setup]:
    """The initial phase end to end: ``O_init`` and ``S`` (docs/design.md §6), their exact kNN within
    ``O_init`` (fact 5), ``O_init`` statistics, the partition plan of ``config.method`` (docs/design.md §2)
    (§2.5 for ``ps2``) and its main server (``config.new_cost``: how it estimates new subscriptions,
    see :mod:`dkmsks.core.partition.server`; ``config.ps2_new``: where ``ps2`` sends them), and an
    :class:`Engine` loaded with every initial subscription.

    ``threads`` is how many threads the kNN and the statistics of ``O_init`` may use (at least 1;
    one per usable core is ``dkmsks.cores.usable_cores()``, the caller's to count: the core reads
    nothing of the machine, as it reads no clock but ``clock``).

    ``routing``: ``off``; ``count``, the main server keeps the routing summary of
    docs/design.md §2.6 and each timestamp's metrics count the objects it would send each
    worker, while every worker still gets every object; ``route``, each worker gets only those.

    Returns the engine (ready for :meth:`Engine.run` from ``config.t0 + 1``) and a :class:`Setup`.
    """
    from dkmsks.core.knn_init import StaticKnnIndex
    from dkmsks.core.model import data_space
    from dkmsks.core.partition import MainServer, partition
    from dkmsks.core.stats import ObjectStatistics

    clock_ = clock or _no_clock
    threads = thread_count(threads, "threads")
    method, workers, t0 = config.method.value, config.workers, config.t0
    o_init, subs = initial_phase(objects, events, t0)
    space = data_space(o_init, subs)
    # Vocabulary size: every keyword id seen anywhere (ids beyond O_init's simply count 0).
    n_keywords = 1 + max(
        int(objects.keywords.ids.max()) if objects.keywords.ids.size else -1,
        int(events.keywords.ids.max()) if events.keywords.ids.size else -1,
        0,
    )
    c0 = clock_()
    knn_index = StaticKnnIndex.build(o_init, n_keywords, workers=threads)
    width = max(int(subs.k.max()) if len(subs) else 1, 1)
    knn = knn_index.query(subs, width=width)
    c1 = clock_()
    stats = ObjectStatistics.build(o_init, n_keywords, workers=threads, kernel=kernel)
    plan = partition(config.method, stats, knn, subs, space, objects=o_init, **config.partition_kwargs())
    server = MainServer(plan, stats, knn_index, new_cost=config.new_cost, ps2_new=config.ps2_new)
    c2 = clock_()
    if not np.array_equal(plan.sub_ids, subs.ids):
        raise AssertionError("the partition plan must list the subscriptions in input order")
    if routing not in ROUTING:
        raise ValueError(f"routing must be one of {', '.join(ROUTING)}, got {routing!r}")
    router = None
    if routing != "off":
        router = ObjectRouter(space, workers)
        rows = np.arange(len(subs))
        router.register(subs.ids, plan.worker, subs.x, subs.y, subs.keywords,
                        knn[1][rows, np.asarray(subs.k, dtype=np.int64) - 1] if len(subs) else np.zeros(0))
    engine = Engine(method, space, workers, server, clock=clock, grid=config.grid, budget=budget, kernel=kernel,
                    router=router, route=routing == "route", **index_options)
    # SOP's region subsets and PS²Stream's home leaves are the workers' index parts.
    groups = plan.subset if plan.method.value in ("sop", "ps2") else None
    engine.load_initial(subs, knn, plan.worker, groups=groups, t0=t0)
    c3 = clock_()
    setup = Setup(plan, server, len(o_init), len(subs), c1 - c0, c2 - c1, c3 - c2)
    return engine, setup
