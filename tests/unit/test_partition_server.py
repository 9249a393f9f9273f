"""The main server: Eq. 7 max-overlap search against a brute-force scan, per-method estimates
for new subscriptions, least-loaded assignment, deletion and the C(w) bookkeeping."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import Rect, Subscriptions
from dkmsks.core.partition import MainServer, partition
from dkmsks.core.partition.server import RectIndex
from dkmsks.core.stats import ObjectStatistics
from partition_helpers import BruteKnn, BruteStats, ball_box, random_world, space_of

pytestmark = pytest.mark.unit


def brute_argmax(rects: np.ndarray, q: np.ndarray) -> tuple[int, float]:
    """Scan every rectangle: the largest positive overlap area, the first one on ties."""
    w = np.minimum(rects[:, 2], q[2]) - np.maximum(rects[:, 0], q[0])
    h = np.minimum(rects[:, 3], q[3]) - np.maximum(rects[:, 1], q[1])
    a = np.maximum(w, 0.0) * np.maximum(h, 0.0)
    if a.shape[0] == 0 or a.max() <= 0:
        return -1, 0.0
    # Ties: the smallest rectangle, then the first one.
    ra = (rects[:, 2] - rects[:, 0]) * (rects[:, 3] - rects[:, 1])
    top = np.flatnonzero(a == a.max())
    j = int(top[np.argmin(ra[top])])  # argmin returns the first minimum
    return j, float(a[j])


def random_rects(rng: np.random.Generator, n: int, space: Rect) -> np.ndarray:
    W = space.xmax - space.xmin
    c = rng.uniform(space.xmin, space.xmax, (n, 2))
    size = W * np.exp2(-rng.uniform(0, 14, (n, 2)))  # from the whole space down to tiny
    r = np.stack([c[:, 0] - size[:, 0], c[:, 1] - size[:, 1], c[:, 0] + size[:, 0],
                  c[:, 1] + size[:, 1]], axis=1)
    r[:, [0, 2]] = np.clip(r[:, [0, 2]], space.xmin, space.xmax)
    r[:, [1, 3]] = np.clip(r[:, [1, 3]], space.ymin, space.ymax)
    r[: n // 20] = space.as_tuple()  # some whole-space rectangles
    r[n // 20: n // 10, 2] = r[n // 20: n // 10, 0]  # some degenerate (zero-area) ones
    r[-5:] = r[:5]  # exact duplicates: ties go to the lower index
    r[n // 10: n // 10 + 20] = r[n // 10 + 20: n // 10 + 40]  # duplicates, first one later
    return r


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rect_index_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    space = Rect(-120.0, 20.0, -60.0, 50.0)
    rects = random_rects(rng, 3000, space)
    if seed == 2:
        rects = rects[100:]  # no whole-space rectangles: queries must reach the fine levels
    queries = random_rects(rng, 300, space)
    queries[:3] = rects[200:203]  # a query equal to a rectangle
    idx = RectIndex(rects, space)
    got, area = idx.query(queries)
    for i, q in enumerate(queries):
        b, a = brute_argmax(rects, q)
        assert (got[i], area[i]) == (b, a), i


def test_rect_index_edge_cases() -> None:
    space = Rect(0, 0, 10, 10)
    idx = RectIndex(np.zeros((0, 4)), space)
    assert idx.query([[0, 0, 10, 10]])[0].tolist() == [-1]
    idx = RectIndex([[0, 0, 1, 1], [9, 9, 10, 10]], space)
    # touching only along an edge or a corner is no overlap; a zero-area query finds nothing
    got, _ = idx.query([[1, 1, 2, 2], [5, 5, 5, 5], [0.5, 0.5, 9.5, 9.5]])
    assert got.tolist() == [-1, -1, 0]
    # R_n inside several rectangles: all overlap by area(R_n); the smallest wins, and of two
    # identical ones the first.
    idx = RectIndex([[0, 0, 10, 10], [2, 2, 8, 8], [4, 4, 6, 6], [3, 3, 7, 7], [4, 4, 6, 6]], space)
    got, area = idx.query([[4.5, 4.5, 5.5, 5.5], [1, 1, 9, 9]])
    assert got.tolist() == [2, 0] and area.tolist() == [1.0, 64.0]
    # degenerate data space
    idx = RectIndex([[3, 3, 3, 3]], Rect(3, 3, 3, 3))
    assert idx.query([[3, 3, 3, 3]])[0].tolist() == [-1]


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(21)
    objects, subs = random_world(rng, 500, 200, n_kw=10, k_max=5, clustered=True)
    space = space_of(objects, subs)
    stats = ObjectStatistics.build(objects, 12, workers=2)
    index = StaticKnnIndex.build(objects, 12, workers=2)
    knn = index.query(subs, width=5)
    # new subscriptions: some inside, some outside the space, one with a keyword absent from
    # O_init (infinite ball), one with k larger than its matches (infinite ball)
    new = Subscriptions.build(
        [5000, 5001, 5002, 5003, 5004, 5005],
        [50.0, 10.0, -30.0, 60.0, 40.0, 20.0],
        [50.0, 80.0, 5.0, 40.0, 60.0, 30.0],
        [[0, 1], [2], [3, 4], [11], [5], [9]],
        [3, 1, 5, 2, 500, 4],
        [7, 7, 7, 7, 7, 7],
    )
    return objects, subs, space, stats, index, knn, new


def brute_rn(objects, new, space):
    _, d2 = BruteKnn(objects).query(new, width=int(new.k.max()))
    return [ball_box(float(new.x[i]), float(new.y[i]), float(d2[i, new.k[i] - 1]), space)
            for i in range(len(new))]


@pytest.mark.parametrize("method", ["kop", "sop", "dkm"])
def test_assign_estimates_and_loads(world, method: str) -> None:
    objects, subs, space, stats, index, knn, new = world
    plan = partition(method, stats, knn, subs, space, m=4, theta=3, gamma1=20, gamma2=8)
    server = MainServer(plan, stats, index, new_cost="paper")
    brute = BruteStats(objects)
    rn = brute_rn(objects, new, space)
    assert rn[3] == space.as_tuple() and rn[4] == space.as_tuple()  # infinite balls
    expect_w = []
    for i in range(len(new)):
        kws = new.keywords.row(i)
        if method == "kop":
            expect_w.append(int(brute.keyword_counts(kws).sum()))
        elif method == "sop":
            expect_w.append(int(brute.count_in_rects(*([v] for v in rn[i]))[0]))
        else:
            j, _ = brute_argmax(plan.subsets.rect, np.array(rn[i]))
            R = plan.subsets.rect[j] if j >= 0 else rn[i]
            expect_w.append(int(sum(brute.count_keyword_in_rects([k], *([v] for v in R))[0]
                                    for k in kws)))
    assert server.estimate_weights(new)[0].tolist() == expect_w
    # least-loaded worker, in input order, lowest index on ties
    loads = plan.load_weight.tolist()
    expect_workers = []
    for w in expect_w:
        j = min(range(4), key=lambda i: (loads[i], i))
        expect_workers.append(j)
        loads[j] += w
    assert server.assign(new).tolist() == expect_workers
    assert server.load_weight.tolist() == loads
    assert np.allclose(server.loads, np.array(loads) / len(objects))
    assert len(server) == len(subs) + len(new)
    workers, costs = server.lookup(new.ids)
    assert workers.tolist() == expect_workers
    assert np.allclose(costs * len(objects), expect_w)
    # the estimate of an initial subscription is the plan's
    w0, c0 = server.lookup_weights(subs.ids[:10])
    assert w0.tolist() == plan.worker[:10].tolist() and c0.tolist() == plan.weight[:10].tolist()


def test_dkm_estimate_uses_s_star(world) -> None:
    objects, subs, space, stats, index, knn, new = world
    plan = partition("dkm", stats, knn, subs, space, m=3, gamma1=30, gamma2=8)
    server = MainServer(plan, stats, index, new_cost="paper")
    _, star = server.estimate_weights(new)
    for i, r in enumerate(brute_rn(objects, new, space)):
        assert star[i] == brute_argmax(plan.subsets.rect, np.array(r))[0]
    # a precomputed kNN gives the same estimate
    mats = index.query(new, width=int(new.k.max()))
    assert np.array_equal(server.estimate_weights(new, knn=mats)[0], server.estimate_weights(new)[0])


def test_delete_and_reregister(world) -> None:
    objects, subs, space, stats, index, knn, new = world
    plan = partition("dkm", stats, knn, subs, space, m=3, gamma1=30, gamma2=8)
    server = MainServer(plan, stats, index, new_cost="paper")
    server.assign(new)
    victims = np.concatenate([subs.ids[:50], new.ids[:2]])
    before = server.load_weight
    workers, weights = server.lookup_weights(victims)
    assert server.delete(victims).tolist() == workers.tolist()
    expect = before - np.bincount(workers, weights=weights, minlength=3).astype(np.int64)
    assert server.load_weight.tolist() == expect.tolist()
    assert server.lookup(victims)[0].tolist() == [-1] * len(victims)
    with pytest.raises(KeyError):
        server.delete(victims[:1])
    assert server.delete([victims[0], 999_999], missing="ignore").tolist() == [-1, -1]
    # a deleted id may be registered again
    again = subs.take(np.arange(1))
    w = server.assign(again)
    assert server.lookup(again.ids)[0].tolist() == w.tolist()
    with pytest.raises(ValueError, match="already live"):
        server.assign(again)
    # deleting everything brings every load back to zero
    live = np.concatenate([subs.ids[50:], new.ids[2:], again.ids])
    server.delete(live)
    assert server.load_weight.tolist() == [0, 0, 0] and len(server) == 0


def test_plan_in_any_id_order_gives_the_same_server(world) -> None:
    """A plan in id order lends the server its columns (no copy) and is left unchanged by
    deletions; a plan in another order gives the same answers."""
    objects, subs, space, stats, index, knn, new = world
    plan = partition("dkm", stats, knn, subs, space, m=3, gamma1=30, gamma2=8)
    assert np.all(np.diff(plan.sub_ids) > 0)
    perm = np.random.default_rng(3).permutation(len(subs))
    shuffled = dataclasses.replace(plan, sub_ids=plan.sub_ids[perm], worker=plan.worker[perm],
                                   weight=plan.weight[perm], subset=plan.subset[perm])
    a, b = MainServer(plan, stats, index, new_cost="paper"), MainServer(shuffled, stats, index, new_cost="paper")
    assert np.shares_memory(a._ids, plan.sub_ids) and not np.shares_memory(b._ids, shuffled.sub_ids)  # noqa: SLF001
    for got, want in zip(a.lookup_weights(subs.ids), b.lookup_weights(subs.ids), strict=True):
        assert got.tolist() == want.tolist()
    ids_before, worker_before = plan.sub_ids.copy(), plan.worker.copy()
    assert a.delete(subs.ids[:20]).tolist() == b.delete(subs.ids[:20]).tolist()
    assert a.load_weight.tolist() == b.load_weight.tolist()
    assert np.array_equal(plan.sub_ids, ids_before) and np.array_equal(plan.worker, worker_before)


def test_kop_needs_no_knn_but_others_do(world) -> None:
    objects, subs, space, stats, index, knn, new = world
    kop = MainServer(partition("kop", stats, None, subs, space, m=2), stats, new_cost="paper")
    assert kop.assign(new).shape == (len(new),)
    sop = MainServer(partition("sop", stats, knn, subs, space, m=2), stats, new_cost="paper")
    with pytest.raises(ValueError, match="StaticKnnIndex"):
        sop.assign(new)
    # unless the caller hands over the kNN of the new subscriptions
    assert sop.assign(new, knn=index.query(new, width=500)).shape == (len(new),)


def test_server_from_json_plan_is_the_same(world) -> None:
    objects, subs, space, stats, index, knn, new = world
    plan = partition("dkm", stats, knn, subs, space, m=5, gamma1=30, gamma2=8)
    from dkmsks.core.partition import PartitionPlan

    a = MainServer(plan, stats, index, new_cost="paper")
    b = MainServer(PartitionPlan.from_json(plan.to_json()), stats, index, new_cost="paper")
    assert a.assign(new).tolist() == b.assign(new).tolist()
