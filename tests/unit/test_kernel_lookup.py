"""The compiled lookup (kernel.lookup._lookup through lookup_accept / lookup_accept_sorted) against a
plain Python walk of the same postings, on postings built to hit its edges: runs of one key
longer than a fence block and crossing block boundaries, keys before the first and after the
last fence, stale main and delta entries, an empty main part, probes longer than one round
(and not a multiple of the filter's look-ahead), probes long enough that the filter is taken
to be cached (no look-ahead at all), and a key with more entries than the lookup holds
before testing them (KOP's keyword postings are like that)."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core import kernel
from dkmsks.core.knn_state import KnnState
from dkmsks.core.model import KeywordSets, Objects, Subscriptions
from dkmsks.core.postings import Postings


def _state(rng: np.random.Generator, n: int) -> KnnState:
    state = KnnState(width=3)
    k = rng.integers(1, 4, n).astype(np.int32)
    state.add(Subscriptions(np.arange(n, dtype=np.int64) * 7 + 1, rng.random(n), rng.random(n),
                            KeywordSets.from_lists([[0]] * n), k, rng.integers(0, 3, n)))
    # Some results full (a finite k-th distance), some not; some rows retiring at t = 4.
    for row in range(n):
        if rng.random() < 0.6:
            kk = int(k[row])
            state.ids[row, :kk] = np.sort(rng.choice(10_000, kk, replace=False))
            state.d2[row, :kk] = np.sort(rng.random(kk) * 0.3)
    state.end_t[rng.random(n) < 0.1] = 4
    return state


def _postings(rng: np.random.Generator, n_rows: int, key_space: int, n_main: int, n_delta: int,
              epoch: np.ndarray) -> Postings:
    p = Postings()
    # Spread keys, and three keys with runs far longer than a fence block (wherever they fall).
    keys = rng.integers(0, key_space, n_main) * 3
    keys[: min(n_main, 300)] = rng.choice(key_space, 3)[np.arange(min(n_main, 300)) % 3] * 3
    p.insert(keys.astype(np.int64), rng.integers(0, n_rows, n_main), epoch[rng.integers(0, n_rows, n_main)])
    p.rebuild(epoch)
    epoch += (rng.random(epoch.shape[0]) < 0.2).astype(np.int32)  # their main entries go stale
    dkeys = rng.integers(0, key_space, n_delta) * 3
    drows = rng.integers(0, n_rows, n_delta)
    # A delta entry is live with its row's current epoch, stale with the one before.
    p.insert(dkeys.astype(np.int64), drows, (epoch[drows] - (rng.random(n_delta) < 0.3)).astype(np.int32))
    return p


def _expected(qkeys, qowner, p: Postings, epoch, state: KnnState, objects: Objects):  # noqa: ANN001, ANN202
    main: dict[int, list[int]] = {}
    for e, key in enumerate(p.keys.tolist()):
        row = int(p.rows[e])
        if p.row_epochs[row] == epoch[row]:
            main.setdefault(key, []).append(row)
    dk, dr, de = p._sorted_delta()  # noqa: SLF001
    for key, row, ep in zip(dk.tolist(), dr.tolist(), de.tolist(), strict=True):
        if ep == epoch[row]:
            main.setdefault(key, []).append(row)
    tested = np.zeros(len(objects), dtype=np.int64)
    accepted = []
    for key, obj in zip(qkeys.tolist(), qowner.tolist(), strict=True):
        for row in main.get(key, []):
            tested[obj] += 1
            ot = int(objects.t[obj])
            if not (state.t[row] <= ot < state.end_t[row]):
                continue
            dx, dy = objects.x[obj] - state.x[row], objects.y[obj] - state.y[row]
            d2 = dx * dx + dy * dy
            kk = int(state.k[row]) - 1
            kid, kd2 = int(state.ids[row, kk]), float(state.d2[row, kk])
            oid = int(objects.ids[obj])
            if kid < 0 or d2 < kd2 or (d2 == kd2 and oid < kid):
                accepted.append((row, oid, float(d2), ot))
    return sorted(accepted), tested


def _got(out):  # noqa: ANN001, ANN202
    rows, oid, d2, ot, tested = out
    return sorted(zip(rows.tolist(), oid.tolist(), d2.tolist(), ot.tolist(), strict=True)), tested


@pytest.mark.unit
@pytest.mark.parametrize(("seed", "n_probe", "n_main", "n_delta"), [
    (1, 10_007, 3_000, 200),   # three rounds, the last one short; blocks full of one key
    (2, 97, 40, 0),            # one round, a main part of two blocks, no delta
    (3, 500, 0, 300),          # no main part: every hit comes from the delta
    (4, 140_001, 2_000, 500),  # beyond the cold-filter limit: no look-ahead into the filter
])
def test_lookup_equals_a_plain_walk(seed: int, n_probe: int, n_main: int, n_delta: int) -> None:
    rng = np.random.default_rng(seed)
    n_rows, n_obj, key_space = 300, 400, 600
    state = _state(rng, n_rows)
    epoch = np.zeros(n_rows, dtype=np.int32)
    p = _postings(rng, n_rows, key_space, n_main, n_delta, epoch)
    objects = Objects(np.arange(n_obj, dtype=np.int64) * 5 + 3, rng.random(n_obj), rng.random(n_obj),
                      KeywordSets.from_lists([[0]] * n_obj), rng.integers(0, 6, n_obj))
    # Probe keys below, between (not multiples of 3: no posting) and beyond every posting.
    # Half of them drawn from the posted keys, so that a short probe has hits too.
    posted = np.unique(np.concatenate([p.keys, p._sorted_delta()[0]]))  # noqa: SLF001
    n_rand = (n_probe - 3) // 2
    qkeys = np.concatenate([[-5, 0, 10**12], rng.integers(-3, 3 * key_space + 30, n_rand),
                            rng.choice(posted, n_probe - 3 - n_rand)]).astype(np.int64)
    qowner = rng.integers(0, n_obj, n_probe)
    want = _expected(qkeys, qowner, p, epoch, state, objects)
    assert want[0] and want[1].sum() > len(want[0])  # the case has hits, misses and rejections
    plain = _got(kernel.lookup_accept(qkeys, qowner, p, epoch, state, objects))
    ordered = _got(kernel.lookup_accept_sorted(kernel.SortedProbe.of(qkeys, qowner), p, epoch, state, objects))
    for got in (plain, ordered):
        assert got[0] == want[0]
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.unit
def test_fences_are_every_stride_th_main_key() -> None:
    p = Postings()
    keys = np.arange(100, dtype=np.int64)[::-1] // 3
    p.insert(keys, np.zeros(100, dtype=np.int64), np.zeros(100, dtype=np.int32))
    assert p.fences.shape[0] == 0
    p.rebuild(np.zeros(1, dtype=np.int32))
    np.testing.assert_array_equal(p.fences, np.sort(keys)[:: kernel.FENCE_STRIDE])


@pytest.mark.slow  # the plain walk of ~2M entries takes seconds
@pytest.mark.parametrize("sorted_probe", [False, True])
def test_a_key_with_many_entries_asked_by_many_objects(sorted_probe: bool) -> None:
    rng = np.random.default_rng(9)
    n_rows, n_obj = 400, 300
    state = _state(rng, n_rows)
    epoch = np.zeros(n_rows, dtype=np.int32)
    p = Postings()
    hot = 3 * 77
    keys = np.concatenate([np.full(1_500, hot), rng.integers(0, 500, 700) * 3]).astype(np.int64)
    p.insert(keys, rng.integers(0, n_rows, keys.shape[0]), np.zeros(keys.shape[0], dtype=np.int32))
    p.rebuild(epoch)
    p.insert(np.full(600, hot, dtype=np.int64), rng.integers(0, n_rows, 600), np.zeros(600, dtype=np.int32))
    objects = Objects(np.arange(n_obj, dtype=np.int64) * 5 + 3, rng.random(n_obj), rng.random(n_obj),
                      KeywordSets.from_lists([[0]] * n_obj), rng.integers(0, 6, n_obj))
    qkeys = np.concatenate([np.full(900, hot), rng.integers(0, 1_600, 2_000)]).astype(np.int64)
    qowner = rng.integers(0, n_obj, qkeys.shape[0])
    want = _expected(qkeys, qowner, p, epoch, state, objects)
    assert want[1].sum() > 900 * 2_000  # far more entries met than one batch of held entries
    if sorted_probe:
        got = _got(kernel.lookup_accept_sorted(kernel.SortedProbe.of(qkeys, qowner), p, epoch, state, objects))
    else:
        got = _got(kernel.lookup_accept(qkeys, qowner, p, epoch, state, objects))
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
