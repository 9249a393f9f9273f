"""DkM-SKS (§4): vectorised Algorithm 2 against a one-subset-at-a-time reference, Example 5,
termination, and Algorithm 3 on the resulting subsets."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.model import Objects, Rect, Subscriptions
from dkmsks.core.partition import SplitKind, partition
from partition_helpers import (
    BruteKnn,
    BruteStats,
    radius2_of,
    random_world,
    reference_dkm,
    reference_greedy,
    space_of,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "seed, target, gamma2, clustered",
    [(1, 2, 20, True), (2, 7, 5, True), (3, 25, 8, False), (4, 60, 20, True),
     (5, 10_000, 6, True), (6, 10_000, 0, False), (7, 40, 3, True)],
)
def test_algorithm2_matches_sequential_reference(seed, target, gamma2, clustered) -> None:
    rng = np.random.default_rng(seed)
    objects, subs = random_world(rng, 250, 90, n_kw=6, k_max=4, clustered=clustered)
    stats = BruteStats(objects)
    knn = BruteKnn(objects).query(subs, width=4)
    space = space_of(objects, subs)
    leaves = reference_dkm(stats, radius2_of(knn[1], subs), subs, space, target, gamma2)
    plan = partition("dkm", stats, knn, subs, space, m=1, gamma1=target, gamma2=gamma2)
    ss = plan.subsets
    assert len(ss) == len(leaves)
    for j, leaf in enumerate(leaves):
        rows = np.flatnonzero(plan.subset == j)
        assert rows.tolist() == sorted(leaf["rows"])
        assert ss.weight[j] == leaf["w"]
        assert tuple(ss.rect[j]) == leaf["R"]
        assert tuple(ss.region[j]) == tuple(leaf["region"])
        assert ss.kind[j] == leaf["kind"] and ss.depth[j] == leaf["depth"]
        assert [plan.weight[i] for i in rows] == [leaf["ws"][i] for i in rows]
    assert plan.params["target_reached"] == (len(leaves) >= target)


@pytest.mark.parametrize("m", [2, 3, 7])
def test_algorithm3_on_the_subsets(m: int) -> None:
    rng = np.random.default_rng(11)
    objects, subs = random_world(rng, 200, 70, n_kw=6, k_max=4, clustered=True)
    stats = BruteStats(objects)
    knn = BruteKnn(objects).query(subs, width=4)
    plan = partition("dkm", stats, knn, subs, space_of(objects, subs), m=m, gamma1=4, gamma2=6)
    # Subsets in plan order are already by cost descending (ties: depth, path); inside each,
    # subscriptions by cost descending, ties in input order.
    items = []
    for j in range(len(plan.subsets)):
        rows = np.flatnonzero(plan.subset == j).tolist()
        rows.sort(key=lambda i: (-int(plan.weight[i]), i))
        items += [(i, int(plan.weight[i])) for i in rows]
    expect, loads = reference_greedy(items, m)
    assert plan.worker.tolist() == [expect[i] for i in range(len(subs))]
    assert plan.load_weight.tolist() == loads


def cluster_world(centres, per_cluster_objects, sub_points, k, spread=1.0, space=None):
    rng = np.random.default_rng(0)
    pts = np.concatenate([np.asarray(c) + rng.uniform(-spread, spread, (per_cluster_objects, 2))
                          for c in centres])
    n = pts.shape[0]
    objects = Objects.build(np.arange(n), pts[:, 0], pts[:, 1], [[0]] * n, np.zeros(n))
    sp = np.asarray(sub_points, dtype=np.float64)
    subs = Subscriptions.build(np.arange(sp.shape[0]) + 1000, sp[:, 0], sp[:, 1],
                               [[0]] * sp.shape[0], np.full(sp.shape[0], k), np.zeros(sp.shape[0]))
    space = space or Rect(0, 0, 100, 100)
    return objects, subs, BruteKnn(objects).query(subs, width=k), space


def test_example5a_small_separated_balls_split_space_only() -> None:
    centres = [(10, 10), (90, 10), (10, 90), (90, 90)]
    # Two subscriptions per cluster, interleaved so a cost-greedy grouping mixes clusters.
    # Equal costs at the root, so the hybrid greedy deals them round robin: groups {A, B},
    # {B, C}, {C, D}, {D, A}, each with a large R.
    subs_xy = [(10, 10), (90, 10), (10, 90), (90, 90), (90.5, 10.5), (10.5, 90.5), (90.5, 90.5),
               (10.5, 10.5)]
    objects, subs, knn, space = cluster_world(centres, 6, subs_xy, k=2)
    plan = partition("dkm", BruteStats(objects), knn, subs, space, m=1, gamma1=4, gamma2=20)
    assert len(plan.subsets) == 4
    assert set(plan.subsets.kind.tolist()) == {SplitKind.SPACE}
    # Each subset is one cluster.
    for j in range(4):
        xs = subs.x[plan.subset == j]
        assert np.ptp(xs) < 1.0


def test_example5b_large_overlapping_balls_split_hybrid() -> None:
    # Objects spread over the space; subscriptions near the centre want all of them, so every
    # ball (hence every R) covers the whole space and a space split cannot shrink anything:
    # C_s = C_h, and Algorithm 2 picks Hybrid-Partition unless C_s < C_h.
    rng = np.random.default_rng(3)
    pts = rng.uniform(0, 100, (60, 2))
    objects = Objects.build(np.arange(60), pts[:, 0], pts[:, 1], [[0]] * 60, np.zeros(60))
    sxy = np.array([(45, 45), (55, 45), (45, 55), (55, 55), (48, 47), (52, 47), (47, 52), (53, 53)])
    subs = Subscriptions.build(np.arange(8), sxy[:, 0], sxy[:, 1], [[0]] * 8, np.full(8, 60),
                               np.zeros(8))
    knn = BruteKnn(objects).query(subs, width=60)
    space = Rect(0, 0, 100, 100)
    plan = partition("dkm", BruteStats(objects), knn, subs, space, m=1, gamma1=4, gamma2=20)
    assert len(plan.subsets) == 4
    assert set(plan.subsets.kind.tolist()) == {SplitKind.HYBRID}
    # Hybrid children keep the parent's region (the data space); each holds 2 subscriptions.
    assert np.all(plan.subsets.region == np.array(space.as_tuple()))
    assert plan.subsets.size.tolist() == [2, 2, 2, 2]
    # With |S'| > γ2 the same input must be split space-only.
    plan = partition("dkm", BruteStats(objects), knn, subs, space, m=1, gamma1=4, gamma2=7)
    assert set(plan.subsets.kind.tolist()) == {SplitKind.SPACE}


def point_subs(xy, kw=0):
    xy = np.asarray(xy, dtype=np.float64)
    n = xy.shape[0]
    return Subscriptions.build(np.arange(n), xy[:, 0], xy[:, 1], [[kw]] * n, np.ones(n), np.zeros(n))


@pytest.fixture
def few_objects():
    rng = np.random.default_rng(9)
    pts = rng.uniform(0, 100, (30, 2))
    return Objects.build(np.arange(30), pts[:, 0], pts[:, 1], [[0]] * 30, np.zeros(30))


@pytest.mark.parametrize("gamma2", [0, 20])
def test_terminates_on_co_located_and_single(few_objects, gamma2: int) -> None:
    stats = BruteStats(few_objects)
    space = Rect(0, 0, 100, 100)
    for xy in ([(5, 5)], [(5, 5)] * 50):
        subs = point_subs(xy)
        knn = BruteKnn(few_objects).query(subs)
        plan = partition("dkm", stats, knn, subs, space, m=20, gamma1=100_000, gamma2=gamma2)
        assert len(plan.subsets) == 1 and plan.subsets.kind.tolist() == [SplitKind.ROOT]
        assert plan.params["target_reached"] is False


@pytest.mark.parametrize("gamma2", [0, 20])
def test_unreachable_target_splits_to_leaves(few_objects, gamma2: int) -> None:
    xy = [(5, 5)] * 3 + [(5, 6), (70, 20), (70.001, 20), (30, 80)] + [(99, 99)] * 2
    subs = point_subs(xy)
    knn = BruteKnn(few_objects).query(subs)
    plan = partition("dkm", BruteStats(few_objects), knn, subs, Rect(0, 0, 100, 100), m=20,
                     gamma2=gamma2)
    sizes = sorted(plan.subsets.size.tolist())
    if gamma2 == 0:  # space-only: co-located groups stay together
        assert sizes == [1, 1, 1, 1, 2, 3]
    else:  # hybrid splits may still separate non-co-located subsets; co-located ones stay
        assert sum(sizes) == 9 and max(sizes) <= 3
    for j in range(len(plan.subsets)):
        rows = np.flatnonzero(plan.subset == j)
        assert np.unique(np.stack([subs.x[rows], subs.y[rows]]), axis=1).shape[1] == 1


def test_terminates_on_float_exhaustion(few_objects) -> None:
    a, b = 1.0, float(np.nextafter(1.0, 2.0))
    subs = point_subs([(a, a), (b, b), (a, b)])
    knn = BruteKnn(few_objects).query(subs)
    for g2 in (0, 20):
        plan = partition("dkm", BruteStats(few_objects), knn, subs, Rect(0, 0, 2, 2), m=3, gamma2=g2)
        assert plan.subsets.size.sum() == 3


def test_zero_cost_subscriptions_terminate(few_objects) -> None:
    # Keyword 7 is absent from O_init: every cost is 0, the hybrid greedy puts everything in
    # group 0 (no progress), so space splits must carry on down to singletons.
    subs = point_subs([(10, 10), (20, 30), (60, 60), (61, 61), (90, 5)], kw=7)
    knn = BruteKnn(few_objects).query(subs)
    plan = partition("dkm", BruteStats(few_objects), knn, subs, Rect(0, 0, 100, 100), m=2)
    assert plan.subsets.size.tolist() == [1] * 5
    assert plan.weight.tolist() == [0] * 5
    assert set(plan.subsets.kind.tolist()) == {SplitKind.SPACE}


def test_target_one_keeps_root(few_objects) -> None:
    subs = point_subs([(10, 10), (80, 80)])
    knn = BruteKnn(few_objects).query(subs)
    plan = partition("dkm", BruteStats(few_objects), knn, subs, Rect(0, 0, 100, 100), m=1, gamma1=1)
    assert len(plan.subsets) == 1 and plan.subsets.kind.tolist() == [SplitKind.ROOT]
