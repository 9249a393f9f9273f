"""The numbers of the paper report, read from the result store of ``dkm bench paper``.

Metrics follow the paper (§6 "Criteria"): *update time* = kNN update (slowest worker) +
insertion + deletion per timestamp, averaged; *load balance* = per timestamp the max − min worker
finishing time, averaged. Beside them the deterministic work counters (docs/design.md §3 fact 4).
Nothing here measures: rerunning the report only reads the store.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from dkmsks.bench.paper_points import PaperConfig, Point, Store
from dkmsks.bench.stats import ratio

NAMES = {"kop": "KOP", "sop": "SOP", "dkm": "DkM-SKS", "ps2": "PS²Stream"}
#: The methods in the order the report's tables show them.
METHODS = ("dkm", "ps2", "kop", "sop")
#: The sweeps, in the order the report shows them, and their titles.
SWEEPS = {"fig8": "Figure 8: impact of m", "fig10": "Figure 10: impact of k_max", "fig9": "Figure 9: impact of |S|"}
#: A Figure 7 trend (last window / first window) above this counts as growing.
GROWS_ABOVE = 1.05
#: Timestamps at each end of a Figure 7 run that a trend compares (fewer on a short run).
TREND_WINDOW = 10
#: The paper's PS²Stream observation, made testable: a worker is *heavily loaded* when its work
#: over a window is at least ``HEAVY_ABOVE`` times the mean worker's, and it is *the one* heavy
#: worker when it also does at least ``SINGLE_ABOVE`` times the work of the second busiest. New
#: subscriptions *go to the others* when that worker receives at most ``AVOIDED_BELOW`` of its
#: fair share (1/m) of them over the run.
HEAVY_ABOVE = 2.0
SINGLE_ABOVE = 1.5
AVOIDED_BELOW = 0.5


def label(method: str, new_cost: str) -> str:
    """A variant's name in tables and legends."""
    return NAMES[method] + (" (paper est.)" if new_cost == "paper" else "")


def short(v: int) -> str:
    """``2500000`` -> ``2.5M``, ``50000`` -> ``50k``."""
    if v >= 1_000_000 and v % 100_000 == 0:
        return f"{v / 1e6:g}M"
    if v >= 1000 and v % 1000 == 0:
        return f"{v // 1000}k"
    return str(v)


def summarize(rec: dict[str, Any]) -> dict[str, float]:
    """Means over the timestamps of one engine point (seconds -> ms)."""
    ts = rec["ts"]
    n = len(ts["t"])

    def avg(k: str, scale: float = 1.0) -> float:
        return scale * float(np.mean(ts[k])) if n else float("nan")

    def mid(k: str, scale: float = 1.0) -> float:
        return scale * float(np.median(ts[k])) if n else float("nan")

    return {
        "n": n, "update": avg("update", 1e3), "update_med": mid("update", 1e3), "knn": avg("knn", 1e3),
        "insert": avg("insert", 1e3), "delete": avg("delete", 1e3), "refresh": avg("refresh", 1e3),
        "balance": avg("balance", 1e3), "balance_med": mid("balance", 1e3), "work": avg("work"),
        "work_max": avg("work_max"), "work_min": avg("work_min"), "work_mean": avg("work") / rec["point"]["m"],
        "min_work": avg("min_work"), "imbalance": avg("imbalance"),
    }


def summarize_spark(rec: dict[str, Any]) -> dict[str, float]:
    """The per-timestamp means of a Spark point (update time and its parts, work, balance)."""
    ts = rec["ts"]
    knn_max = np.asarray(ts["knn_max"], float)
    upd = knn_max + np.asarray(ts["insert"], float) + np.asarray(ts["delete"], float)
    work = np.asarray(ts["work"], float)
    workers = np.asarray(ts["workers"], float)
    return {
        "n": len(ts["t"]), "update": float(upd.mean()), "knn": float(knn_max.mean()),
        "insert": float(np.mean(ts["insert"])), "delete": float(np.mean(ts["delete"])),
        "balance": float(np.mean(knn_max - np.asarray(ts["knn_min"], float))),
        "work": float(work.mean()), "work_max": float(np.mean(ts["work_max"])),
        "imbalance": float(np.mean(np.asarray(ts["work_max"], float) / np.maximum(work / workers, 1))),
        "min_work": float(np.mean(ts["min_work"])), "run_s": float(rec.get("run_s", float("nan"))),
    }


#: Per-timestamp columns that are wall times (the others are deterministic counters).
TIME_COLUMNS = ("update", "knn", "insert", "delete", "refresh", "balance", "wall")


def merge_runs(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """One record for the repeats of a point: each timestamp's times are the medians over the
    runs (each column on its own), the work counters those of the first run (they are
    deterministic: every run tests the same pairs). ``runs`` says how many were merged."""
    if len(recs) == 1:
        return dict(recs[0], runs=1)
    n = min(len(r["ts"]["t"]) for r in recs)
    ts = {}
    for key, values in recs[0]["ts"].items():
        if key in TIME_COLUMNS:
            ts[key] = np.median(np.asarray([r["ts"][key][:n] for r in recs], float), axis=0).tolist()
        else:
            ts[key] = list(values[:n])
    load = [x for r in recs for x in (r.get("load_avg") or [])]
    out = dict(recs[0], ts=ts, runs=len(recs), load_avg=load or recs[0].get("load_avg"))
    if all((r.get("workers") or {}).get("time") for r in recs):
        # per-worker kNN times: medians over the runs too (the other per-worker columns are
        # counters or the server's deterministic estimates)
        times = np.median(np.asarray([r["workers"]["time"][:n] for r in recs], float), axis=0)
        out["workers"] = dict(recs[0]["workers"], time=times.tolist())
    return out


def cut_record(rec: dict[str, Any], T: int) -> dict[str, Any]:
    """``rec`` as if it had stopped after its first ``T`` timestamps (per-timestamp columns cut,
    the per-worker ones too)."""
    out = dict(rec, ts={key: values[:T] for key, values in rec["ts"].items()})
    if rec.get("workers"):
        out["workers"] = {key: values[:T] if key in ("est", "work", "time", "subs", "new") else values
                          for key, values in rec["workers"].items()}
    if rec.get("load_ts"):
        out["load_ts"] = rec["load_ts"][:T]
    return out


def growth(rec: dict[str, Any]) -> dict[str, Any] | None:
    """A Figure 7 run's trend: last-window / first-window means of its columns (``None`` on a
    run too short to have two windows), and where its subscriptions ended."""
    ts = rec["ts"]
    w = min(TREND_WINDOW, len(ts["t"]) // 2)
    if w == 0:
        return None

    def first(k: str) -> float:
        return float(np.mean(ts[k][:w]))

    def last(k: str) -> float:
        return float(np.mean(ts[k][-w:]))

    subs_end = rec.get("worker_subs_end") or [0]
    out: dict[str, Any] = {k: ratio(last(k), first(k))
                           for k in ("update", "knn", "insert", "work", "work_max", "min_work")}
    out.update(w=w, work0=first("work"), work1=last("work"), imb0=first("imbalance"), imb1=last("imbalance"),
               subs_max=int(max(subs_end)), subs_min=int(min(subs_end)))
    return out


class Results:
    """Look-ups over the store for one configuration; repeats of a point are merged
    (:func:`merge_runs`)."""

    def __init__(self, cfg: PaperConfig, store: Store, spark_planned: list[Any] | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.spark_planned = list(spark_planned or [])

    def series(self, dataset: str, method: str, new_cost: str) -> dict[str, Any] | None:
        """The Figure 7 record of a variant, its runs merged (``None`` when not measured)."""
        recs = [rec for r in range(max(self.cfg.runs, 1))
                if (rec := self.store.get(self.cfg.series_point(dataset, method, new_cost, r))) is not None
                and rec.get("status") == "ok"]
        return merge_runs(recs) if recs else None

    def series_growth(self, dataset: str, method: str, new_cost: str) -> dict[str, Any] | None:
        """The trend of a variant's Figure 7 run (see :func:`growth`), ``None`` when not measured."""
        rec = self.series(dataset, method, new_cost)
        return growth(rec) if rec is not None else None

    def _one_run(self, p: Point) -> tuple[dict[str, Any] | None, str]:
        rec = self.store.get(p)
        if rec is not None and rec.get("status") == "ok":
            return rec, ""
        twin = self.store.get(replace(p, T=self.cfg.t_series))
        if twin is not None and twin.get("status") == "ok" and len(twin["ts"]["t"]) >= p.T:
            return cut_record(twin, p.T), ""
        if rec is not None:
            return None, rec.get("error", "failed")
        return None, "not measured"

    def record(self, p: Point) -> dict[str, Any] | None:
        """The record of ``p`` with its runs merged (each its own record, or the same run of
        the Figure 7 twin cut to ``p.T``), or ``None`` when not measured."""
        recs = [rec for r in range(max(self.cfg.runs, 1)) if (rec := self._one_run(replace(p, run=r))[0]) is not None]
        return merge_runs(recs) if recs else None

    def settings(self, dataset: str) -> list[tuple[str, Point]]:
        """The runs whose workers the report examines: the default setting of Tables 2-3, the
        Figure 7 run (only the latter when they are the same stream) and PS²Stream's long run at
        the default setting when measured, as (kind, a point of the setting)."""
        t, f = self.cfg.table_point(dataset, "dkm", "live"), self.cfg.series_point(dataset, "dkm", "live")
        out = ([("tables", t)] if t != f else []) + [("fig7", f)]
        long = self.cfg.ps2_long_point(dataset)
        if long not in (self.cfg.table_point(dataset, "ps2", "live"), self.cfg.series_point(dataset, "ps2", "live")) \
                and self.record(long) is not None:
            out.append(("ps2long", replace(long, method="dkm")))
        return out

    def run_record(self, kind: str, dataset: str, method: str, new_cost: str) -> dict[str, Any] | None:
        """The merged record of a variant in the run of ``kind`` (``tables`` or ``fig7``)."""
        if kind == "fig7":
            return self.series(dataset, method, new_cost)
        if kind == "ps2long":
            return self.record(self.cfg.ps2_long_point(dataset)) if method == "ps2" else None
        return self.record(self.cfg.table_point(dataset, method, new_cost))

    def point(self, p: Point) -> tuple[dict[str, float] | None, str]:
        """Summary of ``p`` over its runs (each its own record, or the same run of the Figure 7
        twin cut to ``p.T``), or the reason it is missing."""
        recs, why = [], ""
        for r in range(max(self.cfg.runs, 1)):
            rec, reason = self._one_run(replace(p, run=r))
            if rec is None:
                why = why or reason
            else:
                recs.append(rec)
        if not recs:
            return None, why
        merged = merge_runs(recs)
        return dict(summarize(merged), runs=merged["runs"]), ""

    def default_setting(self, dataset: str) -> dict[tuple[str, str], dict[str, float]]:
        """Summaries at the default setting (Tables 2-3, the targets) per measured variant."""
        out = {}
        for me, nc in self.cfg.variants_series:
            s, _ = self.point(self.cfg.table_point(dataset, me, nc))
            if s is not None:
                out[(me, nc)] = s
        return out

    def sweep(self, fig: str, dataset: str) -> tuple[str, list[int], dict[tuple[str, str], dict]]:
        """The swept parameter, its values and per variant ``{value: (summary, why missing)}``."""
        name, values = self.cfg.sweep_values(fig, dataset)
        table = {(me, nc): {v: self.point(self.cfg.sweep_point(fig, dataset, v, me, nc)) for v in values}
                 for me, nc in self.cfg.variants_sweep}
        return name, list(values), table

    def measured(self, fig: str) -> bool:
        """Whether the store holds any point of experiment ``fig`` (``tables``, ``fig7``, a
        sweep) on the configured data sets: a report section with none is not regenerated."""
        cfg = self.cfg
        for ds in cfg.datasets:
            if fig == "ps2long":
                pts = [cfg.ps2_long_point(ds)]
            elif fig in ("tables", "fig7"):
                pts = [cfg.table_point(ds, me, nc) if fig == "tables" else cfg.series_point(ds, me, nc)
                       for me, nc in cfg.variants_series]
            else:
                _, values = cfg.sweep_values(fig, ds)
                # only the sweep's own points: not those that are the Figure 7 run cut short,
                # nor those that are the Tables 2-3 point
                pts = [q for v in values for me, nc in cfg.variants_sweep
                       if not cfg.covered_by_series(q := cfg.sweep_point(fig, ds, v, me, nc))
                       and q != cfg.table_point(ds, me, nc)]
            if any(self.store.get(replace(q, run=r)) is not None for q in pts for r in range(max(cfg.runs, 1))):
                return True
        return False

    def spark(self) -> list[dict[str, Any]]:
        """The Spark points' records."""
        return [r for r in self.store.records.values() if r["point"].get("kind") == "spark"]

    def engine(self) -> list[dict[str, Any]]:
        """The in-memory engine's records."""
        return [r for r in self.store.records.values() if r["point"].get("kind") != "spark"]


def _spread(values: Any) -> float:
    """The max / mean of per-worker values (1.0 when the mean is 0)."""
    v = np.asarray(values, float)
    mean = float(v.mean()) if v.size else 0.0
    return float(v.max()) / mean if mean > 0 else 1.0


def _pearson(a: Any, b: Any) -> float:
    x, y = np.asarray(a, float), np.asarray(b, float)
    if x.size < 2 or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def per_worker(rec: dict[str, Any]) -> dict[str, Any] | None:
    """Estimated load against measured work per worker over one run (``None`` for a record
    without per-worker columns).

    The estimate is the main server's ``C(w)·|O_init|`` (PS²Stream: the count load ``L(w)``) at
    the start and after the last timestamp; the work is summed over the first and the last
    ``TREND_WINDOW`` timestamps (a single timestamp's counts are lumpy). ``heavy`` is the busiest
    worker of the first window: how it compares with the others, its rank by estimated load
    (1 = the highest), its share of the run's new subscriptions, and whether it is still the
    busiest at the end.
    """
    pw = rec.get("workers")
    if not pw or not pw.get("work"):
        return None
    work = np.asarray(pw["work"], float)
    T, m = work.shape
    w = max(1, min(TREND_WINDOW, T // 2))
    first, last = work[:w].sum(axis=0), work[-w:].sum(axis=0)
    est0, est1 = np.asarray(pw["est0"], float), np.asarray(pw["est"][-1], float)
    new = np.asarray(pw["new"], float).sum(axis=0)
    times = np.asarray(pw.get("time") or np.full(work.shape, np.nan), float)
    heavy = int(np.argmax(first))
    ordered = np.sort(first)[::-1]
    n_new = float(new.sum())
    return {
        "w": w, "m": m, "T": T, "est0": est0, "est1": est1, "work_first": first, "work_last": last,
        "new": new, "subs0": np.asarray(pw["subs0"], float), "subs1": np.asarray(pw["subs"][-1], float),
        "est0_spread": _spread(est0), "est1_spread": _spread(est1),
        "work_first_spread": _spread(first), "work_last_spread": _spread(last),
        "time_first_spread": _spread(times[:w].sum(axis=0)), "time_last_spread": _spread(times[-w:].sum(axis=0)),
        "new_spread": _spread(new) if n_new else float("nan"),
        "corr_first": _pearson(est0, first), "corr_last": _pearson(est1, last),
        "heavy": heavy, "heavy_vs_second": ratio(ordered[0], ordered[1]) if m > 1 else float("nan"),
        "heavy_est_rank": int(1 + np.sum(est0 > est0[heavy])),
        "heavy_new_share": float(new[heavy] / n_new) if n_new else float("nan"),
        "heavy_last": int(np.argmax(last)),
        "heavy_last_spread": float(last[heavy] / last.mean()) if last.mean() else 1.0,
        "n_new": int(n_new),
    }


def ps2_observation(pw: dict[str, Any]) -> dict[str, bool]:
    """The parts of the paper's PS²Stream observation, decided on the thresholds above."""
    heavy = pw["work_first_spread"] >= HEAVY_ABOVE
    single = heavy and pw["heavy_vs_second"] >= SINGLE_ABOVE
    avoided = pw["heavy_new_share"] <= AVOIDED_BELOW / pw["m"]
    kept = pw["heavy_last_spread"] >= HEAVY_ABOVE
    return {"heavy": heavy, "single": single, "avoided": avoided, "kept": kept,
            "reproduced": single and avoided and kept}

