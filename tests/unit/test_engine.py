"""In-memory engine (core/engine.py): m simulated workers equal the oracle; metrics are sane.

Most tests place the subscriptions with a round-robin main server written here, with initial
states from the oracle's brute-force kNN within ``O_init``; the ``build_engine`` tests run the
real initial phase (each method's plan and main server).
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import numpy as np
import pytest

from dkmsks.core.config import PartitionConfig
from dkmsks.core.engine import Engine, build_engine, initial_phase
from dkmsks.core.model import (
    Objects,
    SubscriptionEvents,
    Subscriptions,
    data_space,
    describe_difference,
    results_equal,
)
from dkmsks.core.oracle import brute_force_knn, live_subscriptions, oracle_results
from dkmsks.core.workload import WorkloadSpec, generate_workload
from test_update import METHODS, adversarial_case, knn_matrices, minimum_work

pytestmark = pytest.mark.unit

CORE = Path(__file__).resolve().parents[2] / "lib" / "dkmsks" / "core"


class RoundRobin:
    """A trivial main server: new subscriptions go to workers in turn."""

    def __init__(self, m: int, start: int = 0) -> None:
        self.m = m
        self.next = start
        self.deleted: list[int] = []

    def assign(self, subs: Subscriptions) -> np.ndarray:
        where = (self.next + np.arange(len(subs))) % self.m
        self.next = int((self.next + len(subs)) % self.m)
        return where.astype(np.int64)

    def delete(self, sub_ids: np.ndarray) -> None:
        self.deleted.extend(sub_ids.tolist())


def make_engine(
    method: str,
    m: int,
    objects: Objects,
    events: SubscriptionEvents,
    *,
    t0: int = 0,
    clock=None,
    **options,
) -> Engine:
    o_init, subs = initial_phase(objects, events, t0)
    knn = knn_matrices(brute_force_knn(o_init, subs, t0), subs)
    engine = Engine(method, data_space(o_init, subs), m, RoundRobin(m, start=1), clock=clock, **options)
    # SOP: region subsets by a coarse split of the space (any grouping is exact).
    groups = (subs.x > np.median(subs.x)).astype(np.int64) if len(subs) else None
    engine.load_initial(subs, knn, np.arange(len(subs)) % m, groups=groups, t0=t0)
    return engine


def check_against_oracle(engine: Engine, objects, events, checkpoints, cache=None, t0=0) -> list:
    metrics = []
    for t in checkpoints:
        metrics.extend(engine.run(objects, events, until=t))
        if cache is not None and t in cache:
            expected = cache[t]
        else:
            expected = oracle_results(objects, events, t, t0=t0)
            if cache is not None:
                cache[t] = expected
        got = engine.results()
        assert results_equal(got, expected), f"{engine.method} m={engine.m} t={t}: " + describe_difference(
            got, expected
        )
    return metrics


def test_initial_phase_matches_oracle_live_set() -> None:
    objects, events = adversarial_case(4, timestamps=5)
    for t0 in (0, 2, 4):
        o_init, subs = initial_phase(objects, events, t0)
        ref = live_subscriptions(events, t0, t0=t0)
        assert sorted(subs.ids.tolist()) == sorted(ref.ids.tolist())
        assert np.array_equal(subs.t, ref.t)
        assert len(o_init) == int((objects.t <= t0).sum())


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("m", [1, 2, 7, 20])
def test_engine_equals_oracle_adversarial(method: str, m: int) -> None:
    objects, events = adversarial_case(50 + m, timestamps=6)
    engine = make_engine(method, m, objects, events, grid=4)
    check_against_oracle(engine, objects, events, [1, 3, 6])


@pytest.mark.parametrize("method", METHODS)
def test_engine_with_later_initial_phase(method: str) -> None:
    """T0 > 0: O_init spans several timestamps (docs/design.md §6)."""
    objects, events = adversarial_case(77, timestamps=6)
    engine = make_engine(method, 3, objects, events, t0=2, grid=3)
    check_against_oracle(engine, objects, events, [3, 6], t0=2)


@pytest.fixture(scope="module")
def real_workload() -> dict:
    from conftest import real_objects

    source, _ = real_objects(10_000)
    spec = WorkloadSpec(
        o_init=6_000, subscriptions=1_500, timestamps=4, objects_per_ts=1_000,
        inserts_per_ts=100, deletes_per_ts=100, k_max=10, seed=9,
    )
    return {"workload": generate_workload(source, spec), "oracle": {}, "counters": {}}


@pytest.mark.realdata
@pytest.mark.parametrize(("method", "m"), list(itertools.product(METHODS, [1, 2, 7, 20])))
def test_engine_equals_oracle_real_data(method: str, m: int, real_workload: dict) -> None:
    objects, events = real_workload["workload"]
    engine = make_engine(method, m, objects, events, grid=64)
    metrics = check_against_oracle(engine, objects, events, [1, 2, 4], cache=real_workload["oracle"])
    assert [x.t for x in metrics] == [1, 2, 3, 4]
    # The minimum possible work is a property of the data, not of method or m.
    min_work = [x.min_work for x in metrics]
    seen = real_workload["counters"].setdefault("min_work", min_work)
    assert min_work == seen
    for x in metrics:
        assert x.work >= x.min_work
        assert x.worker_subs.sum() == len(live_subscriptions(events, x.t))
    # KOP and DkM-SKS test the same pairs whatever the partition (index entries are per sub).
    if method != "sop":
        work = [x.work for x in metrics]
        assert work == real_workload["counters"].setdefault(f"work-{method}", work)


def test_min_work_equals_independent_count() -> None:
    objects, events = adversarial_case(12, timestamps=4)
    engine = make_engine("dkm", 3, objects, events, grid=5)
    metrics = list(engine.run(objects, events))
    for x in metrics:
        assert x.min_work == minimum_work(objects, events, x.t)


def test_metrics_use_the_injected_clock() -> None:
    ticks = itertools.count()
    objects, events = adversarial_case(13, timestamps=3)
    engine = make_engine("kop", 4, objects, events, clock=lambda: float(next(ticks)))
    for x in engine.run(objects, events):
        # One tick for the probe the workers share (KOP's depends on the objects only), which
        # counts for every worker as each computes it in the real system, one for the worker.
        assert x.worker_time.shape == (4,) and np.all(x.worker_time == 2.0)
        assert x.time_knn == 2.0 and x.load_balance == 0.0
        assert x.update_time == x.time_knn + x.time_insert + x.time_delete
        assert x.work_imbalance >= 1.0
    no_clock = make_engine("kop", 4, objects, events)
    assert all(x.wall == 0.0 for x in no_clock.run(objects, events))


def test_insertion_and_deletion_times_count_the_slowest_worker_not_the_sum() -> None:
    """Workers update their indexes in parallel in the real system: a timestamp's insertion
    (deletion) time is the main server's part plus the slowest worker's, not the workers' sum."""
    now = [0.0]
    objects, events = adversarial_case(15, timestamps=4)
    engine = make_engine("kop", 4, objects, events, clock=lambda: now[0])

    def costing(fn, seconds):
        def timed(*args, **kwargs):
            now[0] += seconds
            return fn(*args, **kwargs)
        return timed

    server = engine.assigner
    server.assign = costing(server.assign, 10.0)
    server.delete = costing(server.delete, 20.0)
    for w, worker in enumerate(engine.workers):
        worker.add = costing(worker.add, 2.0)
        worker.remove = costing(worker.remove, 0.5 + w)
        worker.process = costing(worker.process, 0.0)
    seen = {"ins": 0, "del": 0}
    for x in engine.run(objects, events):
        if x.n_inserted:
            assert x.time_insert == 10.0 + 2.0  # the sum would be 10 + 2 per receiving worker
            seen["ins"] += max(x.n_inserted - 1, 0)
        else:
            assert x.time_insert == 0.0
        if x.n_deleted:
            assert x.time_delete == 20.0 + 3.5  # RoundRobin routes none: all 4 are asked, worker 3 slowest
            seen["del"] += 1
        else:
            assert x.time_delete == 0.0
    assert seen["ins"] and seen["del"]


def test_deleting_an_unknown_subscription_is_an_error() -> None:
    objects, events = adversarial_case(14, timestamps=2)
    engine = make_engine("dkm", 2, objects, events)
    with pytest.raises(ValueError, match="not live"):
        engine.step(1, np.array([10_000]), Subscriptions.build([], [], [], [], [], []), objects.take([]))


def test_core_modules_read_no_clock_and_no_spark() -> None:
    """docs/design.md §4 / STYLE: the core is pure numpy; timing is injected by the caller."""
    for name in ("engine.py", "update.py", "worker_index.py", "postings.py", "knn_state.py"):
        tree = ast.parse((CORE / name).read_text())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & {"time", "datetime", "pyspark", "delta", "os", "io", "pathlib"}, name


# ---------------------------------------------------------------------------- with the partitioners
@pytest.mark.parametrize(("method", "m"), list(itertools.product(METHODS, [1, 2, 7, 20])))
def test_build_engine_with_partitioner_equals_oracle(method: str, m: int) -> None:
    """The real initial phase: exact O_init kNN, the method's plan and main server."""
    objects, events = adversarial_case(60 + m, timestamps=6)
    config = PartitionConfig(method=method, workers=m, grid=4, theta=2, gamma1=3, gamma2=2)
    engine, setup = build_engine(config, objects, events, threads=2)
    assert setup.plan.m == m and setup.n_subscriptions == len(live_subscriptions(events, 0))
    check_against_oracle(engine, objects, events, [2, 4, 6])


@pytest.mark.realdata
@pytest.mark.parametrize(("method", "m"), list(itertools.product(METHODS, [1, 2, 7, 20])))
def test_build_engine_real_data_equals_oracle(method: str, m: int, real_workload: dict) -> None:
    objects, events = real_workload["workload"]
    config = PartitionConfig(method=method, workers=m, grid=64, theta=4, gamma1=50)
    engine, setup = build_engine(config, objects, events, threads=2)
    # Initial placement follows the plan.
    assert np.array_equal(engine.where(setup.plan.sub_ids), setup.plan.worker)
    metrics = check_against_oracle(engine, objects, events, [1, 3, 4], cache=real_workload["oracle"])
    assert [x.min_work for x in metrics] == real_workload["counters"].setdefault(
        "min_work", [x.min_work for x in metrics]
    )


@pytest.mark.realdata
@pytest.mark.parametrize("method", ["sop", "dkm"])
def test_the_refresh_hears_of_later_subscriptions_only_and_costs_alike(method: str, real_workload: dict) -> None:
    """The workers report the changed balls of subscriptions registered after the initial phase
    only (the main server never re-costs initial ones): the same re-costs, loads and placements
    as when every changed row is reported, also after an insertion dated before the initial
    phase's end (which turns the filter off)."""
    objects, events = real_workload["workload"]
    config = PartitionConfig(method=method, workers=7, grid=64, theta=4, gamma1=50)
    last = int(max(objects.t.max(), events.t.max()))
    heard: dict[str, list[int]] = {}
    recosted: dict[str, list[int]] = {}
    engines: dict[str, Engine] = {}
    for mode in ("later only", "every row"):
        engine, _ = build_engine(config, objects, events, threads=2)
        if mode == "every row":
            engine._initial_t = None  # noqa: SLF001 - the unfiltered reference
        real = engine._refresh  # noqa: SLF001
        assert real is not None
        heard[mode], recosted[mode] = [], []

        def spy(ids, r2, real=real, mode=mode):  # noqa: ANN001, ANN202
            heard[mode].append(len(ids))
            recosted[mode].append(real(ids, r2))
            return recosted[mode][-1]

        engine._refresh = spy  # noqa: SLF001
        list(engine.run(objects, events))
        # An insertion dated t = 0 (not after the initial phase), then an object that fills
        # each one's ball (k = 1): re-costed only if the refresh still hears of them.
        src = objects.take(np.arange(5))
        words = [src.keywords.row(i).tolist() for i in range(5)]
        early = Subscriptions.build([10**9 + i for i in range(5)], src.x, src.y, words, [1] * 5, [0] * 5)
        engine.step(last + 1, [], early, objects.take(np.zeros(0, dtype=np.int64)))
        near = Objects.build(np.arange(5) + 10**9, src.x + 1e-9, src.y, words, [last + 2] * 5)
        engine.step(last + 2, [], early.take(np.zeros(0, dtype=np.int64)), near)
        engines[mode] = engine
    a, b = engines.values()
    assert sum(recosted["later only"]) == sum(recosted["every row"]) > 0
    assert sum(heard["later only"]) < sum(heard["every row"])  # the filter did filter
    assert np.array_equal(a.assigner.load_weight, b.assigner.load_weight)
    ids = np.concatenate([live_subscriptions(events, last).ids, early.ids])
    for got, want in zip(a.assigner.lookup_weights(ids), b.assigner.lookup_weights(ids), strict=True):
        np.testing.assert_array_equal(got, want)
    assert (a.assigner.lookup_weights(early.ids)[0] >= 0).all()


# ---------------------------------------------------------------------------- dkm simulate
@pytest.mark.parametrize("method", METHODS)
def test_simulate_cli_export_equals_oracle(method: str, tmp_path: Path, capsys) -> None:
    from dkmsks.cli import main
    from dkmsks.core.model import Vocabulary
    from dkmsks.io.writers import read_results, write_events, write_objects

    objects, events = adversarial_case(90, timestamps=5)
    vocab = Vocabulary([f"kw{i}" for i in range(10)])
    write_objects(tmp_path / "objects.tsv.gz", objects, vocab)
    write_events(tmp_path / "events.tsv", events, vocab)
    out = tmp_path / "results.jsonl"
    code = main([
        "simulate", "--objects", str(tmp_path / "objects.tsv.gz"), "--events", str(tmp_path / "events.tsv"),
        "--method", method, "--workers", "3", "--export", str(out), "--as-of", "4",
        "--theta", "2", "--gamma1", "5", "--gamma2", "3", "--grid", "64", "--quiet",
    ])
    assert code == 0
    assert "4 timestamp(s)" in capsys.readouterr().out
    got = read_results(out)
    expected = oracle_results(objects, events, 4)
    assert sorted(got) == sorted(expected)
    for sid, row in got.items():
        assert row["t"] == 4
        assert row["object_ids"] == expected[sid].object_ids.tolist()
        assert row["distances"] == expected[sid].distances.tolist()


def test_simulate_cli_rejects_bad_flags(tmp_path: Path, capsys) -> None:
    from dkmsks.cli import main

    code = main(["simulate", "--objects", str(tmp_path / "o.tsv"), "--events", str(tmp_path / "e.tsv"),
                 "--method", "dkm", "--workers", "0"])
    assert code == 2
    assert "workers must be at least 1, got 0" in capsys.readouterr().err
