"""StaticKnnIndex: exact kNN within O_init against the brute-force oracle (docs/design.md §1)."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import KeywordSets, Objects, Subscriptions
from dkmsks.core.oracle import INITIAL_REGISTRATION, brute_force_knn

pytestmark = pytest.mark.unit

AS_OF = np.iinfo(np.int64).max

#: Tuning knobs never change results; small values force every code path (trees for tiny
#: keywords, no extra neighbours so ties hit the ball-query fallback, many chunks).
CONFIGS = [
    {"workers": 2},
    {"workers": 2, "brute_force_max": 0, "extra": 0},
    {"workers": 3, "brute_force_max": 3, "extra": 1, "chunk_size": 7},
    {"workers": 1, "brute_force_max": 1000},
]


def expected_matrices(objects: Objects, subs: Subscriptions, width: int):
    """The oracle's results (t ignored: initial subscriptions see every object) as matrices."""
    initial = Subscriptions(
        subs.ids, subs.x, subs.y, subs.keywords, subs.k, np.full(len(subs), INITIAL_REGISTRATION)
    )
    res = brute_force_knn(objects, initial, AS_OF)
    ids = np.full((len(subs), width), -1, dtype=np.int64)
    d2 = np.full((len(subs), width), np.inf)
    for i, sid in enumerate(subs.ids.tolist()):
        r = res[sid]
        ids[i, : r.object_ids.size] = r.object_ids
        d2[i, : r.d2.size] = r.d2
    return ids, d2


def assert_exact(got, expected) -> None:
    gi, gd = got
    ei, ed = expected
    assert gi.dtype == np.int64 and gd.dtype == np.float64
    assert gi.shape == ei.shape and gd.shape == ed.shape
    bad = np.flatnonzero((gi != ei).any(axis=1) | (gd != ed).any(axis=1))  # bit-exact d²
    if bad.size:
        r = bad[0]
        raise AssertionError(
            f"{bad.size} rows differ, first {r}: {gi[r]} {gd[r]} != {ei[r]} {ed[r]}"
        )


def clustered(rng: np.random.Generator, n: int, n_keywords: int, n_sites: int) -> Objects:
    """Objects on few sites (many co-located, equal distances), shuffled sparse ids."""
    site_x = rng.integers(-5, 6, n_sites).astype(np.float64) * 0.5
    site_y = rng.integers(-5, 6, n_sites).astype(np.float64) * 0.25
    site = rng.integers(0, n_sites, n)
    # Popular keywords (low ids) are frequent, so both trees and brute force get work.
    p = 1.0 / np.arange(1, n_keywords + 1)
    p /= p.sum()
    kws = [
        rng.choice(n_keywords, size=rng.integers(1, 4), replace=False, p=p).tolist()
        for _ in range(n)
    ]
    ids = rng.choice(10 * n, size=n, replace=False) - 3 * n  # negative ids too
    return Objects.build(ids, site_x[site], site_y[site], kws, rng.integers(0, 5, n))


def subs_at(
    rng: np.random.Generator, objects: Objects, m: int, n_vocab: int, k_max: int = 12
) -> Subscriptions:
    """Subscriptions on object sites and off-site, with random keyword sets (some unseen)."""
    on = rng.integers(0, len(objects), m)
    x = np.where(rng.random(m) < 0.7, objects.x[on], rng.uniform(-3, 3, m))
    y = np.where(rng.random(m) < 0.7, objects.y[on], rng.uniform(-2, 2, m))
    kws = [rng.choice(n_vocab, size=rng.integers(1, 6), replace=False).tolist() for _ in range(m)]
    k = rng.integers(1, k_max + 1, m)
    return Subscriptions.build(np.arange(m) + 1000, x, y, kws, k, np.zeros(m))


@pytest.mark.parametrize("config", CONFIGS)
def test_clustered_objects_with_ties(rng: np.random.Generator, config: dict) -> None:
    n_keywords = 12  # keywords 10, 11 have no objects; 12..14 are unseen ids
    objects = clustered(rng, 1500, 10, 30)
    subs = subs_at(rng, objects, 600, 15)
    index = StaticKnnIndex.build(objects, n_keywords, **config)
    got = index.query(subs)
    assert_exact(got, expected_matrices(objects, subs, int(subs.k.max())))


@pytest.mark.parametrize("config", CONFIGS[:2])
def test_k_larger_than_matches_and_width(rng: np.random.Generator, config: dict) -> None:
    objects = clustered(rng, 200, 40, 12)  # many keywords with very few objects
    subs = subs_at(rng, objects, 300, 45, k_max=30)
    index = StaticKnnIndex.build(objects, 40, **config)
    got = index.query(subs, width=35)
    assert got[0].shape == (300, 35)
    assert_exact(got, expected_matrices(objects, subs, 35))
    with pytest.raises(ValueError):
        index.query(subs, width=29)


def test_many_colocated_points_break_ties_by_id() -> None:
    # 60 objects at one point with shuffled ids, 5 more slightly farther: the k nearest are
    # the k smallest ids at distance 0, whatever order the tree visits them in.
    rng = np.random.default_rng(3)
    ids = rng.permutation(np.arange(100, 165))
    x = np.concatenate([np.zeros(60), np.full(5, 1e-9)])
    objects = Objects.build(ids, x, np.zeros(65), [[0]] * 65, np.zeros(65))
    subs = Subscriptions.build(
        [1, 2, 3], [0.0, 0.0, 1e-9], [0.0, 0.0, 0.0], [[0], [0], [0]], [3, 10, 62], [0, 0, 0]
    )
    for config in CONFIGS:
        index = StaticKnnIndex.build(objects, 1, **config)
        got = index.query(subs)
        assert got[0][0, :3].tolist() == sorted(ids[:60].tolist())[:3]
        assert_exact(got, expected_matrices(objects, subs, 62))


def test_object_matching_several_keywords_appears_once() -> None:
    objects = Objects.build(
        [5, 6, 7], [0.0, 1.0, 2.0], [0.0, 0.0, 0.0], [[0, 1, 2], [1], [0, 2]], [0, 0, 0]
    )
    subs = Subscriptions.build([1], [0.0], [0.0], [[0, 1, 2]], [3], [0])
    for config in CONFIGS:
        ids, d2 = StaticKnnIndex.build(objects, 3, **config).query(subs)
        assert ids.tolist() == [[5, 6, 7]]
        assert d2.tolist() == [[0.0, 1.0, 4.0]]


def test_no_matches_unseen_keywords_and_empty_inputs() -> None:
    objects = Objects.build([1, 2], [0.0, 1.0], [0.0, 1.0], [[0], [1]], [0, 0])
    index = StaticKnnIndex.build(objects, 3, workers=2)
    subs = Subscriptions.build(
        [1, 2, 3], [0.0] * 3, [0.0] * 3, [[2], [7, 9], [1, 8]], [2, 1, 2], [0, 0, 0]
    )
    ids, d2 = index.query(subs)
    assert ids.tolist() == [[-1, -1], [-1, -1], [2, -1]]
    assert d2[2, 0] == 2.0 and np.isinf(d2[:2]).all() and np.isinf(d2[2, 1])
    none = subs.take(np.zeros(0, dtype=np.int64))
    assert index.query(none)[0].shape == (0, 0)
    assert index.query(none, width=4)[1].shape == (0, 4)
    no_keywords = KeywordSets(np.zeros(1, np.int64), np.zeros(0, np.int32))
    empty = Objects(
        np.zeros(0, np.int64), np.zeros(0), np.zeros(0), no_keywords, np.zeros(0, np.int64)
    )
    ids, d2 = StaticKnnIndex.build(empty, 3, workers=2).query(subs)
    assert (ids == -1).all() and np.isinf(d2).all()
    with pytest.raises(ValueError):
        index.query(Subscriptions.build([1], [0.0], [0.0], [[0]], [0], [0]))


def test_distances_are_bit_identical_to_the_oracle(rng: np.random.Generator) -> None:
    # Coordinates with full mantissas, where a different formula (hypot, tree distances,
    # (a-b)**2 via pow) would differ in the last bits.
    n = 3000
    objects = Objects.build(
        np.arange(n), rng.normal(-90.0, 10.0, n), rng.normal(40.0, 5.0, n),
        [rng.choice(6, size=rng.integers(1, 3), replace=False).tolist() for _ in range(n)],
        np.zeros(n),
    )
    subs = Subscriptions.build(
        np.arange(400), rng.normal(-90.0, 10.0, 400), rng.normal(40.0, 5.0, 400),
        [rng.choice(6, size=rng.integers(1, 4), replace=False).tolist() for _ in range(400)],
        rng.integers(1, 11, 400), np.zeros(400),
    )
    for config in CONFIGS[:2]:
        got = StaticKnnIndex.build(objects, 6, **config).query(subs)
        assert_exact(got, expected_matrices(objects, subs, 10))


@pytest.mark.realdata
def test_real_data_slice_paper_workload(rng: np.random.Generator) -> None:
    from conftest import real_objects

    objects, vocab = real_objects(20_000)
    m = 2500
    # The paper's protocol: a random object's location, 1-5 of its keywords, k in [1, 10].
    src = rng.integers(0, len(objects), m)
    kws = []
    for i in src.tolist():
        own = objects.keywords.row(i)
        size = rng.integers(1, min(5, own.size) + 1)
        kws.append(rng.choice(own, size=size, replace=False).tolist())
    k = rng.integers(1, 11, m)
    subs = Subscriptions.build(np.arange(m), objects.x[src], objects.y[src], kws, k, np.zeros(m))
    expected = expected_matrices(objects, subs, 10)
    for config in CONFIGS[:2]:
        assert_exact(StaticKnnIndex.build(objects, len(vocab), **config).query(subs), expected)


def test_pickle_round_trip(rng: np.random.Generator) -> None:
    # Spark ships the index to executors by pickling.
    import pickle

    objects = clustered(rng, 400, 6, 10)
    subs = subs_at(rng, objects, 200, 8)
    index = pickle.loads(pickle.dumps(StaticKnnIndex.build(objects, 6, brute_force_max=4, workers=2)))
    assert_exact(index.query(subs), expected_matrices(objects, subs, int(subs.k.max())))
