"""The main server's book of live new subscriptions: growing columns found by id, and the
refresh's compiled steps against their numpy reference.

Random registrations, deletions and re-costs are replayed against a plain dict from id to
(worker, weight, x, y, keywords, last costed radius²); after every step each id the dict holds,
and ids it does not, must be found (or not) with the same values, also across compactions of the
columns (a small ``SLACK`` makes them frequent) and across the columns' growth.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dkmsks.core.kernel import HAVE_NUMBA
from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import KeywordSets, Rect, Subscriptions
from dkmsks.core.partition import MainServer, partition
from dkmsks.core.partition._common import ball_boxes
from dkmsks.core.partition.new_book import (
    NewSubscriptionBook,
    ball_boxes_compiled,
    pick_recosts,
    pick_recosts_numpy,
)
from dkmsks.core.stats import ObjectStatistics
from partition_helpers import random_world, space_of

pytestmark = pytest.mark.unit


def _subs(rng: np.random.Generator, ids: list[int]) -> Subscriptions:
    kws = [sorted(rng.choice(20, size=int(rng.integers(1, 4)), replace=False).tolist()) for _ in ids]
    n = len(ids)
    return Subscriptions(np.asarray(ids, dtype=np.int64), rng.random(n) * 100, rng.random(n) * 100,
                         KeywordSets.from_lists(kws), np.ones(n, dtype=np.int32), np.zeros(n, dtype=np.int64))


Entry = tuple[int, int, float, float, tuple[int, ...], float]


def _check(book: NewSubscriptionBook, model: dict[int, Entry], absent: list[int]) -> None:
    assert len(book) == len(model)
    held = np.asarray(sorted(model), dtype=np.int64)
    rows = book.find(held)
    assert (rows >= 0).all()
    assert book.sub_id[rows].tolist() == held.tolist()
    kw = book.keywords
    for i, sid in enumerate(held.tolist()):
        row = int(rows[i])
        worker, weight, x, y, kws, r2 = model[sid]
        assert (int(book.worker[row]), int(book.weight[row])) == (worker, weight)
        assert (book.x[row], book.y[row]) == (x, y)
        assert tuple(kw.ids[kw.ptr[row]:kw.ptr[row + 1]].tolist()) == kws
        assert book.costed_r2[row] == r2
    assert (book.find(np.asarray(absent, dtype=np.int64)) == -1).all()
    assert book.ids.tolist() == held.tolist()


@pytest.mark.parametrize("slack", [1, 8, 1024])
def test_the_book_finds_what_a_dict_holds(monkeypatch, slack: int) -> None:
    monkeypatch.setattr(NewSubscriptionBook, "SLACK", slack)
    rng = np.random.default_rng(slack)
    book, model = NewSubscriptionBook(), {}
    gone: list[int] = []
    used: set[int] = set()
    compactions = growths = 0
    for _ in range(120):
        # Fresh ids anywhere among the held ones, in no order (ids never come back).
        ids = [int(i) for i in rng.choice(2_000, size=int(rng.integers(0, 12)), replace=False) if int(i) not in used]
        used.update(ids)
        subs = _subs(rng, ids)
        if len(ids) > 1 and rng.random() < 0.5:
            subs = subs.take(np.arange(1, len(ids)))  # keyword sets that do not start at entry 0
            shifted = KeywordSets(subs.keywords.ptr + 3,
                                  np.concatenate([[7, 7, 7], subs.keywords.ids]).astype(np.int32))
            subs = Subscriptions(subs.ids, subs.x, subs.y, shifted, subs.k, subs.t)
            ids = ids[1:]
        workers = rng.integers(0, 5, len(ids)).astype(np.int32)
        weights = rng.integers(0, 10**12, len(ids)).astype(np.int64)
        capacity = book._sub_id.shape[0]
        book.add(subs.ids, workers, weights, subs.x, subs.y, subs.keywords)
        growths += book._sub_id.shape[0] > capacity
        for i, sid in enumerate(ids):
            kw = tuple(subs.keywords.ids[subs.keywords.ptr[i]:subs.keywords.ptr[i + 1]].tolist())
            model[sid] = (int(workers[i]), int(weights[i]), float(subs.x[i]), float(subs.y[i]), kw, math.inf)
        if model:
            victims = rng.choice(sorted(model), size=min(len(model), int(rng.integers(0, 10))), replace=False)
            before = book.n_rows
            book.remove(np.append(victims, [-5, 5_000]).astype(np.int64))  # two never held
            compactions += book.n_rows < before
            for sid in victims.tolist():
                del model[sid]
                gone.append(sid)
        if model:
            # A re-cost writes the radius² and the weight through the rows find gives.
            some = rng.choice(sorted(model), size=min(len(model), 3), replace=False)
            r2 = rng.random(some.shape[0])
            w = rng.integers(0, 100, some.shape[0])
            rows = book.find(some.astype(np.int64))
            book.costed_r2[rows] = r2
            book.weight[rows] = w
            for sid, r, wt in zip(some.tolist(), r2.tolist(), w.tolist(), strict=True):
                model[sid] = (model[sid][0], wt, *model[sid][2:5], r)
        _check(book, model, gone[-20:] + [-1, 2_001])
    assert growths > 2  # the columns grew several times
    if slack < 1024:
        assert compactions > 0  # the compaction path ran
    else:
        assert book.n_rows >= len(model) + len(gone)  # nothing compacted: dead rows stay


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_pick_is_the_numpy_pick(seed: int) -> None:
    assert HAVE_NUMBA  # numba is pinned: the compiled steps are what runs (and is tested)
    rng = np.random.default_rng(seed)
    book = NewSubscriptionBook()
    held = rng.choice(10_000, size=300, replace=False).astype(np.int64)
    subs = _subs(rng, held.tolist())
    book.add(subs.ids, np.zeros(300, dtype=np.int32), np.zeros(300, dtype=np.int64), subs.x, subs.y, subs.keywords)
    book.remove(held[:40])  # dead rows stay in the columns
    # Last costed radii²: never (inf), or some value, with exact ties to the shrink line.
    costed = np.where(rng.random(300) < 0.3, math.inf, rng.random(300) * 4)
    book.costed_r2[:] = costed
    ids = np.concatenate([held[rng.permutation(300)[:200]], rng.integers(10_000, 20_000, 30), [-3, 2**62]])
    rows = book.find(ids)
    last = np.where(rows >= 0, book.costed_r2[np.maximum(rows, 0)], 1.0)
    kinds = rng.integers(0, 6, ids.shape[0])
    r2 = np.select([kinds == 0, kinds == 1, kinds == 2, kinds == 3, kinds == 4],
                   [last * 0.5, last, np.full(ids.shape[0], math.inf), np.full(ids.shape[0], np.nan), last * 0.5000001],
                   rng.random(ids.shape[0]) * 4)
    want = pick_recosts_numpy(book, ids, r2, 0.5)
    got = pick_recosts(book, ids, r2, 0.5)
    assert want[0] is False and bool(got[0]) is False
    assert 20 < want[1].shape[0] < 200  # some picked, some not
    assert got[1].tolist() == want[1].tolist() and got[2].tolist() == want[2].tolist()
    # A repeated id anywhere, even one the book does not hold, is refused alike.
    live, not_held = int(book.ids[7]), int(held[3])  # held[:40] were removed
    for twice in (live, not_held, ids[-1]):
        again = np.append(ids, [twice, twice])  # a live id, one not held, and one ids already holds
        assert pick_recosts_numpy(book, again, np.append(r2, [1.0, 1.0]), 0.5)[0] is True
        assert bool(pick_recosts(book, again, np.append(r2, [1.0, 1.0]), 0.5)[0]) is True


def test_the_compiled_boxes_are_ball_boxes_to_the_bit() -> None:
    assert HAVE_NUMBA  # numba is pinned: the compiled steps are what runs (and is tested)
    rng = np.random.default_rng(11)
    n = 5_000
    space = Rect(-180.0, -90.0, 180.0, 90.0)
    x = rng.uniform(-180, 180, n)
    y = rng.uniform(-90, 90, n)
    r2 = rng.exponential(1.0, n) ** 3
    r2[:50] = math.inf
    r2[50:60] = np.nan
    r2[60:70] = 0.0
    r2[70:80] = -1.0  # a negative radius² (never from a ball): NaN edges on both paths
    r2[80:90] = 1e300
    x[90:100] = 180.0
    with np.errstate(invalid="ignore"):
        want_boxes = ball_boxes(x, y, r2, space)
    for want, got in zip(want_boxes, ball_boxes_compiled(x, y, r2, space), strict=True):
        assert np.array_equal(want.view(np.int64), got.view(np.int64))


def test_refresh_refuses_an_id_twice() -> None:
    rng = np.random.default_rng(3)
    objects, subs = random_world(rng, 200, 60, n_kw=6, k_max=3, clustered=True)
    stats = ObjectStatistics.build(objects, 8, workers=2)
    knn = StaticKnnIndex.build(objects, 8, workers=2).query(subs, width=3)
    plan = partition("dkm", stats, knn, subs, space_of(objects, subs), m=3, gamma1=20, gamma2=8)
    server = MainServer(plan, stats, None, new_cost="live")
    server.assign(Subscriptions.build([900, 901], [10.0, 20.0], [10.0, 20.0], [[0], [1, 2]], [2, 2], [1, 1]))
    with pytest.raises(ValueError, match="twice"):
        server.refresh([900, 900], [1.0, 1.0])
    assert server.refresh([900, 901], [1.0, 2.0]) == 2  # both balls became finite


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 1000])
def test_the_branchless_search_is_searchsorted(n: int) -> None:
    from dkmsks.core.partition.new_book import _lower_bound

    rng = np.random.default_rng(n)
    values = np.sort(rng.choice(10 * n + 10, size=n, replace=False)).astype(np.int64)
    queries = np.concatenate([values, values - 1, values + 1, [-(2**63), 2**63 - 1, -1]]).astype(np.int64)
    got = [_lower_bound(values, q) for q in queries.tolist()]
    assert got == np.searchsorted(values, queries).tolist()
