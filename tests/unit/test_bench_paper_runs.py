"""Repeats in ``dkm bench paper`` (``--runs R``): every engine point is planned R times, and the
report merges the runs of a point into per-timestamp medians of its times (the work counters are
deterministic and come from one run). Synthetic records, no data needed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dkmsks.bench.paper_points import PaperConfig, Store
from dkmsks.bench.paper_results import Results, merge_runs, per_worker, ps2_observation

pytestmark = pytest.mark.unit


def small_config(runs: int) -> PaperConfig:
    return PaperConfig(datasets=("place",), o_init=1000, subs=500, m=4, t_series=6, t_sweep=3,
                       ms=(2, 4), subs_values=(250, 500), k_values=(5, 10), runs=runs)


def record(p, update: list[float], work: list[int]) -> dict:
    n = len(update)
    zeros = [0.0] * n
    return {"key": p.key(), "point": {"m": p.m, **p.__dict__}, "status": "ok", "load_avg": [1.0, 1.0],
            "ts": {"t": list(range(1, n + 1)), "update": update, "knn": update, "insert": zeros,
                   "delete": zeros, "refresh": zeros, "balance": zeros, "wall": update, "work": work,
                   "work_max": work, "work_min": work, "min_work": [1] * n, "imbalance": [1.0] * n}}


def test_every_engine_point_is_planned_once_per_run() -> None:
    one, three = small_config(1).plan(), small_config(3).plan()
    assert {p.run for p in one} == {0}
    assert len(three) == 3 * len(one)
    for r in (1, 2):
        assert {replace(p, run=0).key() for p in three if p.run == r} == {p.key() for p in one}
    # a sweep point at the Figure 7 setting is that run's Figure 7 stream, not a point of its own
    cfg = small_config(3)
    for r in range(3):
        at_series = cfg.sweep_point("fig8", "place", cfg.m, "kop", "live", r)
        assert cfg.covered_by_series(at_series)
        assert cfg.series_twin(at_series) == cfg.series_point("place", "kop", "live", r)
        assert at_series.key() not in {p.key() for p in three}


def test_runs_merge_into_per_timestamp_medians() -> None:
    p = small_config(3).table_point("place", "dkm", "live")
    recs = [record(replace(p, run=r), u, [10, 20, 30]) for r, u in
            enumerate([[1.0, 5.0, 9.0], [3.0, 4.0, 7.0], [2.0, 6.0, 8.0]])]
    merged = merge_runs(recs)
    assert merged["runs"] == 3
    assert merged["ts"]["update"] == [2.0, 5.0, 8.0]
    assert merged["ts"]["work"] == [10, 20, 30]
    assert merge_runs(recs[:1])["ts"]["update"] == [1.0, 5.0, 9.0]
    # per-worker kNN times are merged the same way, timestamp by timestamp and worker by worker
    for rec, t in zip(recs, (1.0, 3.0, 2.0), strict=True):
        rec["workers"] = {"time": [[t, 10 * t]] * 3, "work": [[5, 5]] * 3}
    assert merge_runs(recs)["workers"]["time"] == [[2.0, 20.0]] * 3
    assert merge_runs(recs)["workers"]["work"] == [[5, 5]] * 3


def test_a_point_summary_uses_every_run_and_the_series_twins(tmp_path: Path) -> None:
    cfg = small_config(3)
    store = Store(tmp_path)
    # Figure 7 runs (6 timestamps): a sweep point at m = cfg.m is their first 3 timestamps
    for r, u in enumerate([[0.010] * 6, [0.030] * 6, [0.020] * 6]):
        store.add(record(cfg.series_point("place", "sop", "live", r), u, [5] * 6))
    # a sweep point of its own, measured twice of three
    sweep = cfg.sweep_point("fig8", "place", 2, "sop", "live")
    store.add(record(sweep, [0.004, 0.002, 0.009], [7, 7, 7]))
    store.add(record(replace(sweep, run=1), [0.006, 0.001, 0.003], [7, 7, 7]))
    res = Results(cfg, store)

    summary, why = res.point(cfg.sweep_point("fig8", "place", cfg.m, "sop", "live"))
    assert why == "" and summary["runs"] == 3 and summary["n"] == 3
    assert summary["update"] == pytest.approx(20.0)  # ms: the median run's 0.020 s
    summary, why = res.point(sweep)
    assert summary["runs"] == 2  # run 2 was not measured: the two that were
    assert summary["update"] == pytest.approx(1e3 * (0.005 + 0.0015 + 0.006) / 3)
    assert res.point(cfg.sweep_point("fig8", "place", 2, "kop", "live")) == (None, "not measured")
    series = res.series("place", "sop", "live")
    assert series["runs"] == 3 and series["ts"]["update"] == [0.020] * 6


def test_ps2_parameters_enter_only_a_ps2_points_key() -> None:
    cfg = small_config(1)
    dkm, ps2 = cfg.series_point("place", "dkm", "live"), cfg.series_point("place", "ps2", "live")
    assert "ps2_theta" not in dkm.key() and "ps2_new" not in dkm.key()
    assert '"ps2_new": "argmin"' in ps2.key()
    assert replace(ps2, ps2_rho=0.6).key() != ps2.key()
    assert replace(dkm, ps2_rho=0.6).key() == dkm.key()  # DkM-SKS ignores the ps2 parameters
    assert ps2.config().method.value == "ps2" and ps2.config().ps2_theta == cfg.ps2_theta


def workers_record(work: list[list[int]], new: list[list[int]], est0: list[int]) -> dict:
    m = len(est0)
    return {"workers": {"work": work, "new": new, "est0": est0, "est": [est0] * len(work), "time": work,
                        "subs0": [10] * m, "subs": [[10] * m] * len(work)}}


def test_the_ps2_observation_is_decided_on_the_stated_thresholds() -> None:
    # 4 workers, 4 timestamps (windows of 2): worker 0 does 5x the others' work from the start,
    # receives no new subscription, and is still the busiest at the end
    heavy = workers_record(work=[[50, 10, 10, 10]] * 4, new=[[0, 4, 3, 3]] * 4, est0=[100, 100, 100, 100])
    pw = per_worker(heavy)
    assert pw["w"] == 2 and pw["heavy"] == 0
    assert pw["work_first_spread"] == pytest.approx(50 / 20)
    assert pw["heavy_vs_second"] == pytest.approx(5.0)
    assert pw["heavy_new_share"] == 0.0 and pw["est0_spread"] == 1.0
    assert ps2_observation(pw) == {"heavy": True, "single": True, "avoided": True, "kept": True, "reproduced": True}

    # the same start, but the heavy worker gets its fair share of new subscriptions: not reproduced
    fair = workers_record(work=[[50, 10, 10, 10]] * 4, new=[[3, 3, 2, 2]] * 4, est0=[100, 100, 100, 100])
    obs = ps2_observation(per_worker(fair))
    assert obs["single"] and not obs["avoided"] and not obs["reproduced"]

    # two equally heavy workers: heavy, but not one heavy worker
    two = workers_record(work=[[60, 60, 5, 5, 5, 5]] * 4, new=[[0, 0, 3, 3, 2, 2]] * 4, est0=[100] * 6)
    obs = ps2_observation(per_worker(two))
    assert obs["heavy"] and not obs["single"] and not obs["reproduced"]

    # an even spread: no heavy worker
    even = workers_record(work=[[12, 10, 10, 10]] * 4, new=[[0, 4, 3, 3]] * 4, est0=[100, 100, 100, 100])
    assert ps2_observation(per_worker(even))["heavy"] is False
    assert per_worker({"ts": {}}) is None  # a record measured before the per-worker columns
