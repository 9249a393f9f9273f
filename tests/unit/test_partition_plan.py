"""Plan invariants for every method and worker count, JSON round trip, determinism, errors."""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pytest

from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import Rect
from dkmsks.core.partition import Method, PartitionPlan, SplitKind, partition
from dkmsks.core.stats import ObjectStatistics
from partition_helpers import BruteKnn, BruteStats, ball_box, radius2_of, random_world, space_of

pytestmark = pytest.mark.unit

METHODS = ["kop", "sop", "dkm"]


@lru_cache(maxsize=2)
def world(seed: int = 5):
    rng = np.random.default_rng(seed)
    objects, subs = random_world(rng, 400, 160, n_kw=10, k_max=5, clustered=True)
    stats = ObjectStatistics.build(objects, 10, workers=2)
    knn = StaticKnnIndex.build(objects, 10, workers=2).query(subs, width=5)
    return objects, subs, stats, knn, space_of(objects, subs)


def make(method: str, m: int, **kw) -> PartitionPlan:
    objects, subs, stats, knn, space = world()
    params = {"theta": 3, "gamma1": 6, "gamma2": 8, **kw}
    return partition(method, stats, knn, subs, space, m=m, **params)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("m", [1, 2, 7, 20])
def test_plan_invariants(method: str, m: int) -> None:
    objects, subs, _, knn, space = world()
    plan = make(method, m)
    brute = BruteStats(objects)
    n = len(subs)
    # Every subscription exactly once, in input order, on a valid worker.
    assert np.array_equal(plan.sub_ids, subs.ids)
    assert plan.worker.shape == (n,) and plan.worker.min() >= 0 and plan.worker.max() < m
    # Loads are the sums of their subscriptions' costs; they add up to the total cost.
    by_worker = np.bincount(plan.worker, weights=plan.weight, minlength=m).astype(np.int64)
    assert np.array_equal(by_worker, plan.load_weight)
    assert plan.load_weight.sum() == plan.weight.sum()
    assert np.isclose(plan.loads.sum(), plan.costs.sum())
    r2 = radius2_of(knn[1], subs)
    if method == "kop":
        # Eq. 1 by brute force; Algorithm 1 greedy bound.
        expect = [sum(int(brute.keyword_counts([k])[0]) for k in subs.keywords.row(i)) for i in range(n)]
        assert plan.weight.tolist() == expect
        assert np.all(plan.subset == -1) and len(plan.subsets) == 0
        assert plan.load_weight.max() <= plan.weight.sum() / m + plan.weight.max()
        return
    ss = plan.subsets
    assert ss.size.sum() == n
    assert np.array_equal(np.bincount(plan.subset, minlength=len(ss)), ss.size)
    for j in range(len(ss)):
        rows = np.flatnonzero(plan.subset == j)
        boxes = np.array([ball_box(float(subs.x[i]), float(subs.y[i]), r2[i], space) for i in rows])
        R = (boxes[:, 0].min(), boxes[:, 1].min(), boxes[:, 2].max(), boxes[:, 3].max())
        assert tuple(ss.rect[j]) == R  # R = MBR of the subset's balls, clipped
        if method == "sop":
            count = int(brute.count_in_rects([R[0]], [R[1]], [R[2]], [R[3]])[0])
            assert ss.weight[j] == count * rows.shape[0]  # Eq. 3
            assert np.all(plan.weight[rows] == count)  # each pays P(R) (Eq. 2)
            assert np.all(plan.worker[rows] == ss.worker[j])
        else:
            for i in rows:  # Eq. 5 with R of the subset holding s
                kws = subs.keywords.row(i)
                expect = brute.count_keyword_in_rects(kws, *(np.full(len(kws), v) for v in R)).sum()
                assert plan.weight[i] == expect
            assert ss.weight[j] == plan.weight[rows].sum()  # Eq. 6
            # Subsets listed in Algorithm 3 order: cost descending.
        # every subscription lies in its subset's region (clamped, closed)
        reg = ss.region[j]
        assert np.all((subs.x[rows] >= reg[0]) & (subs.x[rows] <= reg[2]))
        assert np.all((subs.y[rows] >= reg[1]) & (subs.y[rows] <= reg[3]))
    if method == "sop":
        # Algorithm 1 over regions: bound with the largest region cost.
        assert plan.load_weight.max() <= ss.weight.sum() / m + ss.weight.max()
        assert np.array_equal(
            np.bincount(ss.worker, weights=ss.weight, minlength=m).astype(np.int64), plan.load_weight)
    else:
        assert np.all(np.diff(ss.weight) <= 0)
        assert plan.load_weight.max() <= plan.weight.sum() / m + plan.weight.max()
        assert set(np.unique(ss.kind).tolist()) <= {SplitKind.ROOT, SplitKind.SPACE, SplitKind.HYBRID}


@pytest.mark.parametrize("method", METHODS)
def test_json_round_trip_and_determinism(method: str) -> None:
    plan = make(method, 7)
    text = plan.to_json()
    back = PartitionPlan.from_json(text)
    assert back == plan
    assert back.to_json() == text
    assert PartitionPlan.from_dict(json.loads(text)) == plan
    again = make(method, 7)
    assert again == plan and again.to_json() == text
    # a different plan is not equal
    assert make(method, 2) != plan


@pytest.mark.parametrize("method", METHODS)
def test_tables_round_trip(method: str) -> None:
    plan = make(method, 3)
    meta, subs, sets = plan.to_tables()
    json.dumps(meta)  # the metadata is JSON-compatible
    assert len({v.shape[0] for v in subs.values()}) == 1
    assert len({v.shape[0] for v in sets.values()}) == 1
    assert PartitionPlan.from_tables(meta, subs, sets) == plan
    # subset rows may come back shuffled (e.g. from a table scan)
    perm = np.random.default_rng(0).permutation(len(plan.subsets))
    assert PartitionPlan.from_tables(meta, subs, {k: v[perm] for k, v in sets.items()}) == plan


def test_plan_is_frozen() -> None:
    plan = make("dkm", 2)
    with pytest.raises(ValueError):
        plan.worker[0] = 1
    with pytest.raises(AttributeError):
        plan.m = 3  # type: ignore[misc]


def test_brute_and_real_statistics_give_the_same_plan() -> None:
    objects, subs, stats, knn, space = world()
    brute_knn = BruteKnn(objects).query(subs, width=5)
    assert np.array_equal(brute_knn[0], knn[0])
    for method in METHODS:
        a = partition(method, stats, knn, subs, space, m=3, theta=3, gamma1=6, gamma2=8)
        b = partition(method, BruteStats(objects), brute_knn, subs, space, m=3, theta=3,
                      gamma1=6, gamma2=8)
        assert a == b


def test_knn_index_or_matrices() -> None:
    objects, subs, stats, knn, space = world()
    index = StaticKnnIndex.build(objects, 10, workers=2)
    for method in ("sop", "dkm"):
        a = partition(method, stats, index, subs, space, m=3, theta=3, gamma1=6)
        b = partition(method, stats, knn, subs, space, m=3, theta=3, gamma1=6)
        c = partition(method, stats, knn[1], subs, space, m=3, theta=3, gamma1=6)
        assert a == b == c


def test_method_from_str() -> None:
    assert Method.from_str("KOP") is Method.KOP
    assert Method.from_str("dkm-sks") is Method.DKM
    assert Method.from_str(Method.SOP) is Method.SOP
    with pytest.raises(ValueError, match="method must be one of kop, sop, dkm, ps2"):
        Method.from_str("grid")


@pytest.mark.parametrize(
    "kw, match",
    [({"m": 0}, "m must be"), ({"theta": 0}, "theta must be"), ({"gamma1": 0}, "gamma1 must be"),
     ({"gamma2": -1}, "gamma2 must be"), ({"m": 2.5}, "m must be")],
)
def test_bad_parameters(kw, match) -> None:
    _, subs, stats, knn, space = world()
    args = {"m": 2, **kw}
    with pytest.raises(ValueError, match=match):
        partition("dkm", stats, knn, subs, space, **args)


def test_bad_inputs() -> None:
    _, subs, stats, knn, space = world()
    with pytest.raises(ValueError, match="needs the kNN"):
        partition("sop", stats, None, subs, space, m=2)
    with pytest.raises(ValueError, match="width"):
        partition("dkm", stats, (knn[0][:, :2], knn[1][:, :2]), subs, space, m=2)
    with pytest.raises(ValueError, match="empty"):
        partition("dkm", stats, knn, subs, Rect(1, 0, 0, 1), m=2)


@pytest.mark.parametrize("method", METHODS)
def test_no_subscriptions(method: str) -> None:
    _, subs, stats, knn, space = world()
    empty = subs.take(np.zeros(0, dtype=np.int64))
    plan = partition(method, stats, (knn[0][:0], knn[1][:0]), empty, space, m=3)
    assert len(plan) == 0 and plan.load_weight.tolist() == [0, 0, 0]
    assert PartitionPlan.from_json(plan.to_json()) == plan
