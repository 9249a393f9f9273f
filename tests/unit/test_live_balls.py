"""The main server's book of live new subscriptions (``new_cost="live"``): columns found by id.

Random registrations, deletions and re-costs are replayed against a plain dict from id to
(x, y, keywords, last costed radius²); after every step each id the dict holds, and ids it
does not, must be found (or not) with the same values, also across compactions of the columns
(a small ``SLACK`` makes them frequent).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import KeywordSets, Subscriptions
from dkmsks.core.partition import MainServer, partition
from dkmsks.core.partition.server import _LiveBalls
from dkmsks.core.stats import ObjectStatistics
from partition_helpers import random_world, space_of

pytestmark = pytest.mark.unit


def _subs(rng: np.random.Generator, ids: list[int]) -> Subscriptions:
    kws = [sorted(rng.choice(20, size=int(rng.integers(1, 4)), replace=False).tolist()) for _ in ids]
    n = len(ids)
    return Subscriptions(np.asarray(ids, dtype=np.int64), rng.random(n) * 100, rng.random(n) * 100,
                         KeywordSets.from_lists(kws), np.ones(n, dtype=np.int32), np.zeros(n, dtype=np.int64))


def _check(book: _LiveBalls, model: dict[int, tuple[float, float, tuple[int, ...], float]], absent: list[int]) -> None:
    assert len(book) == len(model)
    held = np.asarray(sorted(model), dtype=np.int64)
    rows = book.find(held)
    assert (rows >= 0).all()
    found = book.subs.take(rows)
    assert found.ids.tolist() == held.tolist()
    for i, sid in enumerate(held.tolist()):
        x, y, kw, r2 = model[sid]
        assert (found.x[i], found.y[i]) == (x, y)
        assert tuple(found.keywords.ids[found.keywords.ptr[i]:found.keywords.ptr[i + 1]].tolist()) == kw
        assert book.costed_r2[rows[i]] == r2
    assert (book.find(np.asarray(absent, dtype=np.int64)) == -1).all()


@pytest.mark.parametrize("slack", [1, 8, 1024])
def test_the_book_finds_what_a_dict_holds(monkeypatch, slack: int) -> None:
    monkeypatch.setattr(_LiveBalls, "SLACK", slack)
    rng = np.random.default_rng(slack)
    book, model = _LiveBalls(), {}
    gone: list[int] = []
    used: set[int] = set()
    compactions = 0
    for _ in range(120):
        # Fresh ids anywhere among the held ones, in no order (ids never come back).
        ids = [int(i) for i in rng.choice(2_000, size=int(rng.integers(0, 12)), replace=False) if int(i) not in used]
        used.update(ids)
        subs = _subs(rng, ids)
        book.add(subs)
        for i, sid in enumerate(ids):
            kw = tuple(subs.keywords.ids[subs.keywords.ptr[i]:subs.keywords.ptr[i + 1]].tolist())
            model[sid] = (float(subs.x[i]), float(subs.y[i]), kw, math.inf)
        if model:
            victims = rng.choice(sorted(model), size=min(len(model), int(rng.integers(0, 10))), replace=False)
            before = len(book.subs)
            book.remove(np.append(victims, [-5, 5_000]).astype(np.int64))  # two never held
            compactions += len(book.subs) < before
            for sid in victims.tolist():
                del model[sid]
                gone.append(sid)
        if model:
            # A re-cost writes the radius² through the rows find gives.
            some = rng.choice(sorted(model), size=min(len(model), 3), replace=False)
            r2 = rng.random(some.shape[0])
            book.costed_r2[book.find(some.astype(np.int64))] = r2
            for sid, r in zip(some.tolist(), r2.tolist(), strict=True):
                model[sid] = (*model[sid][:3], r)
        _check(book, model, gone[-20:] + [-1, 2_001])
    if slack < 1024:
        assert compactions > 0  # the compaction path ran
    else:
        assert len(book.subs) >= len(model) + len(gone)  # nothing compacted: dead rows stay


def test_refresh_refuses_an_id_twice() -> None:
    rng = np.random.default_rng(3)
    objects, subs = random_world(rng, 200, 60, n_kw=6, k_max=3, clustered=True)
    stats = ObjectStatistics.build(objects, 8)
    knn = StaticKnnIndex.build(objects, 8).query(subs, width=3)
    plan = partition("dkm", stats, knn, subs, space_of(objects, subs), m=3, gamma1=20, gamma2=8)
    server = MainServer(plan, stats, None, new_cost="live")
    server.assign(Subscriptions.build([900, 901], [10.0, 20.0], [10.0, 20.0], [[0], [1, 2]], [2, 2], [1, 1]))
    with pytest.raises(ValueError, match="twice"):
        server.refresh([900, 900], [1.0, 1.0])
    assert server.refresh([900, 901], [1.0, 2.0]) == 2  # both balls became finite
