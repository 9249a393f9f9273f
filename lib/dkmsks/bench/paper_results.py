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

from dkmsks.bench.paper import PaperConfig, Point, Store
from dkmsks.bench.stats import ratio

NAMES = {"kop": "KOP", "sop": "SOP", "dkm": "DkM-SKS"}
#: The sweeps, in the order the report shows them, and their titles.
SWEEPS = {"fig8": "Figure 8: impact of m", "fig10": "Figure 10: impact of k_max", "fig9": "Figure 9: impact of |S|"}
#: A Figure 7 trend (last window / first window) above this counts as growing.
GROWS_ABOVE = 1.05
#: Timestamps at each end of a Figure 7 run that a trend compares (fewer on a short run).
TREND_WINDOW = 10


def label(method: str, new_cost: str) -> str:
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
    return dict(recs[0], ts=ts, runs=len(recs), load_avg=load or recs[0].get("load_avg"))


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
        rec = self.series(dataset, method, new_cost)
        return growth(rec) if rec is not None else None

    def _one_run(self, p: Point) -> tuple[dict[str, Any] | None, str]:
        rec = self.store.get(p)
        if rec is not None and rec.get("status") == "ok":
            return rec, ""
        twin = self.store.get(replace(p, T=self.cfg.t_series))
        if twin is not None and twin.get("status") == "ok" and len(twin["ts"]["t"]) >= p.T:
            cut = {key: values[:p.T] for key, values in twin["ts"].items()}
            return dict(twin, ts=cut), ""
        if rec is not None:
            return None, rec.get("error", "failed")
        return None, "not measured"

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

    def spark(self) -> list[dict[str, Any]]:
        return [r for r in self.store.records.values() if r["point"].get("kind") == "spark"]

    def engine(self) -> list[dict[str, Any]]:
        return [r for r in self.store.records.values() if r["point"].get("kind") != "spark"]
