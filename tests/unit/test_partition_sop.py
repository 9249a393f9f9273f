"""SOP quadtree (§3.2): region count, largest-cost-first splitting, boundary rule, termination."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.model import Objects, Rect, Subscriptions
from dkmsks.core.partition import partition
from partition_helpers import BruteStats, random_world, space_of

pytestmark = pytest.mark.unit


def points_world(xy, k=1, kw=0, space=Rect(0, 0, 100, 100)):
    """One object per subscription location (keyword ``kw``), subscriptions with ``k``."""
    xy = np.asarray(xy, dtype=np.float64)
    n = xy.shape[0]
    objects = Objects.build(np.arange(n), xy[:, 0], xy[:, 1], [[kw]] * n, np.zeros(n))
    subs = Subscriptions.build(np.arange(n) + 100, xy[:, 0], xy[:, 1], [[kw]] * n,
                               np.full(n, k), np.zeros(n))
    d2 = np.zeros((n, 1))  # each subscription's 1-NN is the object on it
    return objects, subs, (np.arange(n)[:, None], d2), space


@pytest.mark.parametrize("m, theta", [(1, 4), (2, 3), (7, 4), (3, 20)])
def test_region_count_reaches_theta_m(rng: np.random.Generator, m: int, theta: int) -> None:
    objects, subs = random_world(rng, 500, 400, clustered=False)
    d2 = np.zeros((len(subs), 4))
    plan = partition("sop", BruteStats(objects), d2, subs, space_of(objects, subs), m=m, theta=theta)
    n = len(plan.subsets)
    # Each split adds at most 3 regions, and splitting stops as soon as n >= θ·m.
    assert theta * m <= n <= theta * m + 2
    assert plan.params["regions"] == n


def test_largest_cost_region_is_split_first() -> None:
    # Root [0,100]²: 10 subscriptions in SW (spread over its four sub-quadrants), one in each
    # other quadrant. Balls have radius 0, so a singleton costs 1·1 and SW costs |O_R|·10.
    sw = [(10, 10), (30, 10), (10, 30), (30, 30), (12, 12), (14, 14), (32, 12), (12, 32),
          (32, 32), (34, 34)]
    xy = sw + [(75, 20), (20, 75), (75, 75)] + [(0, 0), (100, 100)]
    objects, subs, knn, space = points_world(xy)
    # Two corner subscriptions pin the space; they sit in SW and NE.
    plan = partition("sop", BruteStats(objects), knn, subs, space, m=1, theta=7)
    regions = sorted(map(tuple, plan.subsets.region.tolist()))
    expected = sorted([
        (0.0, 0.0, 25.0, 25.0), (25.0, 0.0, 50.0, 25.0), (0.0, 25.0, 25.0, 50.0),
        (25.0, 25.0, 50.0, 50.0),  # SW split into its quadrants
        (50.0, 0.0, 100.0, 50.0), (0.0, 50.0, 50.0, 100.0), (50.0, 50.0, 100.0, 100.0),
    ])
    assert regions == expected


def test_boundary_rule_centre_goes_north_east() -> None:
    # A subscription exactly on the centre of the space belongs to the NE quadrant.
    # θ·m = 3: only the root is split (SW, NE and NW are non-empty).
    objects, subs, knn, space = points_world([(0, 0), (50, 50), (100, 100), (0, 100)])
    plan = partition("sop", BruteStats(objects), knn, subs, space, m=1, theta=3)
    assert len(plan.subsets) == 3
    centre = int(np.flatnonzero(subs.x == 50)[0])
    reg = plan.subsets.region[plan.subset[centre]]
    assert tuple(reg) == (50.0, 50.0, 100.0, 100.0)


def test_stops_when_nothing_can_be_split() -> None:
    # 3 distinct locations, 10 co-located subscriptions each: at most 3 regions whatever θ·m.
    xy = [(10, 10)] * 10 + [(90, 10)] * 10 + [(50, 90)] * 10
    objects, subs, knn, space = points_world(xy)
    space = Rect(0, 0, 100, 100)
    plan = partition("sop", BruteStats(objects), knn, subs, space, m=20, theta=20)
    assert len(plan.subsets) == 3
    assert sorted(plan.subsets.size.tolist()) == [10, 10, 10]
    # One subscription / all co-located: the root is the only region.
    for xy in ([(5, 5)], [(5, 5)] * 7):
        objects, subs, knn, space = points_world(xy)
        plan = partition("sop", BruteStats(objects), knn, subs, space, m=4, theta=4)
        assert len(plan.subsets) == 1 and plan.subsets.depth.tolist() == [0]


def test_float_exhaustion_terminates() -> None:
    # Two locations one ulp apart: the quadtree cannot go on for ever.
    a = 1.0
    b = np.nextafter(1.0, 2.0)
    objects, subs, knn, _ = points_world([(a, a), (b, b)])
    plan = partition("sop", BruteStats(objects), knn, subs, Rect(0, 0, 2, 2), m=2, theta=20)
    assert len(plan.subsets) in (1, 2)
    assert plan.subsets.size.sum() == 2


def test_infinite_ball_gives_whole_space() -> None:
    objects, subs, knn, space = points_world([(10, 10), (90, 90)])
    d2 = np.array([[np.inf], [0.0]])
    plan = partition("sop", BruteStats(objects), d2, subs, space, m=1, theta=1)
    assert tuple(plan.subsets.rect[0]) == space.as_tuple()
    assert plan.weight.tolist() == [2, 2]  # P(whole space) = 2/2 each
