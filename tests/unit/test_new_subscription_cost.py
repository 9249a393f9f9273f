"""New-subscription cost estimates: the paper's (``new_cost="paper"``) and the live-ball one
(``new_cost="live"``) of :class:`~dkmsks.core.partition.MainServer`, and the engine's refresh.

Expected weights are counted by full scans (:class:`partition_helpers.BruteStats`) over boxes
built by :func:`partition_helpers.ball_box`, and expected workers by a plain least-loaded loop;
none of it shares code with the server.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dkmsks.core.config import PartitionConfig
from dkmsks.core.engine import build_engine
from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import Objects, Op, Rect, SubscriptionEvents, Subscriptions, results_equal
from dkmsks.core.oracle import oracle_results
from dkmsks.core.partition import MainServer, partition
from dkmsks.core.protocol import route_insertions
from dkmsks.core.stats import ObjectStatistics
from dkmsks.core.workload import WorkloadSpec, generate_workload
from partition_helpers import BruteStats, ball_box, random_world, space_of

pytestmark = pytest.mark.unit

METHODS = ["kop", "sop", "dkm"]


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(5)
    objects, subs = random_world(rng, 400, 150, n_kw=9, k_max=4, clustered=True)
    space = space_of(objects, subs)
    stats = ObjectStatistics.build(objects, 12, workers=2)
    index = StaticKnnIndex.build(objects, 12, workers=2)
    knn = index.query(subs, width=4)
    new = Subscriptions.build(
        [7000, 7001, 7002, 7003, 7004],
        [50.0, 12.0, 70.0, 33.0, 88.0],
        [50.0, 75.0, 20.0, 41.0, 90.0],
        [[0, 1], [2], [3, 4, 5], [11], [6, 8]],  # 11 never occurs in O_init
        [3, 1, 2, 2, 4],
        [3, 3, 3, 3, 3],
    )
    return objects, subs, space, stats, index, knn, new


def brute_weight(brute: BruteStats, method: str, kws: list[int], box: tuple[float, ...],
                 space: Rect) -> int:
    """The method's cost · |O_init| over a box, by full scans (Eq. 1 / Eq. 2 / Eq. 5)."""
    if method == "kop":
        return int(sum(int(brute.keyword_counts([k])[0]) for k in kws))
    if method == "sop":
        return int(brute.count_in_rects([box[0]], [box[1]], [box[2]], [box[3]])[0])
    return int(sum(int(brute.count_keyword_in_rects([k], [box[0]], [box[1]], [box[2]], [box[3]])[0])
                   for k in kws))


def least_loaded(loads: list[int], weights: list[int]) -> list[int]:
    out = []
    for w in weights:
        j = min(range(len(loads)), key=lambda i: (loads[i], i))
        out.append(j)
        loads[j] += w
    return out


def test_new_cost_must_be_known(world) -> None:
    objects, subs, space, stats, index, knn, new = world
    plan = partition("dkm", stats, knn, subs, space, m=3, gamma1=20, gamma2=8)
    with pytest.raises(ValueError, match="new_cost"):
        MainServer(plan, stats, index, new_cost="guess")
    assert MainServer(plan, stats, index).new_cost == "live"  # the default (dkmsks.core.config)


@pytest.mark.parametrize("method", METHODS)
def test_live_assign_costs_the_whole_space(world, method: str) -> None:
    """A new subscription starts without results: its ball, hence R, is the whole space."""
    objects, subs, space, stats, index, knn, new = world
    plan = partition(method, stats, knn, subs, space, m=4, theta=3, gamma1=20, gamma2=8)
    server = MainServer(plan, stats, None, new_cost="live")  # no kNN needed for "live"
    brute = BruteStats(objects)
    expect_w = [brute_weight(brute, method, new.keywords.row(i).tolist(), space.as_tuple(), space)
                for i in range(len(new))]
    if method == "sop":
        assert expect_w == [len(objects)] * len(new)
    else:  # Eq. 5 over the whole space is Eq. 1
        assert expect_w == [brute_weight(brute, "kop", new.keywords.row(i).tolist(), (), space)
                            for i in range(len(new))]
    loads = plan.load_weight.tolist()
    expect_workers = least_loaded(loads, expect_w)
    assert server.assign(new).tolist() == expect_workers
    assert server.load_weight.tolist() == loads
    workers, weights = server.lookup_weights(new.ids)
    assert workers.tolist() == expect_workers and weights.tolist() == expect_w
    # Step 1b of the protocol reports the same workers and weights without looking them up.
    routed = route_insertions(MainServer(plan, stats, None, new_cost="live"), 1, new)
    assert routed.workers.tolist() == expect_workers and routed.weights.tolist() == expect_w


@pytest.mark.parametrize("method", METHODS)
def test_refresh_reestimates_with_the_current_ball(world, method: str) -> None:
    objects, subs, space, stats, index, knn, new = world
    plan = partition(method, stats, knn, subs, space, m=3, theta=3, gamma1=20, gamma2=8)
    server = MainServer(plan, stats, None, new_cost="live")
    workers = server.assign(new).tolist()
    brute = BruteStats(objects)
    radii2 = [9.0, 400.0, 0.25, math.inf]  # for 7000, 7001, 7002, 7003
    ids = [7002, 7000, 7003, 7001]  # any order; plus ids that are not live new subscriptions
    r2_of = dict(zip([7000, 7001, 7002, 7003], radii2, strict=True))
    n = server.refresh(ids + [int(subs.ids[0]), 123_456], [r2_of[i] for i in ids] + [1.0, 1.0])
    # 7001 reported inf = the radius it was costed with: skipped; KOP never re-estimates
    assert n == (0 if method == "kop" else 3)
    assert server.refresh(ids, [r2_of[i] for i in ids]) == 0  # same radii again: no change
    expect = {}
    for i in range(len(new)):
        sid = int(new.ids[i])
        r2 = r2_of.get(sid, math.inf)  # 7004 was not refreshed: still the whole space
        box = ball_box(float(new.x[i]), float(new.y[i]), r2, space)
        expect[sid] = brute_weight(brute, method, new.keywords.row(i).tolist(), box, space)
    got_w, got_c = server.lookup_weights(new.ids)
    assert got_w.tolist() == workers
    assert got_c.tolist() == [expect[int(s)] for s in new.ids]
    # C(w) = the plan's loads + the current costs of the new subscriptions on each worker
    loads = plan.load_weight.copy()
    for sid, w in zip(new.ids.tolist(), workers, strict=True):
        loads[w] += expect[sid]
    assert server.load_weight.tolist() == loads.tolist()
    # the initial subscription keeps its plan cost
    assert server.lookup_weights(subs.ids[:1])[1].tolist() == plan.weight[:1].tolist()
    # deleting the new subscriptions subtracts their current costs: back to the plan's loads
    server.delete(new.ids)
    assert server.load_weight.tolist() == plan.load_weight.tolist()
    assert server.refresh(new.ids, np.ones(len(new))) == 0


def test_refresh_shrinking_ball_lowers_cost_dkm(world) -> None:
    """A ball that shrinks only ever lowers Eq. 5 (R shrinks, counts are monotone)."""
    objects, subs, space, stats, index, knn, new = world
    plan = partition("dkm", stats, knn, subs, space, m=2, gamma1=20, gamma2=8)
    server = MainServer(plan, stats, None, new_cost="live")
    server.assign(new.take([0]))
    seen = [int(server.lookup_weights(new.ids[:1])[1][0])]
    for r2 in (2500.0, 400.0, 25.0, 1.0, 0.0):
        server.refresh(new.ids[:1], [r2])
        seen.append(int(server.lookup_weights(new.ids[:1])[1][0]))
    assert seen == sorted(seen, reverse=True) and seen[0] > seen[-1]


def test_paper_mode_ignores_refresh(world) -> None:
    objects, subs, space, stats, index, knn, new = world
    plan = partition("dkm", stats, knn, subs, space, m=3, gamma1=20, gamma2=8)
    server = MainServer(plan, stats, index, new_cost="paper")
    server.assign(new)
    before_l, before_c = server.load_weight, server.lookup_weights(new.ids)[1]
    assert server.refresh(new.ids, np.zeros(len(new))) == 0
    assert server.load_weight.tolist() == before_l.tolist()
    assert server.lookup_weights(new.ids)[1].tolist() == before_c.tolist()


def small_workload(seed: int) -> tuple[Objects, SubscriptionEvents]:
    rng = np.random.default_rng(seed)
    n = 900
    centres = rng.uniform(0, 100, size=(3, 2))
    xy = centres[rng.integers(0, 3, n)] + rng.normal(0, 4, size=(n, 2))
    kws = [sorted(set(rng.integers(0, 12, rng.integers(1, 4)).tolist())) for _ in range(n)]
    source = Objects.build(np.arange(n) * 7 + 1, xy[:, 0], xy[:, 1], kws, np.zeros(n))
    spec = WorkloadSpec(o_init=500, subscriptions=120, timestamps=8, objects_per_ts=50,
                        inserts_per_ts=15, deletes_per_ts=10, k_max=5, seed=seed)
    return generate_workload(source, spec)


@pytest.mark.parametrize("method", METHODS)
def test_engine_keeps_live_costs_of_actual_balls(method: str) -> None:
    """After every timestamp, C(w) under "live" = plan cost of each live initial subscription
    + the cost of each live new subscription over the ball it was last costed with: its actual
    ball (from the oracle's result) as of the last time that became finite or fell to half the
    squared radius costed before (``refresh_shrink``); results exact and equal to the paper
    mode's."""
    objects, events = small_workload(11)
    config = PartitionConfig(method=method, workers=3, theta=2, gamma1=10, gamma2=8, grid=8)
    engine, setup = build_engine(config.replace(new_cost="live"), objects, events, threads=2)
    paper, _ = build_engine(config.replace(new_cost="paper"), objects, events, threads=2)
    server, plan = setup.server, setup.plan
    o_init = objects.take(np.flatnonzero(objects.t <= 0))
    brute = BruteStats(o_init)
    space = plan.space
    plan_w = dict(zip(plan.sub_ids.tolist(), plan.weight.tolist(), strict=True))
    ins = events.take(np.flatnonzero((events.op == Op.INSERT) & (events.t > 0)))
    info = {int(ins.ids[i]): (float(ins.x[i]), float(ins.y[i]), ins.keywords.row(i).tolist(),
                              int(ins.k[i])) for i in range(len(ins))}
    assert server.refresh_shrink == 0.5
    costed: dict[int, float] = {}  # squared radius each new subscription was last costed with
    held_back = 0
    for t in range(1, 9):
        list(engine.run(objects, events, until=t))
        list(paper.run(objects, events, until=t))
        res = oracle_results(objects, events, t)
        assert results_equal(engine.results(), res) and results_equal(paper.results(), res)
        where = engine.where(np.array(sorted(res), dtype=np.int64))
        loads = np.zeros(3, dtype=np.int64)
        finite = 0
        for sid, w in zip(sorted(res), where.tolist(), strict=True):
            if sid in plan_w:
                loads[w] += plan_w[sid]
                continue
            x, y, kws, k = info[sid]
            r2 = float(res[sid].d2[k - 1]) if len(res[sid].object_ids) >= k else math.inf
            finite += math.isfinite(r2)
            last = costed.get(sid, math.inf)
            if r2 != last and (last == math.inf or r2 <= 0.5 * last):
                costed[sid] = last = r2
            held_back += r2 != last
            box = ball_box(x, y, last, space)
            loads[w] += brute_weight(brute, method, kws, box, space)
        assert server.load_weight.tolist() == loads.tolist(), f"t={t}"
    assert finite > 0  # the refresh path was exercised (balls of new subscriptions shrank)
    if method != "kop":
        assert held_back > 0  # and some shrank too little to be re-costed yet


@pytest.mark.parametrize("method", ["sop", "dkm"])
def test_refresh_waits_until_the_ball_has_shrunk_to_refresh_shrink(world, method: str) -> None:
    objects, subs, space, stats, index, knn, new = world
    plan = partition(method, stats, knn, subs, space, m=3, theta=3, gamma1=20, gamma2=8)
    brute = BruteStats(objects)
    one = new.take([0])
    sid, kws = int(one.ids[0]), one.keywords.row(0).tolist()

    def weight(r2: float) -> int:
        return brute_weight(brute, method, kws, ball_box(float(one.x[0]), float(one.y[0]), r2, space), space)

    server = MainServer(plan, stats, None, new_cost="live")  # refresh_shrink = 1/2
    server.assign(one)
    # (reported r², re-costed?, r² of the cost it then has)
    for r2, recosted, costed in [(900.0, 1, 900.0), (600.0, 0, 900.0), (451.0, 0, 900.0),
                                 (450.0, 1, 450.0), (300.0, 0, 450.0), (1.0, 1, 1.0), (1.0, 0, 1.0)]:
        assert server.refresh([sid], [r2]) == recosted, r2
        assert server.lookup_weights([sid])[1].tolist() == [weight(costed)], r2
    assert weight(900.0) != weight(1.0)  # the shrinking ball does change the cost here
    every = MainServer(plan, stats, None, new_cost="live", refresh_shrink=1.0)
    every.assign(one)
    for r2 in (900.0, 600.0, 451.0, 450.0):
        assert every.refresh([sid], [r2]) == 1
        assert every.lookup_weights([sid])[1].tolist() == [weight(r2)]
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ValueError, match="refresh_shrink"):
            MainServer(plan, stats, None, new_cost="live", refresh_shrink=bad)


def test_initial_ids_are_found_alike_under_both_kernels(world) -> None:
    """Under numba the main server finds initial ids through a bucket table: the same workers
    and weights as numpy's binary search, for live, deleted, unknown and extreme ids."""
    objects, subs, space, stats, index, knn, new = world
    plan = partition("dkm", stats, knn, subs, space, m=3, gamma1=20, gamma2=8)
    servers = [MainServer(plan, ObjectStatistics.from_arrays(stats.to_arrays(), kernel=k, workers=2), None)
               for k in ("numba", "numpy")]
    rng = np.random.default_rng(5)
    ids = np.concatenate([plan.sub_ids, plan.sub_ids + 1, rng.integers(-10, int(plan.sub_ids.max()) + 10, 500),
                          [np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0]]).astype(np.int64)
    for server in servers:
        server.delete(plan.sub_ids[::7])
    (wa, ca), (wb, cb) = (s.lookup_weights(ids) for s in servers)
    np.testing.assert_array_equal(wa, wb)
    np.testing.assert_array_equal(ca, cb)
    assert (wa[: len(plan.sub_ids)] >= 0).sum() == len(plan.sub_ids) - len(plan.sub_ids[::7])
    assert getattr(servers[0], "_id_table", None) is not None  # the table was searched
    assert getattr(servers[1], "_id_table", None) is None
