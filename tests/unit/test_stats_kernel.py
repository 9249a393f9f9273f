"""The compiled path for small batches of Eq. 4 counts (:mod:`dkmsks.core.stats_kernel`).

Each count is checked against a full scan (``brute_kw_rect`` of ``test_stats``), and the
compiled path against the numpy reference (``kernel="numpy"``) on the same statistics: on grids
with many equal coordinates, rectangles of every kind (closed edges through points, degenerate,
inverted, unbounded, outside), a real-data slice, after a round trip through arrays and pickle.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dkmsks.core import stats_kernel
from dkmsks.core.model import KeywordSets, Objects
from dkmsks.core.stats import _COMPILED_BELOW, ObjectStatistics
from test_stats import brute_kw_rect, membership, random_rects, synthetic

pytestmark = pytest.mark.unit


def _count_calls(monkeypatch, name: str) -> list[int]:  # noqa: ANN001 - pytest's fixture
    """Spy on the compiled kernel ``name``: the length of its first argument at each call."""
    calls: list[int] = []
    real = getattr(stats_kernel, name)

    def counted(first, *rest):  # noqa: ANN001, ANN002, ANN202 - the kernel's own signature
        calls.append(len(first))
        return real(first, *rest)

    monkeypatch.setattr(stats_kernel, name, counted)
    return calls


def _both(stats_arrays: dict, kw, q) -> tuple[np.ndarray, np.ndarray]:
    compiled = ObjectStatistics.from_arrays(stats_arrays, kernel="numba", workers=2)
    reference = ObjectStatistics.from_arrays(stats_arrays, kernel="numpy", workers=2)
    return compiled.count_keyword_in_rects(kw, *q), reference.count_keyword_in_rects(kw, *q)


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 700, 3000])
def test_compiled_counts_equal_full_scans_and_the_numpy_path(rng: np.random.Generator, n: int) -> None:
    assert stats_kernel.HAVE_NUMBA  # numba is pinned: the compiled path is what runs here
    n_keywords = 9  # keyword 8 never occurs
    objects = synthetic(rng, n, 8)
    arrays = ObjectStatistics.build(objects, n_keywords, workers=2).to_arrays()
    q = random_rects(rng, objects, 900)
    kw = rng.integers(-1, n_keywords + 2, 900)  # invalid ids count 0 on both paths
    compiled, reference = _both(arrays, kw, q)
    np.testing.assert_array_equal(compiled, brute_kw_rect(objects, membership(objects, n_keywords), kw, q))
    np.testing.assert_array_equal(compiled, reference)


def test_a_real_data_slice(rng: np.random.Generator) -> None:
    from conftest import real_objects

    objects, vocab = real_objects(20_000)
    arrays = ObjectStatistics.build(objects, len(vocab), workers=2).to_arrays()
    centre = rng.integers(0, len(objects), 500)
    half = 10.0 ** rng.uniform(-4, 1, 500)  # degrees: a street to a continent
    q = (objects.x[centre] - half, objects.y[centre] - half, objects.x[centre] + half, objects.y[centre] + half)
    kw = objects.keywords.ids[objects.keywords.ptr[centre]].astype(np.int64)  # each centre's first keyword
    compiled, reference = _both(arrays, kw, q)
    np.testing.assert_array_equal(compiled, brute_kw_rect(objects, membership(objects, len(vocab)), kw, q))
    np.testing.assert_array_equal(compiled, reference)
    assert (compiled > 0).all()  # the centre itself counts


def test_the_compiled_path_runs_below_its_threshold_only(rng: np.random.Generator, monkeypatch) -> None:
    objects = synthetic(rng, 400, 5)
    stats = ObjectStatistics.build(objects, 5, workers=2)
    calls = _count_calls(monkeypatch, "count_keyword_in_rects")
    expected_of = membership(objects, 5)
    for m in (1, _COMPILED_BELOW - 1, _COMPILED_BELOW):
        q = random_rects(rng, objects, m)
        kw = rng.integers(0, 5, m)
        np.testing.assert_array_equal(stats.count_keyword_in_rects(kw, *q), brute_kw_rect(objects, expected_of, kw, q))
    assert calls == [1, _COMPILED_BELOW - 1]
    # A NaN bound (no rectangle) is left to the numpy path, which counts nothing there.
    q = random_rects(rng, objects, 5)
    q[0][2] = np.nan
    got = stats.count_keyword_in_rects(np.zeros(5, dtype=np.int64), *q)
    assert got[2] == 0 and len(calls) == 2
    numpy_stats = ObjectStatistics.from_arrays(stats.to_arrays(), kernel="numpy", workers=2)
    np.testing.assert_array_equal(got, numpy_stats.count_keyword_in_rects(np.zeros(5, dtype=np.int64), *q))


def test_the_levels_stay_views_of_one_array_through_pickle(rng: np.random.Generator) -> None:
    objects = synthetic(rng, 2000, 6)
    stats = pickle.loads(pickle.dumps(ObjectStatistics.build(objects, 6, workers=2)))
    for matrix in (stats._kw_matrix, stats._space):  # noqa: SLF001
        words, before, _ = matrix.stacked()
        assert all(level._words.base is words and level._before.base is before for level in matrix.levels)  # noqa: SLF001
    q = random_rects(rng, objects, 300)
    kw = rng.integers(0, 6, 300)
    expected = brute_kw_rect(objects, membership(objects, 6), kw, q)
    np.testing.assert_array_equal(stats.count_keyword_in_rects(kw, *q), expected)


def _keyword_world(rng: np.random.Generator, n_keywords: int) -> tuple[Objects, dict, KeywordSets]:
    """600 objects over keywords 0..n_keywords-2 (the last never occurs), their statistics'
    arrays, and 50 keyword sets of 0-4 ids with unknown ones (-1, n_keywords, +1) among them."""
    objects = synthetic(rng, 600, n_keywords - 1)
    arrays = ObjectStatistics.build(objects, n_keywords, workers=2).to_arrays()
    sets = KeywordSets.from_lists(
        [sorted(rng.choice(np.arange(-1, n_keywords + 2), size=rng.integers(0, 5), replace=False).tolist())
         for _ in range(50)])
    return objects, arrays, sets


@pytest.mark.parametrize("n_rows", [1, 40, _COMPILED_BELOW])  # the last one is past the compiled path
def test_keyword_sums_equal_full_scans_and_the_numpy_path(rng: np.random.Generator, n_rows: int) -> None:
    """Per-row sums over each row's own rectangle (the main server's re-costs): keyword sets of
    0-4 ids with unknown ones among them, rows picked out of order and twice, a NaN bound."""
    n_keywords = 7
    objects, arrays, sets = _keyword_world(rng, n_keywords)
    rows = rng.integers(0, 50, n_rows)
    q = random_rects(rng, objects, n_rows)
    if n_rows > 1:
        q[1][0] = np.nan
    member = membership(objects, n_keywords)
    expected = np.zeros(n_rows, dtype=np.int64)
    for i, r in enumerate(rows.tolist()):
        kws = sets.row(r).astype(np.int64)
        box = tuple(np.full(kws.shape[0], b[i]) for b in q)
        expected[i] = brute_kw_rect(objects, member, kws, box).sum()
    compiled = ObjectStatistics.from_arrays(arrays, kernel="numba", workers=2).keyword_sums_in_rects(sets, rows, *q)
    reference = ObjectStatistics.from_arrays(arrays, kernel="numpy", workers=2).keyword_sums_in_rects(sets, rows, *q)
    np.testing.assert_array_equal(compiled, expected)
    np.testing.assert_array_equal(reference, expected)
    assert n_rows == 1 or expected.any()  # not a batch of empty counts


@pytest.mark.parametrize("n_rows", [0, 1, 300])
def test_eq1_sums_equal_full_scans_and_the_numpy_path(rng: np.random.Generator, n_rows: int) -> None:
    """Per-row ``Σ |O_λ|`` (a new subscription's whole-space cost): keyword sets of 0-4 ids
    with unknown ones (-1, 7, 8) among them, rows out of order and repeated."""
    n_keywords = 7
    objects, arrays, sets = _keyword_world(rng, n_keywords)
    rows = rng.integers(0, 50, n_rows)
    member = membership(objects, n_keywords)
    per_keyword = {k: int(member[k].sum()) for k in range(n_keywords)}
    expected = np.array([sum(per_keyword.get(int(k), 0) for k in sets.row(r)) for r in rows.tolist()],
                        dtype=np.int64)
    for kernel in ("numba", "numpy"):
        got = ObjectStatistics.from_arrays(arrays, kernel=kernel, workers=2).keyword_sums(sets, rows)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, expected)
    assert n_rows < 300 or expected.any()


def test_keyword_sums_take_the_compiled_path_below_the_threshold_only(rng: np.random.Generator, monkeypatch) -> None:
    objects = synthetic(rng, 300, 4)
    stats = ObjectStatistics.build(objects, 4, workers=2)
    calls = _count_calls(monkeypatch, "keyword_sums_in_rects")
    sets = KeywordSets.from_lists([[0, 1, 2, 3]] * 4)  # 4 entries per row
    for n_rows in (3, _COMPILED_BELOW // 4 - 1, _COMPILED_BELOW // 4):
        q = random_rects(rng, objects, n_rows)
        stats.keyword_sums_in_rects(sets, np.zeros(n_rows, dtype=np.int64), *q)
    assert calls == [3, _COMPILED_BELOW // 4 - 1]


@pytest.mark.parametrize("kind", ["real-like", "duplicates", "one value", "two clusters"])
def test_bucketed_searches_equal_searchsorted(rng: np.random.Generator, kind: str) -> None:
    """The x and y bounds of the compiled counts go through bucket tables: both sides equal
    ``np.searchsorted`` for queries on data points, between them, beyond both ends and at ±inf."""
    n = 5000
    values = {
        "real-like": rng.normal(-90.0, 15.0, n),
        "duplicates": rng.integers(0, 30, n).astype(np.float64),
        "one value": np.full(n, 2.5),
        "two clusters": np.concatenate([rng.normal(0.0, 1e-9, n // 2), rng.normal(1e6, 1.0, n - n // 2)]),
    }[kind]
    values = np.sort(values)
    starts, origin, scale = stats_kernel.axis_table(values)
    assert starts[0] == 0 and starts[-1] == n and np.all(np.diff(starts) >= 0)
    queries = np.concatenate([
        rng.choice(values, 2000), rng.uniform(values[0] - 1.0, values[-1] + 1.0, 2000),
        np.nextafter(rng.choice(values, 500), np.inf), np.nextafter(rng.choice(values, 500), -np.inf),
        [-np.inf, np.inf, values[0], values[-1], origin, -1e300, 1e300],
    ])
    for right in (False, True):
        got = stats_kernel._bounds_in_buckets(values, starts, origin, scale, queries, right)  # noqa: SLF001
        np.testing.assert_array_equal(got, np.searchsorted(values, queries, side="right" if right else "left"))


def test_bucketed_searches_of_integer_keys_equal_searchsorted(rng: np.random.Generator) -> None:
    """``kw_key`` (keyword · (n + 1) + x-position) is searched through a table too: blocks of
    keys far apart, as in the statistics, and queries on, between and around them."""
    blocks = [k * 1_000_001 + np.sort(rng.choice(1_000_001, size, replace=False))
              for k, size in ((0, 3000), (7, 5), (8, 20000), (900, 1))]
    values = np.concatenate(blocks).astype(np.int64)
    starts, origin, scale = stats_kernel.axis_table(values)
    near = [rng.choice(values, 3000) + d for d in (0, 1, -1)]
    queries = np.concatenate([*near, rng.integers(-5, int(values[-1]) + 5, 3000),
                              [0, int(values[-1]), 2**62]]).astype(np.int64)
    for right in (False, True):
        got = stats_kernel._bounds_in_buckets(values, starts, origin, scale, queries, right)  # noqa: SLF001
        np.testing.assert_array_equal(got, np.searchsorted(values, queries, side="right" if right else "left"))
