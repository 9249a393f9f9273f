"""Routing the objects (core/routing.py, docs/design.md §2.6): the main server's summary sends
every object to every worker that needs it (its exact test would accept it), whatever the
balls, their shrinking, deletions and registrations within a round; with the routing on, the
in-memory engine equals the oracle for every method and worker count (the driver's rounds:
tests/unit/test_routed_rounds.py)."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from dkmsks.core.config import PartitionConfig
from dkmsks.core.engine import build_engine
from dkmsks.core.model import KeywordSets, Objects, Rect, describe_difference, results_equal
from dkmsks.core.oracle import live_subscriptions, oracle_results
from dkmsks.core.routing import KeyCounts, NewBalls, ObjectRouter, needed_objects
from test_update import adversarial_case

pytestmark = pytest.mark.unit

METHODS = ("kop", "sop", "dkm", "ps2")


# ---------------------------------------------------------------------------- the counts
def test_key_counts_follow_a_plain_counter_through_merges() -> None:
    rng = np.random.default_rng(5)
    counts = KeyCounts(shift=3)
    counts.SIDE_MIN = 64  # merge often
    reference: Counter[int] = Counter()
    for _ in range(200):
        if reference and rng.random() < 0.4:
            pool = np.array(sorted(k for k, c in reference.items() if c > 0), dtype=np.int64)
            keys = rng.choice(pool, int(rng.integers(1, min(40, pool.shape[0]) + 1)), replace=False)
            counts.add(keys, -1)
            reference.subtract(keys.tolist())
        else:
            keys = rng.integers(0, 2_000, int(rng.integers(1, 80)), dtype=np.int64)
            counts.add(keys, +1)
            reference.update(keys.tolist())
        assert len(counts) == sum(1 for c in reference.values() if c > 0)
    prefixes = np.arange(0, 2_000 >> 3, dtype=np.int64)
    owner, suffix = counts.lookup(prefixes)
    got = sorted(((int(prefixes[o]) << 3) | int(s)) for o, s in zip(owner, suffix, strict=True))
    assert got == sorted(k for k, c in reference.items() if c > 0)
    # the filter never says "absent" of a present prefix
    assert counts.maybe(np.array(sorted({k >> 3 for k, c in reference.items() if c > 0}), dtype=np.int64)).all()
    with pytest.raises(AssertionError, match="removed more often"):
        counts.add(np.array([10**6], dtype=np.int64), -1)


# ---------------------------------------------------------------------------- the summary alone
def _random_balls(rng: np.random.Generator, n: int, vocab: int) -> tuple:
    x, y = rng.uniform(-10, 110, n), rng.uniform(-5, 55, n)
    kws = KeywordSets.from_lists([sorted(rng.choice(vocab, rng.integers(1, 4), replace=False).tolist())
                                  for _ in range(n)])
    r2 = rng.choice([np.inf, 0.0, 1e-6, 1.0, 25.0, 400.0, 1e8], n)
    return x, y, kws, r2


@pytest.mark.parametrize("seed", range(12))
def test_every_object_reaches_every_worker_that_needs_it(seed: int) -> None:
    """Random balls (infinite, zero, tiny, larger than the space, outside it), shrunk and
    forgotten in turns; objects anywhere, many exactly on a ball's edge. Whatever the pyramid's
    depth and window, every object goes to each worker whose exact test would accept it."""
    rng = np.random.default_rng(seed)
    m, n, vocab = int(rng.choice([1, 5, 20, 100])), 150, 8
    space = Rect(0, 0, 100, 50) if seed % 3 else Rect(5, 5, 5, 5)  # also a degenerate space
    router = ObjectRouter(space, m, levels=int(rng.integers(0, 15)), cells=int(rng.integers(2, 7)))
    x, y, kws, r2 = _random_balls(rng, n, vocab)
    worker = rng.integers(0, m, n)
    ids = rng.permutation(10 * n)[:n].astype(np.int64)
    router.register(ids, worker, x, y, kws, r2)
    live = np.ones(n, dtype=bool)
    for _ in range(3):
        shrunk = rng.choice(n, 40, replace=False)
        r2[shrunk] = np.minimum(r2[shrunk], rng.choice([0.0, 0.25, 4.0, 100.0], 40))
        router.shrink(ids[shrunk], r2[shrunk])
        gone = rng.choice(np.flatnonzero(live), 10, replace=False)
        router.forget(ids[gone])
        live[gone] = False
        _check_routes(rng, router, m, ids, x, y, kws, r2, worker, live, vocab)
    assert len(router) == int(live.sum())


def _check_routes(rng, router, m, ids, x, y, kws, r2, worker, live, vocab) -> None:
    no = 300
    ox, oy = rng.uniform(-20, 120, no), rng.uniform(-10, 60, no)
    edge = rng.choice(np.flatnonzero(live & np.isfinite(r2)), 100)
    angle = rng.uniform(0, 2 * np.pi, 100)
    ox[:100] = x[edge] + np.sqrt(r2[edge]) * np.cos(angle)
    oy[:100] = y[edge] + np.sqrt(r2[edge]) * np.sin(angle)
    okw = KeywordSets.from_lists([sorted(rng.choice(vocab, rng.integers(1, 4), replace=False).tolist())
                                  for _ in range(no)])
    objects = Objects(np.arange(no, dtype=np.int64), ox, oy, okw, np.zeros(no, dtype=np.int64))
    got = router.route(objects)
    # k-th results of a large id: an object at exactly the radius enters (a smaller id wins the tie)
    held = [np.flatnonzero(live & (worker == w)) for w in range(m)]
    need = needed_objects(objects, [(ids[h], x[h], y[h], kws.take(h), r2[h], np.full(h.shape[0], 10**9))
                                    for h in held])
    missed = np.argwhere(need & ~got)
    assert missed.shape[0] == 0, f"objects not sent to workers that need them: {missed[:5].tolist()}"


def test_a_registration_within_a_round_reaches_the_objects_of_its_time_on() -> None:
    space = Rect(0, 0, 10, 10)
    router = ObjectRouter(space, 3)
    router.register([1], [0], [5.0], [5.0], KeywordSets.from_lists([[7]]), [0.01])
    objects = Objects.build(np.arange(6), [1, 1, 1, 9, 9, 9], [1, 1, 1, 9, 9, 9], [[7], [7], [8], [7], [7], [8]],
                            [10, 11, 12, 10, 11, 12])
    new = NewBalls(np.array([11, 12], dtype=np.int64), np.array([2, 1], dtype=np.int32),
                   KeywordSets.from_lists([[7], [8]]))
    got = router.route(objects, new)
    # worker 2's subscription (keyword 7, from t = 11) needs objects 1 and 4; worker 1's
    # (keyword 8, from t = 12) objects 2 and 5; worker 0's small ball none of them.
    assert got.tolist() == [[False, False, False], [False, False, True], [False, True, False],
                            [False, False, False], [False, False, True], [False, True, False]]
    assert not router.route(objects).any()  # the summary itself holds only the small ball


def test_shrinking_tightens_the_summary_and_forgetting_empties_it() -> None:
    router = ObjectRouter(Rect(0, 0, 100, 100), 2)
    router.register([1, 2], [0, 1], [10.0, 90.0], [10.0, 90.0], KeywordSets.from_lists([[3], [3]]),
                    [np.inf, np.inf])
    far = Objects.build([1], [50], [50], [[3]], [1])
    assert router.route(far).tolist() == [[True, True]]
    assert router.shrink([1, 2, 99], [1.0, 1.0, 1.0]) == 2  # id 99 is not in the summary
    assert router.route(far).tolist() == [[False, False]]
    assert router.shrink([1], [1.0]) == 0  # no change of posting
    assert router.forget([1, 2, 99]) == 2 and len(router) == 0 and len(router.counts) == 0


# ---------------------------------------------------------------------------- the engine
@pytest.mark.parametrize(("method", "m"), list(itertools.product(METHODS, [1, 2, 7, 20])))
def test_the_engine_routing_its_objects_equals_the_oracle(method: str, m: int) -> None:
    """Each worker handed only its routed objects: the oracle's results at every timestamp,
    the same objects accepted as under the broadcast, and those are exactly the objects the
    brute force says each worker needs (the minimum the routing is measured against)."""
    objects, events = adversarial_case(60 + m, timestamps=6)
    config = PartitionConfig(method=method, workers=m, grid=4, theta=2, gamma1=3, gamma2=2)
    needed: dict[str, list[list[int]]] = {}
    for mode in ("count", "route"):
        engine, _ = build_engine(config, objects, events, threads=2, routing=mode)
        needed[mode] = []
        for t in range(1, 7):
            before = oracle_results(objects, events, t - 1)
            (metrics,) = engine.run(objects, events, until=t)
            expected = oracle_results(objects, events, t)
            assert results_equal(engine.results(), expected), f"{mode} t={t}: " + describe_difference(
                engine.results(), expected)
            needed[mode].append(metrics.worker_needed.tolist())
            assert np.all(metrics.worker_routed >= metrics.worker_needed)
            if mode == "route":
                assert np.array_equal(metrics.worker_sent, metrics.worker_routed)
            else:
                assert np.all(metrics.worker_sent == metrics.n_objects)
                assert metrics.worker_needed.tolist() == _brute_force_needed(engine, objects, events, before, t, m)
    assert needed["count"] == needed["route"]


def _brute_force_needed(engine, objects, events, before, t, m) -> list[int]:
    """Per worker, the objects of ``t`` one of its subscriptions live at ``t`` accepts against
    its result before ``t`` (the oracle's), by :func:`needed_objects`."""
    subs = live_subscriptions(events, t)
    where = engine.where(subs.ids)
    kd2, kid = np.full(len(subs), np.inf), np.full(len(subs), -1, dtype=np.int64)
    for i, sid in enumerate(subs.ids.tolist()):
        res = before.get(sid) if subs.t[i] < t else None  # registered at t: empty
        if res is not None and len(res.object_ids) >= int(subs.k[i]):
            kd2[i], kid[i] = res.d2[int(subs.k[i]) - 1], res.object_ids[int(subs.k[i]) - 1]
    held = [np.flatnonzero(where == w) for w in range(m)]
    at_t = objects.take(np.flatnonzero(objects.t == t))
    need = needed_objects(at_t, [(subs.ids[h], subs.x[h], subs.y[h], subs.keywords.take(h), kd2[h], kid[h])
                                 for h in held])
    return need.sum(axis=0).tolist()
