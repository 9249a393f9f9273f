"""ObjectStatistics (paper Eq. 1, 2, 4) against brute-force numpy counts."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.model import KeywordSets, Objects
from dkmsks.core.stats import ObjectStatistics

pytestmark = pytest.mark.unit


# -- independent brute force ----------------------------------------------------------------


def membership(objects: Objects, n_keywords: int) -> np.ndarray:
    """Dense bool matrix [n_keywords, n]: does object j carry keyword i."""
    m = np.zeros((n_keywords, len(objects)), dtype=bool)
    kws = objects.keywords.ids
    keep = kws < n_keywords
    m[kws[keep], objects.keywords.owners()[keep]] = True
    return m


def brute_rect(objects: Objects, q: tuple[np.ndarray, ...]) -> np.ndarray:
    xmin, ymin, xmax, ymax = q
    x, y = objects.x[None, :], objects.y[None, :]
    inside = (x >= xmin[:, None]) & (x <= xmax[:, None])
    inside &= (y >= ymin[:, None]) & (y <= ymax[:, None])
    return inside.sum(axis=1)


def brute_kw_rect(objects: Objects, member: np.ndarray, kw: np.ndarray, q) -> np.ndarray:
    xmin, ymin, xmax, ymax = q
    out = np.zeros(kw.shape[0], dtype=np.int64)
    for i in range(kw.shape[0]):
        if not 0 <= kw[i] < member.shape[0]:
            continue
        inside = (
            member[kw[i]]
            & (objects.x >= xmin[i])
            & (objects.x <= xmax[i])
            & (objects.y >= ymin[i])
            & (objects.y <= ymax[i])
        )
        out[i] = inside.sum()
    return out


# -- data and query generators --------------------------------------------------------------


def synthetic(rng: np.random.Generator, n: int, n_keywords: int) -> Objects:
    """Objects on a coarse integer grid (many exact duplicates), 1-3 keywords each."""
    x = rng.integers(0, 8, n).astype(np.float64)
    y = rng.integers(-3, 5, n).astype(np.float64)
    kws = [
        rng.choice(n_keywords, size=rng.integers(1, 4), replace=False).tolist() for _ in range(n)
    ]
    return Objects.build(rng.permutation(n) * 7 + 3, x, y, kws, np.zeros(n, dtype=np.int64))


def random_rects(rng: np.random.Generator, objects: Objects, m: int):
    """Rectangles of every kind: edges through points, degenerate, inverted, huge, outside."""
    lo = np.array([objects.x.min(), objects.y.min()]) if len(objects) else np.zeros(2)
    hi = np.array([objects.x.max(), objects.y.max()]) if len(objects) else np.ones(2)
    span = np.maximum(hi - lo, 1.0)
    cols = []
    for axis in range(2):
        pts = objects.x if axis == 0 else objects.y
        a = rng.uniform(lo[axis] - 0.2 * span[axis], hi[axis] + 0.2 * span[axis], m)
        b = a + rng.exponential(0.3 * span[axis], m)
        if len(objects):
            # Snap a third of the bounds exactly onto object coordinates (closed edges).
            snap = rng.random(m) < 0.35
            a[snap] = pts[rng.integers(0, len(objects), snap.sum())]
            snap = rng.random(m) < 0.35
            b[snap] = np.maximum(a[snap], pts[rng.integers(0, len(objects), snap.sum())])
        kind = rng.integers(0, 8, m)
        b = np.where(kind == 0, a, b)  # degenerate: a segment or a point
        a, b = np.where(kind == 1, b + 1.0, a), np.where(kind == 1, a, b)  # inverted: empty
        a = np.where(kind == 2, -np.inf, a)
        b = np.where(kind == 2, np.inf, b)  # unbounded along this axis
        cols.append((a, b))
    (xmin, xmax), (ymin, ymax) = cols
    # A few exact "whole data space" rectangles.
    xmin[:3], xmax[:3], ymin[:3], ymax[:3] = lo[0], hi[0], lo[1], hi[1]
    return xmin, ymin, xmax, ymax


# -- tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 700, 2048])
def test_rect_counts_on_duplicated_grid(rng: np.random.Generator, n: int) -> None:
    objects = synthetic(rng, n, 6)
    stats = ObjectStatistics.build(objects, 6, workers=2)
    assert stats.n_objects == n
    q = random_rects(rng, objects, 600)
    np.testing.assert_array_equal(stats.count_in_rects(*q), brute_rect(objects, q))


@pytest.mark.parametrize("n", [1, 64, 500, 3000])
def test_keyword_rect_counts_on_duplicated_grid(rng: np.random.Generator, n: int) -> None:
    n_keywords = 9  # keyword 8 is never used: a keyword with zero objects
    objects = synthetic(rng, n, 8)
    stats = ObjectStatistics.build(objects, n_keywords, workers=2)
    q = random_rects(rng, objects, 700)
    kw = rng.integers(-1, n_keywords + 3, 700)  # includes negative and unseen ids
    expected = brute_kw_rect(objects, membership(objects, n_keywords), kw, q)
    np.testing.assert_array_equal(stats.count_keyword_in_rects(kw, *q), expected)


def test_keyword_counts(rng: np.random.Generator) -> None:
    objects = synthetic(rng, 500, 5)
    stats = ObjectStatistics.build(objects, 7, workers=2)
    kw = np.array([0, 1, 2, 3, 4, 5, 6, 7, 100, -1])
    member = membership(objects, 7)
    expected = np.concatenate([member.sum(axis=1), [0, 0, 0]])
    np.testing.assert_array_equal(stats.keyword_counts(kw), expected)
    assert stats.keyword_counts(3).tolist() == [member[3].sum()]


def test_keyword_ids_beyond_build_vocabulary_are_ignored() -> None:
    # Object keyword 5 is outside the vocabulary handed to build (n_keywords = 3).
    objects = Objects.build(
        [1, 2, 3], [0.0, 1.0, 2.0], [0.0, 1.0, 2.0], [[0, 5], [5], [2]], [0, 0, 0]
    )
    stats = ObjectStatistics.build(objects, 3, workers=2)
    assert stats.keyword_counts([0, 1, 2, 5]).tolist() == [1, 0, 1, 0]
    whole = ([-10.0], [-10.0], [10.0], [10.0])
    assert stats.count_in_rects(*whole).tolist() == [3]
    assert stats.count_keyword_in_rects([5], *whole).tolist() == [0]


def test_broadcasting_and_shapes(rng: np.random.Generator) -> None:
    objects = synthetic(rng, 300, 4)
    stats = ObjectStatistics.build(objects, 4, workers=2)
    q = random_rects(rng, objects, 50)
    one_kw = stats.count_keyword_in_rects(2, *q)
    np.testing.assert_array_equal(one_kw, stats.count_keyword_in_rects(np.full(50, 2), *q))
    many_kw = stats.count_keyword_in_rects(np.arange(4), 0.0, 0.0, 3.0, 2.0)
    assert many_kw.shape == (4,)
    assert stats.count_in_rects(0.0, 0.0, 3.0, 2.0).shape == (1,)
    empty = np.zeros(0)
    assert stats.count_in_rects(empty, empty, empty, empty).shape == (0,)
    no_kw = np.zeros(0, dtype=int)
    assert stats.count_keyword_in_rects(no_kw, empty, empty, empty, empty).shape == (0,)


def test_empty_object_set() -> None:
    no_keywords = KeywordSets(np.zeros(1, np.int64), np.zeros(0, np.int32))
    objects = Objects(
        np.zeros(0, np.int64), np.zeros(0), np.zeros(0), no_keywords, np.zeros(0, np.int64)
    )
    stats = ObjectStatistics.build(objects, 4, workers=2)
    assert stats.n_objects == 0
    assert stats.count_in_rects([0.0], [0.0], [1.0], [1.0]).tolist() == [0]
    assert stats.count_keyword_in_rects([1], [0.0], [0.0], [1.0], [1.0]).tolist() == [0]
    assert stats.keyword_counts([0, 3, 9]).tolist() == [0, 0, 0]


@pytest.mark.realdata
def test_real_data_slice(rng: np.random.Generator) -> None:
    from conftest import real_objects

    objects, vocab = real_objects(20_000)
    n_keywords = len(vocab)
    stats = ObjectStatistics.build(objects, n_keywords, workers=2)
    m = 400
    # Rectangles around real points at several scales (degrees), plus the generic mix.
    centre = rng.integers(0, len(objects), m)
    half = 10.0 ** rng.uniform(-4, 1, m)
    cx, cy = objects.x[centre], objects.y[centre]
    q_local = (cx - half, cy - half, cx + half, cy + half)
    q_mix = random_rects(rng, objects, m)
    q = tuple(np.concatenate([a, b]) for a, b in zip(q_local, q_mix, strict=True))
    np.testing.assert_array_equal(stats.count_in_rects(*q), brute_rect(objects, q))
    # Keywords of the centre object (so counts are mostly non-zero) and random ids.
    own_kw = objects.keywords.ids[objects.keywords.ptr[centre]]
    kw = np.concatenate([own_kw, rng.integers(0, n_keywords + 5, m)])
    expected = brute_kw_rect(objects, membership(objects, n_keywords), kw, q)
    got = stats.count_keyword_in_rects(kw, *q)
    np.testing.assert_array_equal(got, expected)
    assert got.sum() > 0
    member = membership(objects, n_keywords)
    np.testing.assert_array_equal(stats.keyword_counts(np.arange(n_keywords)), member.sum(axis=1))


def test_big_batches_take_the_sorted_search_path(rng: np.random.Generator) -> None:
    # More queries than the threshold above which the queries are sorted before searching.
    objects = synthetic(rng, 1500, 5)
    stats = ObjectStatistics.build(objects, 5, workers=2)
    q = random_rects(rng, objects, 9000)
    np.testing.assert_array_equal(stats.count_in_rects(*q), brute_rect(objects, q))
    kw = rng.integers(0, 6, 9000)
    expected = brute_kw_rect(objects, membership(objects, 5), kw, q)
    np.testing.assert_array_equal(stats.count_keyword_in_rects(kw, *q), expected)


def test_threaded_batches_match_brute_force(rng: np.random.Generator) -> None:
    # Big enough to be split over threads (and sorted before searching) in every call.
    objects = synthetic(rng, 400, 4)
    m = 70_000
    q = random_rects(rng, objects, m)
    kw = rng.integers(0, 5, m)
    member = membership(objects, 4)
    expected = np.concatenate(
        [brute_rect(objects, tuple(c[i : i + 10_000] for c in q)) for i in range(0, m, 10_000)]
    )
    x, y = objects.x[None, :], objects.y[None, :]
    expected_kw = np.zeros(m, dtype=np.int64)
    for i in range(0, m, 10_000):
        s = slice(i, i + 10_000)
        inside = (x >= q[0][s, None]) & (x <= q[2][s, None])
        inside &= (y >= q[1][s, None]) & (y <= q[3][s, None])
        has = np.zeros((kw[s].size, len(objects)), dtype=bool)
        ok = kw[s] < 4
        has[ok] = member[kw[s][ok]]
        expected_kw[s] = (inside & has).sum(axis=1)
    for workers in (2, 3, 1):
        stats = ObjectStatistics.build(objects, 4, workers=workers)
        np.testing.assert_array_equal(stats.count_in_rects(*q), expected)
        np.testing.assert_array_equal(stats.count_keyword_in_rects(kw, *q), expected_kw)


def test_pickle_round_trip(rng: np.random.Generator) -> None:
    # Spark ships the statistics to executors by pickling.
    import pickle

    objects = synthetic(rng, 300, 4)
    stats = pickle.loads(pickle.dumps(ObjectStatistics.build(objects, 4, workers=2)))
    q = random_rects(rng, objects, 200)
    kw = rng.integers(0, 4, 200)
    np.testing.assert_array_equal(stats.count_in_rects(*q), brute_rect(objects, q))
    np.testing.assert_array_equal(
        stats.count_keyword_in_rects(kw, *q), brute_kw_rect(objects, membership(objects, 4), kw, q)
    )


@pytest.mark.parametrize("n", [0, 64, 700])
def test_arrays_round_trip_through_an_npz_file(rng: np.random.Generator, tmp_path, n: int) -> None:
    # A plan's statistics are kept as an .npz (no pickle) so later jobs skip reading O_init.
    objects = synthetic(rng, n, 4) if n else Objects(
        np.zeros(0, np.int64), np.zeros(0), np.zeros(0), KeywordSets(np.zeros(1, np.int64), np.zeros(0, np.int32)),
        np.zeros(0, np.int64))
    np.savez(tmp_path / "stats.npz", **ObjectStatistics.build(objects, 4, workers=2).to_arrays())
    with np.load(tmp_path / "stats.npz", allow_pickle=False) as saved:
        stats = ObjectStatistics.from_arrays(dict(saved), workers=2)
    q = random_rects(rng, objects, 300)
    kw = rng.integers(0, 5, 300)
    np.testing.assert_array_equal(stats.count_in_rects(*q), brute_rect(objects, q))
    np.testing.assert_array_equal(
        stats.count_keyword_in_rects(kw, *q), brute_kw_rect(objects, membership(objects, 4), kw, q))
    np.testing.assert_array_equal(stats.keyword_counts(np.arange(4)), membership(objects, 4).sum(axis=1))


def test_arrays_that_do_not_fit_together_are_refused(rng: np.random.Generator) -> None:
    arrays = ObjectStatistics.build(synthetic(rng, 200, 3), 3, workers=2).to_arrays()
    with pytest.raises(ValueError, match="different sizes"):
        ObjectStatistics.from_arrays({**arrays, "ys": arrays["ys"][:-70]}, workers=2)
    with pytest.raises(ValueError, match="n_bits"):
        ObjectStatistics.from_arrays({**arrays, "kw_n_bits": np.array(3)}, workers=2)
