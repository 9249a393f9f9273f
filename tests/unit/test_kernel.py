"""The compiled kernels (core/kernel/) against the numpy reference path and the oracle.

Both kernels must give byte-identical results *and* the same work counters on every method,
with subscription insertions and deletions, per timestamp and in multi-timestamp batches;
the oracle is the independent check that both are right.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dkmsks.core.config import PartitionConfig
from dkmsks.core.engine import build_engine
from dkmsks.core.kernel import SortedProbe, kernel_name
from dkmsks.core.knn_state import KnnState
from dkmsks.core.model import KeywordSets, Objects, Rect, Subscriptions, describe_difference, results_equal
from dkmsks.core.oracle import oracle_results
from dkmsks.core.update import Worker
from dkmsks.core.worker_index import GridIndex
from dkmsks.core.workload import WorkloadSpec, generate_workload
from test_engine import make_engine
from test_update import METHODS, adversarial_case, apply_events, initial_worker

pytestmark = pytest.mark.unit

ALL_METHODS = (*METHODS, "ps2")


def assert_same_state(a: Worker, b: Worker, where: str) -> None:
    """Byte-identical kNN matrices of the live rows, keyed by subscription id."""
    ra, rb = a.state.live_rows(), b.state.live_rows()
    assert np.array_equal(a.state.sub_id[ra], b.state.sub_id[rb]), where
    assert np.array_equal(a.state.ids[ra], b.state.ids[rb]), where
    assert np.array_equal(a.state.d2[ra].view(np.int64), b.state.d2[rb].view(np.int64)), where


def test_kernel_name_choices() -> None:
    assert kernel_name() == "numba"  # numba is pinned in requirements.lock: the default path
    assert kernel_name("NumPy") == "numpy"
    with pytest.raises(ValueError, match="unknown kernel 'fortran'; valid kernels: numba, numpy"):
        kernel_name("fortran")
    with pytest.raises(ValueError, match="unknown kernel 'fortran'"):
        Worker("dkm", Rect(0.0, 0.0, 1.0, 1.0), kernel="fortran")


@pytest.mark.parametrize(("method", "seed"), list(itertools.product(ALL_METHODS, range(3))))
def test_adversarial_engines_identical_and_exact(method: str, seed: int) -> None:
    """Lattice ties, objects outside the data space, deletions and re-registrations: both
    kernels step for step the same, and equal to the oracle at the end."""
    objects, events = adversarial_case(seed, timestamps=6)
    engines = {k: make_engine(method, 3, objects, events, t0=1, grid=4, kernel=k) for k in ("numba", "numpy")}
    for t in range(2, 7):
        ma, mb = (next(iter(e.run(objects, events, until=t))) for e in engines.values())
        assert np.array_equal(ma.worker_work, mb.worker_work), (method, t)
        assert np.array_equal(ma.worker_accepted, mb.worker_accepted), (method, t)
        assert np.array_equal(ma.worker_updated, mb.worker_updated), (method, t)
        for w in range(3):
            assert_same_state(engines["numba"].workers[w], engines["numpy"].workers[w], f"{method} t={t} w={w}")
    got, expected = engines["numba"].results(), oracle_results(objects, events, 6, t0=1)
    assert results_equal(got, expected), describe_difference(got, expected)


@pytest.fixture(scope="module")
def real_workload() -> tuple:
    from conftest import real_objects

    source, _ = real_objects(12_000)
    spec = WorkloadSpec(
        o_init=8_000, subscriptions=2_000, timestamps=4, objects_per_ts=1_000,
        inserts_per_ts=150, deletes_per_ts=150, k_max=10, seed=23,
    )
    return generate_workload(source, spec)


@pytest.mark.realdata
@pytest.mark.parametrize(("method", "m"), list(itertools.product(ALL_METHODS, [1, 5])))
def test_real_data_engines_identical_and_exact(method: str, m: int, real_workload: tuple) -> None:
    """Each method's real initial phase (plan and main server), then four timestamps of real
    objects with insertions and deletions: same results and counters, equal to the oracle."""
    objects, events = real_workload
    config = PartitionConfig(method=method, workers=m)
    runs = {}
    for k in ("numba", "numpy"):
        engine, _ = build_engine(config, objects, events, kernel=k, threads=2)
        runs[k] = (engine, list(engine.run(objects, events)))
    (ea, ma), (eb, mb) = runs.values()
    assert [m_.work for m_ in ma] == [m_.work for m_ in mb]
    assert [list(m_.worker_accepted) for m_ in ma] == [list(m_.worker_accepted) for m_ in mb]
    for w in range(m):
        assert_same_state(ea.workers[w], eb.workers[w], f"{method} m={m} w={w}")
    # The main server's re-costs (compiled Eq. 5 sums under numba) leave the same loads.
    assert np.array_equal(ea.assigner.load_weight, eb.assigner.load_weight)
    last = int(max(objects.t.max(), events.t.max()))
    expected = oracle_results(objects, events, last, t0=config.t0)
    got = ea.results()
    assert results_equal(got, expected), describe_difference(got, expected)


@pytest.mark.parametrize("method", ALL_METHODS)
def test_stepwise_batches_identical(method: str) -> None:
    """A multi-timestamp batch probed once (the Spark path, docs/design.md §3 fact 2), with
    deletions and insertions inside the batch: the same per-timestamp counters and changed
    rows from both kernels, the same final state, equal to the oracle."""
    objects, events = adversarial_case(5, timestamps=7)
    workers = {k: initial_worker(method, objects, events, t0=1, grid=4, kernel=k) for k in ("numba", "numpy")}
    steps = {}
    for k, worker in workers.items():
        for t in range(2, 8):
            apply_events(worker, events, t, in_batch=True)
        batch = objects.take(np.flatnonzero(objects.t >= 2))
        steps[k] = [(s.t, s.stats.pairs_tested, s.stats.pairs_accepted, s.stats.updated_rows.tolist())
                    for s in worker.process_stepwise(batch, through=7)]
    assert steps["numba"] == steps["numpy"]
    assert_same_state(workers["numba"], workers["numpy"], method)
    expected = oracle_results(objects, events, 7, t0=1)
    assert results_equal(workers["numba"].results(), expected)


@pytest.mark.parametrize("method", ALL_METHODS)
def test_stepwise_batches_through_the_batch_sized_lookup_identical(method: str, monkeypatch) -> None:
    """The lookup that a batch of more than ``_COLD_KEYS`` probe keys takes (a Spark task
    catching up; key by key, the grid's radius bound first) against the numpy path and the
    oracle: the threshold lowered so that this small case's batch takes it."""
    from dkmsks.core.kernel import lookup

    monkeypatch.setattr(lookup, "_COLD_KEYS", 8)
    test_stepwise_batches_identical(method)


def test_lower_bound_is_searchsorted_left() -> None:
    """The warm lookup's branchless search (unsigned, inlined into its loop) finds each key's
    first position as ``np.searchsorted`` does, with runs of equal keys, keys beyond both ends
    and an empty array. Called through a jitted loop, as the lookup calls it."""
    import numba

    from dkmsks.core.kernel.lookup import _lower_bound

    @numba.njit
    def first_positions(keys, needles):  # noqa: ANN001, ANN202
        out = np.empty(needles.shape[0], dtype=np.int64)
        for i in range(needles.shape[0]):
            out[i] = _lower_bound(keys, keys.shape[0], needles[i])
        return out

    rng = np.random.default_rng(3)
    for n in (*range(0, 9), 31, 32, 33, 1000):
        keys = np.sort(rng.integers(-5, 40, size=n)).astype(np.int64)
        needles = np.arange(-8, 44, dtype=np.int64)
        assert first_positions(keys, needles).tolist() == np.searchsorted(keys, needles).tolist(), n


def test_replayed_batch_changes_nothing_compiled() -> None:
    """Objects already in a result are ignored by the compiled merge (a replay is a no-op)."""
    objects, events = adversarial_case(3, timestamps=4)
    worker = initial_worker("dkm", objects, events, t0=1, grid=4, kernel="numba")
    for t in range(2, 5):
        apply_events(worker, events, t, in_batch=False)
        worker.process(objects.take(np.flatnonzero(objects.t == t)))
    before = worker.state.ids.copy(), worker.state.d2.copy()
    stats = worker.process(objects.take(np.flatnonzero(objects.t == 4)))
    assert stats.subs_updated == 0
    assert np.array_equal(before[0], worker.state.ids) and np.array_equal(before[1], worker.state.d2)


@pytest.mark.parametrize("method", ["dkm", "kop"])
def test_sorted_probe_finds_the_same_pairs(method: str) -> None:
    """The sorted probe (one per timestamp, shared by the workers) accepts the same pairs as
    the plain probe and counts the same live entries per object, against postings with a
    delta and stale entries (deletions and new balls since the last merge)."""
    objects, events = adversarial_case(7, timestamps=6)
    worker = initial_worker(method, objects, events, t0=1, grid=4, kernel="numba")
    checked_delta = False
    for t in range(2, 7):
        apply_events(worker, events, t, in_batch=False)
        batch = objects.take(np.flatnonzero(objects.t == t))
        keys, owner = worker.index.probe(batch)
        sorted_probe = SortedProbe.of(keys, owner)
        assert np.all(np.diff(sorted_probe.keys) > 0)
        back_keys, back_owner = sorted_probe.pairs()
        assert sorted(zip(back_keys.tolist(), back_owner.tolist(), strict=True)) \
            == sorted(zip(keys.tolist(), owner.tolist(), strict=True))
        checked_delta |= worker.index.postings._sorted_delta()[0].shape[0] > 0  # noqa: SLF001
        plain = worker.index.lookup_accept(worker.state, batch, (keys, owner))
        fast = worker.index.lookup_accept(worker.state, batch, sorted_probe)
        assert np.array_equal(plain[4], fast[4]), (method, t)
        pairs = [sorted(zip(*(a.tolist() for a in found[:4]), strict=True)) for found in (plain, fast)]
        assert pairs[0] == pairs[1], (method, t)
        assert plain[0].shape[0] > 0, "the case must accept pairs to compare"
        worker.process(batch, sorted_probe)
    assert checked_delta, "the case must leave entries in the postings' delta"
    expected = oracle_results(objects, events, 6, t0=1)
    assert results_equal(worker.results(), expected)
    empty = SortedProbe.of(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert empty.keys.shape[0] == 0 and empty.ptr.tolist() == [0]


#: Grid layouts the compiled and numpy postings and probes are held to: the default, every
#: pyramid level with 9 cells a ball, and every other level with a wide cap at coarse levels.
LAYOUTS = [{}, {"level_step": 1, "max_cells": 9, "wide_cells": 9},
           {"level_step": 2, "max_cells": 4, "wide_cells": 36, "wide_side": 8}]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_grid_entries_identical_inside_outside_and_unbounded(layout: dict, rng: np.random.Generator) -> None:
    """The compiled postings of balls (GridIndex._entries) equal the reference key for key and
    in order: small and huge balls, balls hanging over the space's edge, centres far outside
    it (the hashed outside lattice, negative cells), and unbounded balls (fewer than k results)."""
    space = Rect(0.0, 0.0, 100.0, 50.0)
    n = 400
    x = np.concatenate([rng.uniform(0, 100, 300), rng.uniform(-5e6, 5e6, 60), rng.uniform(-3, 103, 40)])
    y = np.concatenate([rng.uniform(0, 50, 300), rng.uniform(-5e6, 5e6, 60), rng.uniform(-3, 53, 40)])
    kws = KeywordSets.from_lists([rng.choice(50, int(rng.integers(1, 4)), replace=False).tolist() for _ in range(n)])
    subs = Subscriptions(np.arange(n, dtype=np.int64), x, y, kws, np.full(n, 2, dtype=np.int32),
                         np.zeros(n, dtype=np.int64))
    radius = np.concatenate([rng.uniform(0, 0.3, 200), rng.uniform(0, 40, 150), rng.uniform(1e3, 1e7, 50)])
    rng.shuffle(radius)
    ids = np.tile(np.array([7, 9], dtype=np.int64), (n, 1))
    d2 = np.stack([radius * radius / 4, radius * radius], axis=1)
    ids[::9, 1] = -1  # every ninth result not full: an unbounded ball
    d2[::9, 1] = np.inf
    state = KnnState(width=2)
    rows = state.add(subs, (ids, d2))
    out = {}
    for k in ("numba", "numpy"):
        index = GridIndex(space, 64, kernel=k, **layout)
        out[k] = index._entries(state, rows)  # noqa: SLF001 - the function under comparison
    (ka, oa, ra), (kb, ob, rb) = out.values()
    assert ka.shape[0] > 5 * n  # the case exercises many cells and keywords
    assert np.array_equal(ka, kb) and np.array_equal(oa, ob) and np.array_equal(ra, rb)
    assert ((ka >> 32) >= GridIndex(space, 64).outside_base).any()  # the outside lattice was reached


def _index_arrays(index: GridIndex) -> dict[str, np.ndarray]:
    """Everything a grid index's re-index writes: per-row radii, epochs and entry counts, the
    postings' unsorted delta (in insertion order) and their stale count."""
    p = index.postings
    keys, rows, epochs = p.pending()
    return {"r_indexed": index.r_indexed.view(np.int64), "epoch": index.epoch, "row_entries": index.row_entries,
            "keys": keys, "rows": rows, "epochs": epochs, "filter": p._present,  # noqa: SLF001
            "n_stale": np.array([p.n_stale]), "n_delta": np.array([p.n_delta])}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_grid_reindex_identical_to_the_numpy_path(layout: dict, rng: np.random.Generator) -> None:
    """The compiled re-index (GridIndex.add and .updated in one call) writes what the numpy
    path writes, array for array: which rows shrank enough to be re-posted (balls shrunk
    by various ratios, unbounded ones, freed rows, a row given twice), their radii and
    epochs, the stale count and the new postings in order."""
    space = Rect(0.0, 0.0, 100.0, 50.0)
    n = 300
    x = np.concatenate([rng.uniform(0, 100, 240), rng.uniform(-5e6, 5e6, 30), rng.uniform(-3, 103, 30)])
    y = np.concatenate([rng.uniform(0, 50, 240), rng.uniform(-5e6, 5e6, 30), rng.uniform(-3, 53, 30)])
    kws = KeywordSets.from_lists([rng.choice(50, int(rng.integers(1, 4)), replace=False).tolist() for _ in range(n)])
    k = rng.integers(1, 3, n).astype(np.int32)
    subs = Subscriptions(np.arange(n, dtype=np.int64), x, y, kws, k, np.zeros(n, dtype=np.int64))
    radius = np.concatenate([rng.uniform(0, 0.3, 100), rng.uniform(0, 40, 150), rng.uniform(1e3, 1e7, 50)])
    rng.shuffle(radius)
    ids = np.tile(np.array([7, 9], dtype=np.int64), (n, 1))
    d2 = np.stack([radius * radius / 4, radius * radius], axis=1)
    ids[::7, 1] = -1  # every seventh result not full: unbounded when k = 2
    d2[::7, 1] = np.inf
    state = KnnState(width=2)
    rows = state.add(subs, (ids, d2))
    indexes = {kn: GridIndex(space, 64, kernel=kn, **layout) for kn in ("numba", "numpy")}
    for index in indexes.values():
        index.add(state, rows)
    a, b = (_index_arrays(index) for index in indexes.values())
    assert a.keys() == b.keys() and all(np.array_equal(a[name], b[name]) for name in a), "after add"
    reposted = 0
    for step in range(4):
        # Shrink some balls: by a quarter (not re-posted at shrink = 0.5), to a tenth (re-posted),
        # to zero; fill some unbounded ones; free a few rows; ask for one row twice.
        pick = rng.choice(n, 80, replace=False)
        factor = rng.choice([0.75, 0.1, 0.0], pick.shape[0])
        state.d2[pick] = np.where(np.isinf(state.d2[pick]), radius[pick, None] ** 2, state.d2[pick])
        state.d2[pick] *= factor[:, None] ** 2
        freed = state.remove(rng.choice(n, 3, replace=False)) if step == 1 else np.zeros(0, dtype=np.int64)
        state.d2[freed] = 0.0  # a freed row would be re-posted, were it not skipped
        for index in indexes.values():
            if freed.shape[0]:
                index.forget(freed)
            before = index.postings.n_delta
            index.updated(state, np.concatenate([pick, pick[:1], freed]))
        reposted += indexes["numpy"].postings.n_delta - before
        a, b = (_index_arrays(index) for index in indexes.values())
        differ = [name for name in a if not np.array_equal(a[name], b[name])]
        assert not differ, (step, differ)
    assert reposted > 50 and indexes["numpy"].postings.n_stale > 0  # rows were re-posted, entries made stale


def test_forget_identical_to_the_numpy_path_also_beyond_the_indexed_rows() -> None:
    """The compiled forget (epochs bumped, entry counts zeroed, the stale count raised) writes
    what the numpy path writes, and hands rows beyond the per-row arrays to it (they grow)."""
    space = Rect(0.0, 0.0, 10.0, 10.0)
    n = 40
    kws = KeywordSets.from_lists([[i % 5, 7] for i in range(n)])
    subs = Subscriptions(np.arange(n, dtype=np.int64), np.linspace(0, 10, n), np.linspace(10, 0, n), kws,
                         np.ones(n, dtype=np.int32), np.zeros(n, dtype=np.int64))
    state = KnnState(width=1)
    rows = state.add(subs, (np.full((n, 1), 3), np.full((n, 1), 0.5)))
    indexes = {kn: GridIndex(space, 16, kernel=kn) for kn in ("numba", "numpy")}
    gone = rows[[3, 17, 8]]
    for index in indexes.values():
        index.add(state, rows)
    held = int(indexes["numpy"].row_entries[gone].sum())
    for index in indexes.values():
        index.forget(gone)
    a, b = (_index_arrays(index) for index in indexes.values())
    assert all(np.array_equal(a[name], b[name]) for name in a)
    assert held >= 6 and a["n_stale"][0] == held
    assert a["epoch"][gone].tolist() == [1, 1, 1] and a["row_entries"][gone].tolist() == [0, 0, 0]
    held += int(a["row_entries"][2])
    beyond = np.array([a["epoch"].shape[0] + 5, 2], dtype=np.int64)
    for index in indexes.values():
        index.forget(beyond)
    a, b = (_index_arrays(index) for index in indexes.values())
    assert all(np.array_equal(a[name], b[name]) for name in a)
    assert a["epoch"].shape[0] > beyond[0] and a["epoch"][beyond].tolist() == [1, 1] and a["n_stale"][0] == held


@pytest.mark.parametrize(("levels", "layout"), [("pyramid", lay) for lay in LAYOUTS] + [("flat", {})])
def test_grid_probe_identical_inside_and_outside(levels: str, layout: dict, rng: np.random.Generator) -> None:
    """The compiled probe (each object's cell at every level under each keyword) equals the
    reference key for key and in order, for objects inside the space, on its edges and far
    outside it (the outside lattice)."""
    space = Rect(0.0, 0.0, 100.0, 50.0)
    n = 300
    x = np.concatenate([rng.uniform(0, 100, 200), [0.0, 100.0, 0.0, 100.0], rng.uniform(-1e6, 1e6, 96)])
    y = np.concatenate([rng.uniform(0, 50, 200), [0.0, 50.0, 50.0, 0.0], rng.uniform(-1e6, 1e6, 96)])
    kws = KeywordSets.from_lists([rng.choice(40, int(rng.integers(1, 5)), replace=False).tolist() for _ in range(n)])
    objects = Objects(np.arange(n, dtype=np.int64), x, y, kws, np.ones(n, dtype=np.int64))
    (ka, oa), (kb, ob) = (GridIndex(space, 64, levels=levels, kernel=k, **layout).probe(objects)
                          for k in ("numba", "numpy"))
    assert ka.shape[0] > 3 * n
    assert np.array_equal(ka, kb) and np.array_equal(oa, ob)


@pytest.mark.parametrize(("levels", "layout"), [("pyramid", lay) for lay in LAYOUTS] + [("flat", {})])
def test_grid_sorted_probe_is_the_sorted_form_of_the_probe(levels: str, layout: dict,
                                                            rng: np.random.Generator) -> None:
    """The grid's probe sorted directly (by keyword once, then by cell per level) gives the
    arrays SortedProbe.of gives for the probe, key for key and owner for owner: many objects
    sharing cells and keywords (equal keys, owners in their order), objects on the space's
    edges, keyword ids of up to 2^31 - 1, objects without keywords; with an object outside the
    space it declines and the index's sorted probe takes the general path (the same arrays)."""
    from dkmsks.core import kernel

    space = Rect(0.0, 0.0, 100.0, 50.0)
    n = 600
    # The space's far edges belong to the outside lattice (cell G): the last inside values.
    x_top, y_top = np.nextafter(100.0, 0.0), np.nextafter(50.0, 0.0)
    x = np.concatenate([rng.uniform(0, 100, 500), [0.0, x_top, 0.0, x_top], rng.uniform(40, 41, 96)])
    y = np.concatenate([rng.uniform(0, 50, 500), [0.0, y_top, y_top, 0.0], rng.uniform(20, 21, 96)])
    lists = [rng.choice(30, int(rng.integers(0, 5)), replace=False).tolist() for _ in range(n)]
    lists[7] = [2**31 - 1, 5, 70_000]
    kws = KeywordSets.from_lists(lists)
    objects = Objects(np.arange(n, dtype=np.int64), x, y, kws, np.ones(n, dtype=np.int64))
    index = GridIndex(space, 64, levels=levels, kernel="numba", **layout)
    expected = SortedProbe.of(*index.probe(objects))
    direct = kernel.grid_sorted_probe(index, objects, lattice_limit=1 << 40, kw_bits=32)
    assert direct is not None
    assert np.diff(expected.ptr).max() > 3  # keys asked for by several objects
    for got in (direct, index.sorted_probe(objects)):
        for name in ("keys", "ptr", "owners"):
            assert np.array_equal(getattr(got, name), getattr(expected, name)), name
    outside = Objects(np.arange(3, dtype=np.int64), np.array([5.0, 150.0, 7.0]), np.array([5.0, 5.0, 7.0]),
                      KeywordSets.from_lists([[1], [1, 2], [2]]), np.ones(3, dtype=np.int64))
    assert kernel.grid_sorted_probe(index, outside, lattice_limit=1 << 40, kw_bits=32) is None
    expected = SortedProbe.of(*index.probe(outside))
    got = index.sorted_probe(outside)
    assert all(np.array_equal(getattr(got, a), getattr(expected, a)) for a in ("keys", "ptr", "owners"))
    empty = objects.take(np.zeros(0, dtype=np.int64))
    got = kernel.grid_sorted_probe(index, empty, lattice_limit=1 << 40, kw_bits=32)
    assert got is not None and got.keys.shape[0] == 0 and got.ptr.tolist() == [0]
