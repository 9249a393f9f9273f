"""The compiled merge of accepted pairs (core/kernel/merge.py, ``merge_accepted``) against the numpy
reference merge (core/update.py, ``merge_results``), directly: groups of one pair to hundreds
per row (a catch-up round's probe group gives some rows hundreds per timestamp), ties in
``d²``, objects met twice, objects already in the result and pairs outside the row's ball
(accepted against an older state: they neither land nor count).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dkmsks.core import kernel
from dkmsks.core.update import merge_results

pytestmark = pytest.mark.unit

K = 10
#: Pairs per row: from one to many more than the row's k.
GROUP_SIZES = (1, 2, 5, 16, 17, 40, 300)


def _d2(row: int, oid: int) -> float:
    """A row's distance to an object, from few values so that ties in d² are common."""
    return float((row * 7 + oid * 13) % 31)


def _state(rng: np.random.Generator, n_rows: int) -> SimpleNamespace:
    """The kNN matrices: k in 1..K, each row's result partly or wholly filled, ordered by (d², id)."""
    ids = np.full((n_rows, K), -1, dtype=np.int64)
    d2 = np.full((n_rows, K), np.inf)
    k = rng.integers(1, K + 1, n_rows).astype(np.int32)
    for row in range(n_rows):
        filled = int(rng.integers(0, k[row] + 1))
        oids = rng.choice(400, filled, replace=False)
        entries = sorted((_d2(row, int(o)), int(o)) for o in oids)
        for c, (dist, o) in enumerate(entries):
            ids[row, c], d2[row, c] = o, dist
    return SimpleNamespace(K=K, ids=ids, d2=d2, k=k)


def _accepted(rng: np.random.Generator, state: SimpleNamespace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs for every row, a group size from GROUP_SIZES each; some objects twice, some already
    in the row's result, shuffled, as the lookup leaves them. Every ninth row's objects are all
    in its result already; in the rows after those, all but one, which ranks last."""
    rows, oids, dists = [], [], []
    for row in range(state.ids.shape[0]):
        size = int(rng.choice(GROUP_SIZES))
        drawn = rng.integers(0, 400, size)
        current = state.ids[row][state.ids[row] >= 0]
        d2 = np.array([_d2(row, int(o)) for o in drawn])
        if current.shape[0] and row % 9 in (0, 1):
            drawn = rng.choice(current, max(size, 20))  # a replayed group
            d2 = np.array([_d2(row, int(o)) for o in drawn])
            if row % 9 == 1:  # and one object new to the row, beyond its k-th
                drawn = np.append(drawn, 400 + row)
                d2 = np.append(d2, 100.0)
        elif current.shape[0] and size > 1:
            drawn[: max(size // 5, 1)] = rng.choice(current, max(size // 5, 1))
            d2 = np.array([_d2(row, int(o)) for o in drawn])
        rows.append(np.full(drawn.shape[0], row, dtype=np.int64))
        oids.append(drawn.astype(np.int64))
        dists.append(d2)
    rows_a, oids_a, d2_a = np.concatenate(rows), np.concatenate(oids), np.concatenate(dists)
    order = rng.permutation(rows_a.shape[0])
    return rows_a[order], oids_a[order], d2_a[order]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_compiled_merge_equals_the_reference_merge(seed: int) -> None:
    rng = np.random.default_rng(seed)
    state = _state(rng, 120)
    rows, oid, d2 = _accepted(rng, state)
    sizes = np.bincount(rows)
    assert (sizes == 1).any() and (sizes >= 300).any()

    reference = SimpleNamespace(K=K, ids=state.ids.copy(), d2=state.d2.copy(), k=state.k)
    before = state.ids.copy()
    # The reference merges deduplicated pairs (its caller drops an object met twice), all of
    # them: a pair outside the ball cannot land, which the compiled merge counts on.
    _, first = np.unique(rows * (1 << 32) + oid, return_index=True)
    merge_results(reference, rows[first], oid[first], d2[first])
    # What counts: distinct pairs before the row's k-th (d², id); touched: rows with one of
    # them not in the result already.
    r, o, d = rows[first], oid[first], d2[first]
    kk = state.k[r] - 1
    kid, kd2 = before[r, kk], state.d2[r, kk]
    inside = (kid < 0) | (d < kd2) | ((d == kd2) & (o < kid))
    new = ~(before[r] == o[:, None]).any(axis=1)
    assert inside.any() and (~inside).any()  # both kinds in every workload

    touched, changed, distinct = kernel.merge_accepted(state, rows, oid, d2)

    assert np.array_equal(state.ids, reference.ids)
    assert np.array_equal(state.d2.view(np.int64), reference.d2.view(np.int64))
    assert np.array_equal(touched, np.unique(r[inside & new]))
    assert np.array_equal(changed, (before[touched] != state.ids[touched]).any(axis=1))
    assert distinct == int(inside.sum())


def test_the_exact_test_is_the_order_by_distance_then_id_in_both_kernels() -> None:
    """``enters`` (the exact test every path shares) against Python's tuple order: an object
    enters a full result when ``(d², id)`` comes before the k-th's, and any result that is not
    full (k-th id ``-1``); on arrays (numpy) and on scalars (the compiled form the kernels call)."""
    from dkmsks.core.kernel import common
    from dkmsks.core.knn_state import enters

    values = [0.0, 1.0, 2.0, np.inf]
    cases = [(d2, oid, kd2, kid) for d2 in values[:3] for oid in (3, 5, 7) for kd2 in values for kid in (-1, 5)
             if not (kid < 0 and kd2 != np.inf)]
    expected = np.array([kid < 0 or (d2, oid) < (kd2, kid) for d2, oid, kd2, kid in cases])
    assert expected.any() and not expected.all()
    columns = [np.array(c) for c in zip(*cases, strict=True)]
    assert np.array_equal(enters(*columns), expected)
    compiled = [bool(common._enters(*c)) for c in cases]  # noqa: SLF001 - the kernels' own form
    assert compiled == expected.tolist()
