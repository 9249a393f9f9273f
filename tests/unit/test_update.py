"""Exact kNN update of one worker (core/update.py, core/knn_state.py) against the oracle.

Expected results always come from :mod:`dkmsks.core.oracle` (brute force), never from the code
under test. The helpers here (adversarial cases, a one-worker driver, an independent count of
the minimum possible work) are also used by ``test_worker_index.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.knn_state import KnnState
from dkmsks.core.model import (
    KeywordSets,
    Objects,
    Op,
    Results,
    SubscriptionEvents,
    Subscriptions,
    data_space,
    describe_difference,
    results_equal,
)
from dkmsks.core.oracle import brute_force_knn, live_subscriptions, oracle_results
from dkmsks.core.update import UpdateStats, Worker, merge_results

pytestmark = pytest.mark.unit

METHODS = ("kop", "sop", "dkm")


# ---------------------------------------------------------------------------- helpers
def events_from_rows(rows: list[tuple]) -> SubscriptionEvents:
    """``rows`` of ``(op, id, x, y, keywords, k, t)``."""
    return SubscriptionEvents(
        np.array([r[0] for r in rows], dtype=np.int8),
        np.array([r[1] for r in rows], dtype=np.int64),
        np.array([r[2] for r in rows], dtype=np.float64),
        np.array([r[3] for r in rows], dtype=np.float64),
        KeywordSets.from_lists([r[4] for r in rows]),
        np.array([r[5] for r in rows], dtype=np.int32),
        np.array([r[6] for r in rows], dtype=np.int64),
    )


def adversarial_case(
    seed: int,
    *,
    n_obj: int = 300,
    n_sub: int = 50,
    timestamps: int = 6,
    n_kw: int = 6,
    colocated: bool = False,
    same_keywords: bool = False,
) -> tuple[Objects, SubscriptionEvents]:
    """Objects and events stressing the update.

    Coordinates on a coarse lattice (many exact distance ties, broken by id), some objects and
    subscriptions outside the data space of ``O_init``, subscription keywords drawn from a
    larger vocabulary than the objects' (keywords absent from ``O_init``), ``k`` up to 8 (often
    more than the matches), ids not in stream order, deletions and re-registrations.
    """
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(0, timestamps + 1, n_obj))
    if colocated:
        x = rng.choice([1.0, 2.0], n_obj)
        y = np.full(n_obj, 1.0)
    else:
        x = np.round(rng.uniform(0, 10, n_obj), 1)
        y = np.round(rng.uniform(0, 10, n_obj), 1)
    later = t > 0
    outside = later & (rng.random(n_obj) < 0.1)
    x[outside] += rng.choice([-40.0, 40.0], int(outside.sum()))
    y[outside] -= 25.0
    if same_keywords:
        kws = [[0] for _ in range(n_obj)]
    else:
        kws = [list(rng.choice(n_kw, rng.integers(1, 4), replace=False)) for _ in range(n_obj)]
    ids = rng.permutation(10 * n_obj)[:n_obj]
    objects = Objects.build(ids, x, y, kws, t)

    rows: list[tuple] = []
    live: list[int] = []
    deleted: list[int] = []
    next_id = 0
    for ts in range(timestamps + 1):
        if ts > 0 and live:
            for sid in rng.choice(live, min(len(live), 4), replace=False).tolist():
                rows.append((Op.DELETE, sid, np.nan, np.nan, [], 0, ts))
                live.remove(sid)
                deleted.append(sid)
        n_new = n_sub if ts == 0 else 6
        for _ in range(n_new):
            if deleted and rng.random() < 0.2:
                sid = deleted.pop(0)  # a deleted id registered again
            else:
                sid, next_id = next_id, next_id + 1
            j = int(rng.integers(n_obj))
            if colocated or rng.random() < 0.5:
                sx, sy = float(x[j]), float(y[j])
            else:
                sx, sy = float(rng.uniform(-5, 15)), float(rng.uniform(-5, 15))
            skw = [0] if same_keywords else list(rng.choice(n_kw + 2, rng.integers(1, 4), replace=False))
            rows.append((Op.INSERT, sid, sx, sy, skw, int(rng.integers(1, 9)), ts))
            live.append(sid)
    return objects, events_from_rows(rows)


def knn_matrices(results: Results, subs: Subscriptions) -> tuple[np.ndarray, np.ndarray]:
    """Oracle results as kNN matrices (rows in ``subs`` order, padded -1/+inf)."""
    width = max(int(subs.k.max()) if len(subs) else 1, 1)
    ids = np.full((len(subs), width), -1, dtype=np.int64)
    d2 = np.full((len(subs), width), np.inf)
    for i, sid in enumerate(subs.ids.tolist()):
        r = results[sid]
        ids[i, : len(r.object_ids)] = r.object_ids
        d2[i, : len(r.object_ids)] = r.d2
    return ids, d2


def initial_worker(
    method: str, objects: Objects, events: SubscriptionEvents, t0: int = 0, **options
) -> Worker:
    """A worker holding every initial subscription with its oracle kNN within ``O_init``."""
    o_init = objects.take(np.flatnonzero(objects.t <= t0))
    subs = live_subscriptions(events, t0, t0=t0)
    worker = Worker(method, data_space(o_init, subs), **options)
    worker.add(subs, knn_matrices(brute_force_knn(o_init, subs, t0), subs))
    worker.index.maintain(worker.state, force=True)
    return worker


def apply_events(worker: Worker, events: SubscriptionEvents, t: int, *, in_batch: bool) -> None:
    """Deletions then insertions of timestamp ``t`` (docs/design.md §1)."""
    rows = np.flatnonzero(events.t == t)
    dels = rows[events.op[rows] == Op.DELETE]
    ins = rows[events.op[rows] == Op.INSERT]
    worker.remove(events.ids[dels], t=t if in_batch else None)
    worker.add(events.take(ins).insertions())


def drive(
    worker: Worker,
    objects: Objects,
    events: SubscriptionEvents,
    *,
    t0: int = 0,
    batch: int = 1,
    check: bool = True,
    cache: dict[int, Results] | None = None,
) -> list[UpdateStats]:
    """Run timestamps ``t0+1..T`` in batches of ``batch`` timestamps; compare with the oracle
    after every batch (``cache`` keeps oracle results per timestamp across calls). Returns the
    stats of each batch."""
    last = int(max(objects.t.max(), events.t.max()))
    ts = list(range(t0 + 1, last + 1))
    out = []
    for b in range(0, len(ts), batch):
        chunk = ts[b : b + batch]
        for t in chunk:
            apply_events(worker, events, t, in_batch=batch > 1)
        rows = np.flatnonzero((objects.t >= chunk[0]) & (objects.t <= chunk[-1]))
        out.append(worker.process(objects.take(rows)))
        if check:
            if cache is None or chunk[-1] not in cache:
                expected = oracle_results(objects, events, chunk[-1], t0=t0)
                if cache is not None:
                    cache[chunk[-1]] = expected
            expected = cache[chunk[-1]] if cache is not None else expected
            got = worker.results()
            assert results_equal(got, expected), (
                f"{worker.method} t={chunk}: " + describe_difference(got, expected)
            )
    return out


def minimum_work(objects: Objects, events: SubscriptionEvents, t: int, *, t0: int = 0) -> int:
    """Pairs (object of ``t``, subscription live at ``t``) whose object lies in the ball at the
    start of ``t`` — computed from the oracle only (docs/design.md §3 fact 6 "minimum possible work")."""
    before = oracle_results(objects, events, t - 1, t0=t0)
    subs = live_subscriptions(events, t, t0=t0)
    new = np.flatnonzero(objects.t == t)
    count = 0
    for i, sid in enumerate(subs.ids.tolist()):
        # Registered at t (possibly an id deleted earlier): starts empty (docs/design.md §1).
        res = before.get(sid) if subs.t[i] < t else None
        k = int(subs.k[i])
        full = res is not None and len(res.object_ids) >= k
        skw = set(subs.keywords.row(i).tolist())
        for r in new.tolist():
            if not skw & set(objects.keywords.row(r).tolist()):
                continue
            dx = objects.x[r] - subs.x[i]
            dy = objects.y[r] - subs.y[i]
            d2 = dx * dx + dy * dy
            if not full or (d2, objects.ids[r]) < (res.d2[k - 1], res.object_ids[k - 1]):
                count += 1
    return count


# ---------------------------------------------------------------------------- tests
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", range(4))
def test_adversarial_per_timestamp_equals_oracle(method: str, seed: int) -> None:
    objects, events = adversarial_case(seed)
    drive(initial_worker(method, objects, events, grid=4), objects, events)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("batch", [2, 3, 7])
def test_multi_timestamp_batches_equal_oracle(method: str, batch: int) -> None:
    """docs/design.md §3 fact 2: any grouping of timestamps gives the oracle's results."""
    objects, events = adversarial_case(11 + batch, timestamps=7)
    drive(initial_worker(method, objects, events, grid=3), objects, events, batch=batch)


@pytest.mark.parametrize("method", METHODS)
def test_batch_equals_per_timestamp_state(method: str) -> None:
    objects, events = adversarial_case(5, timestamps=8)
    one = initial_worker(method, objects, events, grid=5)
    drive(one, objects, events, batch=1, check=False)
    many = initial_worker(method, objects, events, grid=5)
    drive(many, objects, events, batch=8, check=False)
    assert results_equal(one.results(), many.results()), describe_difference(
        one.results(), many.results()
    )
    assert results_equal(one.results(), oracle_results(objects, events, 8))


@pytest.mark.parametrize("method", METHODS)
def test_colocated_ties_broken_by_id(method: str) -> None:
    objects, events = adversarial_case(3, colocated=True, same_keywords=True)
    drive(initial_worker(method, objects, events, grid=2), objects, events)


@pytest.mark.parametrize("method", METHODS)
def test_identical_keywords_everywhere(method: str) -> None:
    objects, events = adversarial_case(8, same_keywords=True)
    drive(initial_worker(method, objects, events, grid=6), objects, events)


def test_hand_case_ties_k_and_registration() -> None:
    """A tiny case checked by eye as well as by the oracle."""
    objects = Objects.build(
        ids=[5, 3, 9, 4, 7, 8],
        x=[1.0, 1.0, 0.0, 1.0, -1.0, 100.0],
        y=[0.0, 0.0, 0.0, 0.0, 0.0, 100.0],
        keywords=[[0], [0], [1], [0, 1], [0], [2]],
        t=[0, 1, 1, 2, 2, 2],
    )
    events = events_from_rows(
        [
            (Op.INSERT, 1, 0.0, 0.0, [0], 2, 0),
            (Op.INSERT, 2, 0.0, 0.0, [2, 7], 3, 0),  # keyword 7 never appears
            (Op.INSERT, 3, 0.0, 0.0, [0, 1], 1, 2),  # registered at 2: sees t=2 only
        ]
    )
    for method in METHODS:
        worker = initial_worker(method, objects, events, grid=2)
        drive(worker, objects, events)
        res = worker.results()
        # Four objects at d²=1 with keyword 0: ids 3, 4, 5, 7 -> the two smallest ids.
        assert res[1].object_ids.tolist() == [3, 4]
        assert res[2].object_ids.tolist() == [8]
        assert res[3].object_ids.tolist() == [4]


@pytest.mark.parametrize("method", METHODS)
def test_counters_deterministic_and_at_least_minimum_work(method: str) -> None:
    objects, events = adversarial_case(21, timestamps=5)
    runs = []
    for _ in range(2):
        stats = drive(initial_worker(method, objects, events, grid=4), objects, events, check=False)
        runs.append([(s.pairs_tested, s.pairs_accepted, s.subs_updated) for s in stats])
    assert runs[0] == runs[1]
    for t, (tested, accepted, updated) in enumerate(runs[0], start=1):
        assert accepted == minimum_work(objects, events, t)
        assert tested >= accepted >= updated


def test_merge_results_keeps_k_best_by_distance_then_id() -> None:
    state = KnnState(width=3)
    subs = Subscriptions.build([10, 11], [0.0, 0.0], [0.0, 0.0], [[0], [0]], [3, 1], [0, 0])
    state.add(subs, (np.array([[1, 2, -1], [6, -1, -1]]), np.array([[1.0, 4.0, np.inf], [2.0, np.inf, np.inf]])))
    rows = state.rows_of([10, 10, 11, 11])
    merge_results(state, rows, np.array([0, 3, 5, 4]), np.array([4.0, 0.5, 2.0, 3.0]))
    res = state.results()
    assert res[10].object_ids.tolist() == [3, 1, 0]
    assert res[10].d2.tolist() == [0.5, 1.0, 4.0]
    assert res[11].object_ids.tolist() == [5]


def test_state_rows_recycled_and_ids_reusable() -> None:
    state = KnnState()
    subs = Subscriptions.build([1, 2, 3], [0.0] * 3, [0.0] * 3, [[0], [1], [2, 3]], [1, 2, 5], [0] * 3)
    rows = state.add(subs)
    assert state.K == 5 and len(state) == 3
    state.remove([2])
    assert len(state) == 2 and state.rows_of([2]).tolist() == [-1]
    again = state.add(Subscriptions.build([2], [1.0], [1.0], [[7]], [1], [4]))
    assert again[0] == rows[1]  # the freed row is recycled
    assert state.keywords_of(again).ids.tolist() == [7]
    assert state.keywords_of(rows[2:]).ids.tolist() == [2, 3]
    with pytest.raises(ValueError, match="already live"):
        state.add(Subscriptions.build([3], [0.0], [0.0], [[0]], [1], [0]))


@pytest.mark.parametrize("method", METHODS)
def test_state_round_trip_through_arrays(method: str) -> None:
    """A Spark task rebuilds a worker from arrays between batches: still exact."""
    objects, events = adversarial_case(31, timestamps=6)
    worker = initial_worker(method, objects, events, grid=3)
    for t in range(1, 7):
        apply_events(worker, events, t, in_batch=False)
        worker.process(objects.take(np.flatnonzero(objects.t == t)))
        worker = Worker.from_arrays(method, worker.space, worker.to_arrays(), grid=3)
        assert results_equal(worker.results(), oracle_results(objects, events, t))


@pytest.mark.parametrize("method", METHODS)
def test_replayed_batch_changes_nothing(method: str) -> None:
    """A retried task may process the same objects twice: the result must not change."""
    objects, events = adversarial_case(17, timestamps=3)
    worker = initial_worker(method, objects, events, grid=3)
    for t in range(1, 4):
        apply_events(worker, events, t, in_batch=False)
        batch = objects.take(np.flatnonzero(objects.t == t))
        worker.process(batch)
        again = worker.process(batch)
        assert again.subs_updated == 0
        assert results_equal(worker.results(), oracle_results(objects, events, t))


def test_merge_matches_full_sort_on_random_input(rng: np.random.Generator) -> None:
    """The sort-free merge equals sorting each row's union by (d², id) and keeping k."""
    n, width = 60, 6
    state = KnnState(width=width)
    k = rng.integers(1, width + 1, n)
    subs = Subscriptions.build(np.arange(n), np.zeros(n), np.zeros(n), [[0]] * n, k, np.zeros(n))
    fill = rng.integers(0, width + 1, n)
    ids = np.full((n, width), -1)
    d2 = np.full((n, width), np.inf)
    expected_sets = []
    next_id = 0
    for i in range(n):
        m = min(fill[i], k[i])
        vals = np.sort(rng.integers(0, 5, m).astype(float))
        ids[i, :m] = np.arange(next_id, next_id + m)
        d2[i, :m] = vals
        next_id += m
        expected_sets.append(list(zip(vals.tolist(), ids[i, :m].tolist(), strict=True)))
    rows = state.add(subs, (ids, d2))
    acc_rows = rng.integers(0, n, 150)
    acc_d2 = rng.integers(0, 5, 150).astype(float)
    acc_ids = np.arange(next_id, next_id + 150)[rng.permutation(150)]
    merge_results(state, rows[acc_rows], acc_ids, acc_d2)
    for r, dd, oo in zip(acc_rows.tolist(), acc_d2.tolist(), acc_ids.tolist(), strict=True):
        expected_sets[r].append((dd, oo))
    res = state.results()
    for i in range(n):
        best = sorted(expected_sets[i])[: k[i]]
        assert res[i].object_ids.tolist() == [o for _, o in best]
        assert res[i].d2.tolist() == [d for d, _ in best]


@pytest.mark.parametrize("method", METHODS)
def test_each_steps_updated_rows_are_exactly_the_changed_results(method: str) -> None:
    """What a worker task writes as a timestamp's ``update`` changes: the rows of
    ``step.stats.updated_rows``, read right after the step (:mod:`dkmsks.spark.bridge`)."""
    objects, events = adversarial_case(23, timestamps=4)
    worker = initial_worker(method, objects, events, grid=3)
    state = worker.state
    for t in range(1, 5):
        before = oracle_results(objects, events, t - 1)
        apply_events(worker, events, t, in_batch=True)
        got: dict[int, list[int]] = {}
        for step in worker.process_stepwise(objects.take(np.flatnonzero(objects.t == t)), through=t):
            assert step.t == t
            for row in step.stats.updated_rows.tolist():
                n = int((state.ids[row] >= 0).sum())
                got[int(state.sub_id[row])] = state.ids[row, :n].tolist()
            assert len(got) == step.stats.updated_rows.shape[0]  # each row once
        after = oracle_results(objects, events, t)
        live_now = live_subscriptions(events, t)
        new_at_t = set(live_now.ids[live_now.t == t].tolist())  # incl. re-registered ids
        expected = {
            sid for sid, r in after.items()
            if sid not in new_at_t and not np.array_equal(before[sid].object_ids, r.object_ids)
        }
        # Every old subscription whose result changed is written, and only changed or new ones.
        assert expected <= set(got) <= expected | new_at_t
        for sid, ids in got.items():
            assert ids == after[sid].object_ids.tolist()


def _results_live_at(state: KnnState, t: int) -> Results:
    """Results of the rows live at ``t`` (registered at or before, not deleted at or before)."""
    from dkmsks.core.model import KnnResult

    n = state.n_rows
    rows = np.flatnonzero(state.in_use[:n] & (state.t[:n] <= t) & (t < state.end_t[:n]))
    out: Results = {}
    for row in rows.tolist():
        kk = int(state.k[row])
        got = state.ids[row, :kk]
        m = int(np.count_nonzero(got >= 0))
        out[int(state.sub_id[row])] = KnnResult(got[:m].copy(), state.d2[row, :m].copy())
    return out


def _pairs_in_ball(objects: Objects, events: SubscriptionEvents, oracle: dict, t: int) -> int:
    """The minimum work of timestamp ``t`` from the oracle: (subscription, object) pairs of the
    subscriptions live at ``t`` and the objects of ``t`` sharing a keyword, whose ``(d², id)``
    comes before the subscription's k-th result at ``t - 1`` (anything, for one registered at
    ``t`` or with fewer than ``k`` results)."""
    count = 0
    at_t = np.flatnonzero(objects.t == t)
    for sid in oracle[t]:
        inserts = np.flatnonzero((events.ids == sid) & (events.op == Op.INSERT) & (events.t <= t))
        e = int(inserts[-1])
        before = oracle[t - 1].get(sid) if events.t[e] < t else None
        k = int(events.k[e])
        full = before is not None and before.object_ids.shape[0] >= k
        kd2, kid = (float(before.d2[k - 1]), int(before.object_ids[k - 1])) if full else (np.inf, -1)
        words = set(events.keywords.row(e).tolist())
        for i in at_t.tolist():
            if not words & set(objects.keywords.row(i).tolist()):
                continue
            dx, dy = objects.x[i] - events.x[e], objects.y[i] - events.y[e]
            d2, oid = dx * dx + dy * dy, int(objects.ids[i])
            count += kid < 0 or d2 < kd2 or (d2 == kd2 and oid < kid)
    return count


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_stepwise_batches_show_the_oracle_after_every_timestamp(method: str, batch: int) -> None:
    """Processed in batches of 1, 3 or 8 timestamps: the state after each timestamp equals the
    oracle's, and the rows reported changed at t are exactly the subscriptions whose oracle
    result changed at t (one inserted at t: whenever it has a result); the pairs counted in the
    balls at t are the oracle's minimum work of t, whatever the batch."""
    objects, events = adversarial_case(40 + batch, timestamps=8)
    worker = initial_worker(method, objects, events, grid=4)
    oracle = {t: oracle_results(objects, events, t) for t in range(9)}
    seen = []
    for b in range(1, 9, batch):
        chunk = list(range(b, min(b + batch, 9)))
        for t in chunk:
            apply_events(worker, events, t, in_batch=True)
        rows = np.flatnonzero((objects.t >= chunk[0]) & (objects.t <= chunk[-1]))
        for step in worker.process_stepwise(objects.take(rows)):
            t = step.t
            seen.append(t)
            got = _results_live_at(worker.state, t)
            assert results_equal(got, oracle[t]), f"{method} t={t}: " + describe_difference(got, oracle[t])
            registered = set(events.ids[(events.t == t) & (events.op == Op.INSERT)].tolist())
            expected_changed = {
                sid for sid, r in oracle[t].items()
                if (sid in registered and len(r.object_ids))
                or (sid not in registered and not np.array_equal(r.object_ids, oracle[t - 1][sid].object_ids))
            }
            changed = {int(worker.state.sub_id[r]) for r in step.stats.updated_rows.tolist()}
            assert changed == expected_changed, (method, t)
            assert step.stats.pairs_tested >= step.stats.pairs_accepted >= 0
            assert step.stats.pairs_accepted == _pairs_in_ball(objects, events, oracle, t), (method, t)
        assert results_equal(worker.results(), oracle[chunk[-1]])
    assert seen == sorted(set(objects.t[objects.t > 0].tolist()))
