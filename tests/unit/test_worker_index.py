"""Worker indexes (core/worker_index.py): every kind × grid size equals the oracle, and no
index ever loses an in-ball pair (docs/design.md §3 fact 1). Expected values come from the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.model import Objects, Op, Rect, Results, SubscriptionEvents
from dkmsks.core.oracle import live_subscriptions, oracle_results
from dkmsks.core.postings import Postings, _filter_test
from dkmsks.core.worker_index import GridIndex, make_index
from dkmsks.core.workload import WorkloadSpec, generate_workload
from test_update import (
    METHODS,
    adversarial_case,
    apply_events,
    drive,
    events_from_rows,
    initial_worker,
)

pytestmark = pytest.mark.unit

#: Index options that force every lazy path: tiny merge thresholds, many wide balls,
#: re-indexing on every shrink.
STRESS = {"merge_min": 1, "merge_fraction": 0.01}
GRID_STRESS = {**STRESS, "max_cells": 2, "shrink": 0.999}
FLAT = {"levels": "flat", "max_cells": 3}
#: The grid's earlier layout: every pyramid level, at most 9 cells a ball at every level.
EVERY_LEVEL = {"level_step": 1, "max_cells": 9, "wide_cells": 9}
#: Every other level, few cells at fine levels and many at coarse ones (a small lattice's
#: levels of at most 8 cells a side), re-indexing on every shrink.
WIDE = {**STRESS, "level_step": 2, "max_cells": 2, "wide_cells": 36, "wide_side": 8, "shrink": 0.999}


def in_ball_pairs(
    objects: Objects, events: SubscriptionEvents, t: int, before: Results
) -> set[tuple[int, int]]:
    """(object id, sub id) pairs of timestamp ``t`` whose object is in the ball at the start
    of ``t`` (the pairs an index must produce), from the oracle's results at ``t - 1``."""
    subs = live_subscriptions(events, t)
    out = set()
    for i, sid in enumerate(subs.ids.tolist()):
        res = before.get(sid) if subs.t[i] < t else None
        k = int(subs.k[i])
        full = res is not None and len(res.object_ids) >= k
        for r in np.flatnonzero(objects.t == t).tolist():
            if not set(subs.keywords.row(i).tolist()) & set(objects.keywords.row(r).tolist()):
                continue
            dx = objects.x[r] - subs.x[i]
            dy = objects.y[r] - subs.y[i]
            d2 = dx * dx + dy * dy
            if not full or (d2, objects.ids[r]) < (res.d2[k - 1], res.object_ids[k - 1]):
                out.add((int(objects.ids[r]), sid))
    return out


def test_postings_lookup_matches_reference_with_stale_entries() -> None:
    rng = np.random.default_rng(1)
    p = Postings()
    epoch = np.zeros(50, dtype=np.int32)
    ref: dict[int, list[int]] = {}
    for step in range(6):
        keys = rng.integers(0, 30, 200).astype(np.int64)
        rows = rng.integers(0, 50, 200).astype(np.int64)
        p.insert(keys, rows, epoch[rows])
        for k, r in zip(keys.tolist(), rows.tolist(), strict=True):
            ref.setdefault(k, []).append(r)
        dead = rng.choice(50, 3, replace=False)
        epoch[dead] += 1  # every entry of these rows is now stale
        for k in ref:
            ref[k] = [r for r in ref[k] if r not in set(dead.tolist())]
        if step % 2:
            p.rebuild(epoch)
        q = rng.integers(-2, 33, 40).astype(np.int64)
        got: dict[int, list[int]] = {}
        for owner, rows_out in p.pairs(q, np.arange(40, dtype=np.int64), epoch, budget=17):
            for o, r in zip(owner.tolist(), rows_out.tolist(), strict=True):
                got.setdefault(o, []).append(r)
        for i, key in enumerate(q.tolist()):
            assert sorted(got.get(i, [])) == sorted(ref.get(key, []))


@pytest.mark.parametrize("kernel_in_use", ["numpy", "numba"])
def test_postings_delta_merged_across_lookups_holds_every_entry_sorted(kernel_in_use: str) -> None:
    """The delta sorted by one lookup and grown by later insertions (merged, not sorted again:
    in place in buffers with room with the compiled kernel, into new arrays with numpy) holds
    exactly the entries inserted since the last rebuild, sorted by key, and lookups in between
    find each key's live entries; after a rebuild the same holds again (the buffers are kept)."""
    rng = np.random.default_rng(5)
    p = Postings(kernel_in_use)
    epoch = np.zeros(80, dtype=np.int32)
    inserted: list[tuple[int, int, int]] = []  # every entry (lookups find the rebuilt ones too)
    in_delta: list[tuple[int, int, int]] = []  # the entries since the last rebuild
    for step in range(18):
        if step == 12:
            p.rebuild(epoch)
            assert p.n_delta == 0 and p._sorted_delta()[0].shape[0] == 0  # noqa: SLF001
            in_delta = []
        n = int(rng.integers(0, 300 if step != 13 else 3000))  # and once more than the buffers hold
        # Few distinct keys (long runs of equal keys), keys below and above those held.
        keys = rng.integers(-5, 40 + 10 * step, n).astype(np.int64)
        rows = rng.integers(0, 80, n).astype(np.int64)
        p.insert(keys, rows, epoch[rows])
        new = list(zip(keys.tolist(), rows.tolist(), epoch[rows].tolist(), strict=True))
        inserted += new
        in_delta += new
        if step % 3 == 2:
            epoch[rng.choice(80, 4, replace=False)] += 1
        dk, dr, de = p._sorted_delta()  # noqa: SLF001
        assert np.all(dk[1:] >= dk[:-1])
        assert sorted(zip(dk.tolist(), dr.tolist(), de.tolist(), strict=True)) == sorted(in_delta)
        q = rng.integers(-6, 50 + 10 * step, 30).astype(np.int64)
        got: dict[int, list[int]] = {}
        for owner, rows_out in p.pairs(q, np.arange(30, dtype=np.int64), epoch, budget=23):
            for o, r in zip(owner.tolist(), rows_out.tolist(), strict=True):
                got.setdefault(o, []).append(r)
        for i, key in enumerate(q.tolist()):
            want = [r for k, r, e in inserted if k == key and e == epoch[r]]
            assert sorted(got.get(i, [])) == sorted(want)
    p.rebuild(epoch)
    assert p.n_delta == 0 and p._sorted_delta()[0].shape[0] == 0  # noqa: SLF001


def test_the_compiled_and_numpy_deltas_are_the_same_arrays() -> None:
    """Both merges put a new entry before the old entries of an equal key, so the two kernels'
    sorted deltas are byte-identical (not only the same multiset), lookup after lookup."""
    rng = np.random.default_rng(8)
    pair = Postings("numpy"), Postings("numba")
    for step in range(10):
        n = int(rng.integers(1, 400))
        keys = rng.integers(0, 30, n).astype(np.int64)  # many equal keys across insertions
        rows = rng.integers(0, 1000, n).astype(np.int64)
        epochs = rng.integers(0, 3, n).astype(np.int32)
        for p in pair:
            p.insert(keys, rows, epochs)
        if step % 2:
            continue  # two insertions before some lookups
        a, b = (p._sorted_delta() for p in pair)  # noqa: SLF001
        for x, y in zip(a, b, strict=True):
            assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.mark.parametrize("seed", [3, 4])
def test_a_rebuild_holds_the_live_entries_sorted_the_same_in_both_kernels(seed: int) -> None:
    """A rebuild merges the sorted main part and the sorted delta (a stable sort of two runs)
    and drops stale entries; the compiled kernel sets the new filter's bits in one pass: both
    kernels hold the same arrays and filter, every live entry sorted by key, and every key
    passes the filter. Repeated rebuilds, with deletions (epoch bumps) in between."""
    rng = np.random.default_rng(seed)
    pair = Postings("numpy"), Postings("numba")
    epoch = np.zeros(500, dtype=np.int32)
    live: list[tuple[int, int, int]] = []  # (key, row, epoch) inserted
    for step in range(8):
        n = int(rng.integers(1, 3000))
        keys = rng.integers(-(2**40), 2**40, n).astype(np.int64)
        keys[: n // 3] = rng.integers(0, 50, n // 3)  # many equal keys, in main and delta
        rows = rng.integers(0, 500, n).astype(np.int64)
        for p in pair:
            p.insert(keys, rows, epoch[rows])
        live += list(zip(keys.tolist(), rows.tolist(), epoch[rows].tolist(), strict=True))
        epoch[rng.choice(500, 40, replace=False)] += 1  # deleted or re-posted rows: stale entries
        if step % 3 == 2:
            continue
        for p in pair:
            p.rebuild(epoch)
        a, b = pair
        for name in ("keys", "rows", "fences", "row_epochs", "_present"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and np.array_equal(x, y), (step, name)
        want = sorted((k, r) for k, r, e in live if e == epoch[r])
        assert sorted(zip(a.keys.tolist(), a.rows.tolist(), strict=True)) == want
        assert np.all(np.diff(a.keys) >= 0) and a.n_delta == 0 and a.n_stale == 0
        assert _filter_test(b._present, b.keys).all()  # noqa: SLF001


def test_a_rebuild_does_not_keep_delta_buffers_the_size_of_the_first_build() -> None:
    """The compiled delta's buffers grow with what it holds; an index built by posting every
    entry through the delta must not keep buffers of the whole index after its rebuild (they
    were half of a worker's index memory at 1M/1M), and a later delta still lands and merges."""
    rng = np.random.default_rng(5)
    p = Postings("numba")
    epoch = np.zeros(1000, dtype=np.int32)
    keys = rng.integers(0, 2**40, 200_000).astype(np.int64)
    rows = rng.integers(0, 1000, 200_000).astype(np.int64)
    p.insert(keys, rows, epoch[rows])
    assert p._sk.shape[0] >= 200_000  # noqa: SLF001 - the first build went through the buffers
    p.rebuild(epoch)
    assert p.n_main == 200_000
    assert p._sk.shape[0] <= p.n_main // 4  # noqa: SLF001
    more = rng.integers(0, 2**40, 3000).astype(np.int64)
    p.insert(more, rows[:3000], epoch[rows[:3000]])
    assert p.n_delta == 3000 and p._sk.shape[0] <= p.n_main // 4  # noqa: SLF001
    p.rebuild(epoch)
    assert p.n_main == 203_000 and np.array_equal(p.keys, np.sort(np.concatenate([keys, more])))


def test_the_compiled_delta_refuses_buffers_without_room() -> None:
    from dkmsks.core import kernel

    keys = np.array([1, 3, 0], dtype=np.int64)
    rows = np.zeros(3, np.int32)
    with pytest.raises(ValueError, match="no room"):
        kernel.merge_pending(keys, rows, np.zeros(3, np.int32), 2, 2)
    with pytest.raises(ValueError, match="no room"):
        kernel.delta_append(keys, rows, np.zeros(3, np.int32), 2, np.array([2, 4], dtype=np.int64),
                            np.zeros(2, np.int64), np.zeros(2, np.int32), np.zeros(64, np.uint8))
    assert keys.tolist() == [1, 3, 0]  # refused before any write


#: (method, grid): the grid size only matters for the DkM-SKS index.
KINDS = [("kop", 1), ("sop", 1)] + [("dkm", g) for g in (1, 2, 7, 64, 1000, 32768)]


def variant_options(method: str, variant: str) -> dict:
    if variant == "stress":
        return GRID_STRESS if method == "dkm" else STRESS
    if variant == "flat" and method == "dkm":
        return FLAT
    if variant == "every_level" and method == "dkm":
        return EVERY_LEVEL
    if variant == "wide" and method == "dkm":
        return WIDE
    return {}


@pytest.mark.parametrize(("method", "grid"), KINDS)
@pytest.mark.parametrize("variant", ["default", "stress", "flat", "every_level", "wide"])
def test_every_index_and_grid_equals_oracle(method: str, grid: int, variant: str) -> None:
    options = variant_options(method, variant)
    for seed in (100 + grid, 200 + grid):
        objects, events = adversarial_case(seed, timestamps=6)
        drive(initial_worker(method, objects, events, grid=grid, **options), objects, events)
        drive(
            initial_worker(method, objects, events, grid=grid, **options),
            objects,
            events,
            batch=3,
        )


def test_the_finest_grid_the_configuration_takes_is_one_the_index_takes() -> None:
    from dkmsks.core.config import PARAMETERS

    finest = next(p for p in PARAMETERS if p.name == "grid").maximum
    assert isinstance(make_index("dkm", Rect(0.0, 0.0, 1.0, 1.0), grid=finest), GridIndex)
    # What a core caller passing a finer grid reads: the parameter, not a command-line flag.
    with pytest.raises(ValueError, match=r"grid 40133 is too fine for 32-bit cell ids: grid must be at most 32768"):
        make_index("dkm", Rect(0.0, 0.0, 1.0, 1.0), grid=40133)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", ["colocated", "same_keywords", "tiny_budget"])
def test_degenerate_inputs(method: str, case: str) -> None:
    objects, events = adversarial_case(
        7, colocated=case == "colocated", same_keywords=case != "tiny_budget"
    )
    budget = 5 if case == "tiny_budget" else 1 << 22
    drive(initial_worker(method, objects, events, grid=3, budget=budget), objects, events)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("variant", ["default", "stress", "flat", "every_level", "wide"])
def test_index_never_loses_an_in_ball_pair(method: str, variant: str) -> None:
    """Candidates ⊇ pairs whose object is inside the (pre-timestamp) ball, every timestamp."""
    options = variant_options(method, variant)
    objects, events = adversarial_case(42, timestamps=6)
    worker = initial_worker(method, objects, events, grid=5, **options)
    before = oracle_results(objects, events, 0)
    for t in range(1, 7):
        apply_events(worker, events, t, in_batch=False)
        batch = objects.take(np.flatnonzero(objects.t == t))
        cand = set()
        for obj, rows in worker.index.candidates(worker.state, batch):
            cand.update(zip(batch.ids[obj].tolist(), worker.state.sub_id[rows].tolist(), strict=True))
        need = in_ball_pairs(objects, events, t, before)
        assert need <= cand, sorted(need - cand)[:5]
        worker.process(batch)
        before = oracle_results(objects, events, t)


@pytest.mark.parametrize("variant", ["default", "stress", "every_level", "wide"])
def test_grid_radius_bound_holds_every_live_ball(variant: str) -> None:
    """The compiled lookup rejects an entry whose object lies beyond the row's radius bound
    (GridIndex.radius_bound) before it reads the row's result: sound only if no live row's
    ball is ever wider than its bound. Checked after every timestamp of a stream with
    deletions, insertions (unbounded balls), shrinking balls and re-indexing."""
    options = variant_options("dkm", variant)
    objects, events = adversarial_case(11, timestamps=8)
    worker = initial_worker("dkm", objects, events, grid=16, **options)
    assert isinstance(worker.index, GridIndex)
    for t in range(1, 9):
        apply_events(worker, events, t, in_batch=False)
        worker.process(objects.take(np.flatnonzero(objects.t == t)))
        state, bound = worker.state, worker.index.radius_bound()
        rows = state.live_rows()
        radius = np.sqrt(state.radius2(rows))
        assert bound.shape[0] >= state.n_rows
        assert np.all(bound[rows] >= radius), (t, rows[bound[rows] < radius][:5])
        assert np.all(np.isinf(bound[rows]) >= np.isinf(radius))  # an unbounded ball has no bound


def test_grid_finds_objects_outside_the_data_space() -> None:
    """A point beyond the space (docs/design.md §1) still reaches a ball that covers it."""
    objects = Objects.build(
        ids=[1, 2, 3, 4],
        x=[0.0, 1.0, 1.5, -3.0],
        y=[0.0, 1.0, 1.5, 0.2],
        keywords=[[0], [1], [0], [1]],
        t=[0, 0, 1, 1],
    )
    events = events_from_rows(
        [(Op.INSERT, 7, 0.9, 0.9, [0], 1, 0), (Op.INSERT, 8, 0.0, 0.1, [1], 1, 0)]
    )
    for grid in (1, 4, 10):
        worker = initial_worker("dkm", objects, events, grid=grid)
        drive(worker, objects, events)
        res = worker.results()
        assert res[7].object_ids.tolist() == [3]  # outside the space, d² 0.72 < 1.62
        assert res[8].object_ids.tolist() == [2]  # (-3, .2) is farther than (1, 1)


def test_grid_pyramid_levels() -> None:
    """A small ball is posted in its fine cell; a large one at the coarsest level where it
    spans at most ``max_cells`` cells; an infinite one in the single top cell."""
    from dkmsks.core.knn_state import KnnState
    from dkmsks.core.model import Subscriptions

    space = Rect(0.0, 0.0, 10.0, 10.0)
    index = make_index("dkm", space, grid=10, **EVERY_LEVEL)
    assert isinstance(index, GridIndex) and index.top == 4 and index.levels == [0, 1, 2, 3, 4]
    state = KnnState(width=1)
    subs = Subscriptions.build(
        [1, 2, 3], [5.5, 5.5, 5.0], [5.5, 5.5, 5.0], [[0], [0], [0]], [1, 1, 1], [0, 0, 0]
    )
    subs = Subscriptions.build(
        [1, 2, 3], [5.5, 5.0, 5.0], [5.5, 5.0, 5.0], [[0], [0], [0]], [1, 1, 1], [0, 0, 0]
    )
    ids = np.array([[10], [11], [-1]])
    d2 = np.array([[0.04], [18.49], [np.inf]])  # r = 0.2, r = 4.3, infinite
    rows = state.add(subs, (ids, d2))
    index.add(state, rows)
    index.maintain(state, force=True)
    cells, counts = np.unique(index.postings.keys >> 32, return_counts=True)
    posted = dict(zip(cells.tolist(), counts.tolist(), strict=True))
    assert posted.pop(5 * 10 + 5) == 1  # level 0, fine cell (5, 5)
    top_cell = 10 * 10 + 5 * 5 + 3 * 3 + 2 * 2  # after the cells of levels 0 to 3
    assert posted.pop(top_cell) == 1  # the infinite ball, in the top cell (the whole plane)
    # r = 4.3 spans 10x10 fine cells, 5x5 at level 1, 3x3 at level 2: posted there, 9 cells.
    level2 = 10 * 10 + 5 * 5  # cells of levels 0 and 1 come first
    assert sorted(posted) == [level2 + c for c in range(9)]
    assert set(posted.values()) == {1}

    flat = make_index("dkm", space, grid=10, levels="flat", **EVERY_LEVEL)
    flat.add(state, rows)
    flat.maintain(state, force=True)
    assert np.unique(flat.postings.keys, return_counts=True)[1].tolist() == [1, 2]  # fine cell; top cell for both


def _posted_levels(index: GridIndex) -> dict[int, list[int]]:
    """Posting rows by the pyramid level of their cell (cells are numbered level after level)."""
    cells = index.postings.keys >> 32
    level = np.searchsorted(index._offset, cells, side="right") - 1  # noqa: SLF001 - the layout under test
    out: dict[int, list[int]] = {}
    for lv, row in zip(level.tolist(), index.postings.rows.tolist(), strict=True):
        out.setdefault(lv, []).append(row)
    return {lv: sorted(rows) for lv, rows in out.items()}


def _cells_reached(x: float, y: float, r: float, side: int) -> int:
    """Cells of a lattice of ``side``-wide cells from the origin that a ball reaches (a cell's
    nearest point to the centre within ``r``)."""
    def gap(v: float, c: int) -> float:
        return max(side * c - v, 0.0, v - side * (c + 1))
    xs = range(int((x - r) // side), int((x + r) // side) + 1)
    ys = range(int((y - r) // side), int((y + r) // side) + 1)
    return sum(1 for cx in xs for cy in ys if gap(x, cx) ** 2 + gap(y, cy) ** 2 <= r * r)


def test_grid_level_step_and_wide_cells() -> None:
    """With ``level_step`` the pyramid keeps every step-th level counted down from the top
    cell; a ball goes to the finest of them where it spans at most ``max_cells`` cells, or
    ``wide_cells`` at levels of at most ``wide_side`` cells a side."""
    from dkmsks.core.knn_state import KnnState
    from dkmsks.core.model import Subscriptions

    space = Rect(0.0, 0.0, 256.0, 256.0)  # fine cells of side 1
    options = {"level_step": 2, "max_cells": 4, "wide_cells": 36, "wide_side": 16}
    index = make_index("dkm", space, grid=256, **options)
    assert isinstance(index, GridIndex) and index.top == 8 and index.levels == [0, 2, 4, 6, 8]
    # Sides 256, 64, 16, 4 below the top: the levels of side <= 16 (4 and 6) take up to 36 cells.
    assert index.levels_below_top.tolist() == [0, 2, 4, 6] and index.caps_below_top.tolist() == [4, 4, 36, 36]
    state = KnnState(width=1)
    subs = Subscriptions.build([1, 2], [129.5, 130.0], [129.5, 130.0], [[0], [0]], [1, 1], [0, 0])
    # r = 1.2 spans 4 x 4 fine cells (level 0: 16 > 4) and 1 or 2 a side of level 2's cells of 4;
    # r = 20 spans 11 a side of level 2 (121 > 4) and 4 a side of level 4's cells of 16 (16 <= 36).
    rows = state.add(subs, (np.array([[10], [11]]), np.array([[1.44], [400.0]])))
    index.add(state, rows)
    index.maintain(state, force=True)
    posted = _posted_levels(index)
    assert sorted(posted) == [2, 4]
    assert set(posted[2]) == {int(rows[0])} and set(posted[4]) == {int(rows[1])}
    assert len(posted[4]) == _cells_reached(130.0, 130.0, 20.0, 16)
    # Without the wide cap the large ball goes up to level 6 (cells of 64: 1 a side).
    narrow = make_index("dkm", space, grid=256, **{**options, "wide_cells": 4})
    narrow.add(state, rows)
    narrow.maintain(state, force=True)
    assert sorted(_posted_levels(narrow)) == [2, 6]
    assert len(_posted_levels(narrow)[6]) == _cells_reached(130.0, 130.0, 20.0, 64) == 4
    with pytest.raises(ValueError, match="level_step must be >= 1"):
        make_index("dkm", space, grid=256, level_step=0)


@pytest.mark.realdata
@pytest.mark.parametrize("method", METHODS)
def test_real_data_slice_with_insertions_and_deletions(method: str, real_cache: dict) -> None:
    objects, events = real_cache["workload"]
    grids = [1, 16, 128] if method == "dkm" else [1]
    for grid in grids:
        worker = initial_worker(method, objects, events, grid=grid)
        drive(worker, objects, events, cache=real_cache["oracle"])
    # Two timestamps per batch, too (docs/design.md §3 fact 2).
    worker = initial_worker(method, objects, events, grid=32)
    drive(worker, objects, events, batch=2, cache=real_cache["oracle"])


@pytest.fixture(scope="module")
def real_cache() -> dict:
    from conftest import real_objects

    source, _vocab = real_objects(12_000)
    spec = WorkloadSpec(
        o_init=8_000, subscriptions=1_500, timestamps=4, objects_per_ts=1_000,
        inserts_per_ts=100, deletes_per_ts=100, k_max=10, seed=3,
    )
    return {"workload": generate_workload(source, spec), "oracle": {}}


@pytest.mark.parametrize(("method", "grid"), [("kop", 1), ("sop", 1), ("dkm", 16), ("dkm", 1000)])
def test_candidates_are_the_key_join_of_probe_and_entries(method: str, grid: int) -> None:
    """The index contract a table-backed caller relies on: candidates = probe ⋈ entries."""
    objects, events = adversarial_case(66, timestamps=2)
    worker = initial_worker(method, objects, events, grid=grid)
    state, index = worker.state, worker.index
    batch = objects.take(np.flatnonzero(objects.t == 1))
    got = sorted(
        (int(o), int(r)) for obj, rows in index.candidates(state, batch) for o, r in zip(obj, rows, strict=True)
    )
    keys, rows = index.entries(state, state.live_rows())
    qkeys, owner = index.probe(batch)
    joined = sorted(
        (int(o), int(r))
        for qk, o in zip(qkeys.tolist(), owner.tolist(), strict=True)
        for r in rows[keys == qk].tolist()
    )
    assert got == joined and len(got) > 0


def test_grid_keeps_places_outside_the_data_space_apart() -> None:
    """The lattice continues beyond the space: two far-apart places outside it (a corner
    region the stream reaches only later, e.g. Alaska) are different cells, so an object at
    one is not a candidate of a small ball at the other (clamping put both in the corner
    cell). Found by a 1,000-timestamp run whose work grew 4x (docs/reliability.md)."""
    from dkmsks.core.knn_state import KnnState
    from dkmsks.core.model import Subscriptions

    space = Rect(0.0, 0.0, 10.0, 10.0)
    index = make_index("dkm", space, grid=64)
    state = KnnState(width=1)
    subs = Subscriptions.build([1, 2], [30.0, 50.0], [40.0, 20.0], [[0], [0]], [1, 1], [0, 0])
    rows = state.add(subs, (np.array([[10], [11]]), np.array([[0.01], [0.01]])))
    index.add(state, rows)
    index.maintain(state, force=True)
    near_first = Objects.build(ids=[5], x=[30.05], y=[40.0], keywords=[[0]], t=[1])
    got = [state.sub_id[r].tolist() for _, r in index.candidates(state, near_first)]
    assert got == [[1]]
    # Posted in fine cells (2 keys each at most), not at a coarse level.
    keys, owners = index.entries(state, rows)
    assert np.bincount(owners).max() <= 4


def test_grid_exact_with_coordinates_far_outside_the_space() -> None:
    """Coordinates up to 1e15 away (lattice clamped at ±2^40 cells) keep results exact."""
    rng = np.random.default_rng(5)
    n = 200
    t = np.sort(rng.integers(0, 4, n))
    x = rng.uniform(0, 1, n)
    y = rng.uniform(0, 1, n)
    far = t > 0
    x[far] += rng.choice([0.0, 1e3, -1e9, 1e15], int(far.sum()))
    y[far] += rng.choice([0.0, 1e6, -1e12], int(far.sum()))
    objects = Objects.build(rng.permutation(n), x, y, [[int(i % 3)] for i in range(n)], t)
    rows = [(Op.INSERT, s, float(x[s]), float(y[s]) + 0.5, [s % 3], 1 + s % 4, int(t[s])) for s in range(0, n, 7)]
    events = events_from_rows(rows)
    for grid in (4, 64, 16384):
        worker = initial_worker("dkm", objects, events, grid=grid)
        drive(worker, objects, events)


def test_key_filter_blocked_compiled_and_numpy_agree_and_never_drop_a_key() -> None:
    """The blocked key filter: both slots of a key in one 512-slot block (one cache line of a
    64-byte-aligned filter, kept through pickling), every inserted key passes, the compiled and
    the numpy test give the same answer, and absent keys mostly fail."""
    import pickle

    from dkmsks.core.kernel.key_filter import FILTER_BLOCK_BITS, _filtered
    from dkmsks.core.postings import _filter_slots, _filter_test

    rng = np.random.default_rng(8)
    held = rng.integers(-(2**62), 2**62, 200_000)
    first, second = _filter_slots(held)
    assert np.array_equal(first >> FILTER_BLOCK_BITS, second >> FILTER_BLOCK_BITS)
    assert np.mean(first == second) < 0.01  # the second hash is not the first one again
    p = Postings()
    p.insert(held, np.zeros(held.shape[0], dtype=np.int64), np.zeros(held.shape[0], dtype=np.int32))
    for bits in (p._present, pickle.loads(pickle.dumps(p))._present):  # noqa: SLF001
        assert bits.ctypes.data % 64 == 0
        asked = np.concatenate([held[:3000], rng.integers(-(2**62), 2**62, 20_000)])
        numpy_says = _filter_test(bits, asked)
        assert numpy_says[:3000].all()
        assert np.array_equal(numpy_says, [_filtered(bits, key) for key in asked.tolist()])
        assert numpy_says[3000:].mean() < 0.02  # 200,000 keys in 2^23 slots: ~0.5 % false positives


def test_key_filter_compiled_setter_sets_the_numpy_bits() -> None:
    """Postings of the compiled kernel set their filter bits in one compiled loop: the same
    bits as the numpy setter, over several insertions (keys repeated, negative, extreme)."""
    rng = np.random.default_rng(9)
    compiled, reference = Postings("numba"), Postings("numpy")
    assert compiled.compiled and not reference.compiled
    for n in (0, 1, 1000, 50_000):
        keys = np.concatenate([rng.integers(-(2**63), 2**63 - 1, n), [0, -1, 2**63 - 1, -(2**63)]])
        for p in (compiled, reference):
            p.insert(keys, np.zeros(keys.shape[0], dtype=np.int64), np.zeros(keys.shape[0], dtype=np.int32))
        assert np.array_equal(compiled._present, reference._present)  # noqa: SLF001
    assert np.count_nonzero(compiled._present) > 1000  # noqa: SLF001
