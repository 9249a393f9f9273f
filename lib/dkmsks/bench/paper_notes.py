"""The paper report's last two sections: where this reproduction differs from the paper (and
why), and what was not measured — failed points, sections kept from an older report, planned
points missing from the store. The sentences are ``templates/paper.md``'s."""

from __future__ import annotations

import math
from dataclasses import asdict, fields, replace
from typing import Any

from dkmsks.bench.common import DATASET_NAMES
from dkmsks.bench.paper_format import f0, f1, f2
from dkmsks.bench.paper_history import section_key
from dkmsks.bench.paper_points import FIGURES
from dkmsks.bench.paper_results import GROWS_ABOVE, Results, label, short
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import ratio
from dkmsks.core.workload import WorkloadSpec

prose = Prose.load("paper")
#: The paper's range of |S| (Figure 9): its smallest value and its default, the largest.
PAPER_SMALLEST_SUBS, PAPER_SUBS = 2_500_000, 10_000_000

# --------------------------------------------------------------------------- where we differ
def differences(res: Results, cores: object) -> str:
    """Where this reproduction differs from the paper, and why (``cores``: the machine's)."""
    cfg = res.cfg
    place = "place" in cfg.datasets
    summ = res.default_setting("place") if place else {}
    subs = sorted({cfg.table_point(ds, "dkm", "live").subs for ds in cfg.datasets})
    bullets = [prose("differ", subs=" / ".join(f"{v:,}" for v in subs), cores=cores)]
    if any(res.default_setting(ds).get(("ps2", "live")) for ds in cfg.datasets):
        bullets.append(prose("differ.ps2"))
    d, dp, k = summ.get(("dkm", "live")), summ.get(("dkm", "paper")), summ.get(("kop", "live"))
    if d and dp:
        bullets.append(_new_cost(d, dp))
    if place:
        g = {v: res.series_growth("place", *v) for v in (("sop", "live"), ("sop", "paper"), ("dkm", "live"),
                                                          ("kop", "live"))}
        if g[("sop", "live")] and g[("sop", "paper")]:
            bullets.append(_sop_over_time(res, g[("sop", "live")], g[("sop", "paper")]))
        if g[("dkm", "live")]:
            bullets.append(_dkm_over_time(g[("dkm", "live")], g[("kop", "live")]))
        if res.measured("fig9"):
            bullets.append(_small_subs(res))
    if d:
        bullets.append(prose("differ.balance_absolute", dkm_worker_work=f0(d["work_mean"])))
    if d and k:
        parts = [prose("differ.kop_balance", kop_imbalance=f2(k["imbalance"]), dkm_imbalance=f2(d["imbalance"])),
                 prose("differ.kop_balance.relative_better" if k["imbalance"] <= d["imbalance"]
                       else "differ.kop_balance.relative_worse")]
        if k["balance"] > d["balance"]:
            parts.append(prose("differ.kop_balance.absolute", kop_worker_work=f0(k["work_mean"]),
                               dkm_worker_work=f0(d["work_mean"])))
        bullets.append(" ".join(parts))
    t_table = cfg.table_point(cfg.datasets[0], "dkm", "live").T if cfg.datasets else cfg.t_series
    # How many runs the report's points actually merged (a run may have stopped early).
    merged = {"Tables 2–3": [s["runs"] for ds in cfg.datasets for s in res.default_setting(ds).values()],
              "Figure 7": [r["runs"] for ds in cfg.datasets for v in cfg.variants_series
                           if (r := res.series(ds, *v)) is not None],
              "PS²Stream over time": [r["runs"] for ds in cfg.datasets if res.measured("ps2long")
                                      and (r := res.record(cfg.ps2_long_point(ds))) is not None]}
    counts = "; ".join(f"{name}: {min(n)}" + (f"–{max(n)}" if max(n) > min(n) else "")
                       for name, n in merged.items() if n)
    once = all(x == 1 for n in merged.values() for x in n)
    repeats = prose("differ.once" if once else "differ.repeats", runs=cfg.runs, counts=counts,
                    t_series=cfg.t_series, t_table=t_table, t_sweep=cfg.t_sweep)
    if res.spark():
        repeats += " " + prose("differ.spark_once")
    bullets.append(repeats)
    return "\n".join(b for b in bullets if b)


def _new_cost(d: dict[str, float], dp: dict[str, float]) -> str:
    measured = dict(imbalance_paper=f2(dp["imbalance"]), imbalance_live=f2(d["imbalance"]),
                    balance_paper=f1(dp["balance"]), balance_live=f1(d["balance"]), update_paper=f1(dp["update"]),
                    update_live=f1(d["update"]), insert_paper=f1(dp["insert"]))
    same_work = math.isclose(dp["work"], d["work"], rel_tol=1e-3)
    return " ".join([
        prose("differ.new_cost"),
        prose("differ.new_cost.piles_up" if dp["imbalance"] > d["imbalance"] else "differ.new_cost.no_pile_up",
              **measured),
        prose("differ.new_cost.same_work" if same_work else "differ.new_cost.other_work",
              work_paper=f0(dp["work"]), work_live=f0(d["work"]))])


def _sop_over_time(res: Results, live: dict[str, Any], paper: dict[str, Any]) -> str:
    sp = res.cfg.series_point("place", "sop", "live")
    return " ".join([
        prose("differ.sop", subs=f"{sp.subs:,}", T=sp.T, w=live["w"]),
        prose("differ.sop.paper_grows" if paper["update"] > GROWS_ABOVE else "differ.sop.paper_flat",
              update=f"{paper['update']:.2f}", work_max=f"{paper['work_max']:.2f}",
              imbalance_first=f"{paper['imb0']:.2f}", imbalance_last=f"{paper['imb1']:.2f}",
              subs_max=f"{paper['subs_max']:,}", subs_min=f"{paper['subs_min']:,}"),
        prose("differ.sop.live_grows" if live["update"] > GROWS_ABOVE else "differ.sop.live_flat",
              update=f"{live['update']:.2f}", work=f"{live['work']:.2f}", work_first=f0(live["work0"]),
              work_last=f0(live["work1"]), subs_max=f"{live['subs_max']:,}", subs_min=f"{live['subs_min']:,}")])


def _dkm_over_time(dkm: dict[str, Any], kop: dict[str, Any] | None) -> str:
    trend = dict(update=f"{dkm['update']:.2f}", work=f"{dkm['work']:.1f}", work_first=f0(dkm["work0"]),
                 work_last=f0(dkm["work1"]))
    if dkm["update"] <= GROWS_ABOVE:
        return prose("differ.dkm_flat", **trend)
    rates = {f.name: f"{f.default:,}" for f in fields(WorkloadSpec) if f.name.endswith("_per_ts")}
    kop_work = "" if kop is None else " " + prose("differ.dkm_grows.kop_work", work=f"{kop['work']:.2f}")
    parts = [prose("differ.dkm_grows", min_work=f"{dkm['min_work']:.2f}", kop_work=kop_work, **trend)]
    # Candidates growing much faster than the pairs inside the balls are the index's slack.
    if dkm["work"] > 2 * dkm["min_work"]:
        parts.append(prose("differ.dkm_grows.slack", **rates))
    if kop is not None:
        parts.append(prose("differ.dkm_grows.vs_kop", times=f0(ratio(kop["work1"], dkm["work1"]))))
    return " ".join(parts)


def _small_subs(res: Results) -> str:
    _, values, table = res.sweep("fig9", "place")
    dkm, kop = table.get(("dkm", "live"), {}), table.get(("kop", "live"), {})
    rows = [(v, dkm[v][0], kop[v][0]) for v in values if dkm.get(v, (None,))[0] and kop.get(v, (None,))[0]]
    if not rows or rows[0][0] >= PAPER_SMALLEST_SUBS:
        return ""
    faster = [v for v, d, k in rows if d["update"] < k["update"]]
    slower = [v for v, d, k in rows if d["update"] >= k["update"]]
    # "faster from X on": every measured |S| from X up is a win
    tail = [v for i, (v, _, _) in enumerate(rows) if all(d["update"] < k["update"] for _, d, k in rows[i:])]
    if tail:
        not_faster = (" " + prose("differ.small_s.not_faster_at", values=", ".join(short(v) for v in slower))
                      if slower else "")
        speed = prose("differ.small_s.faster_from", subs=short(tail[0]), not_faster=not_faster)
    elif faster:
        speed = prose("differ.small_s.faster_at", faster=", ".join(short(v) for v in faster),
                      slower=", ".join(short(v) for v in slower))
    else:
        speed = prose("differ.small_s.never_faster")
    more_work = [v for v, d, k in rows if d["work"] >= k["work"]]
    work = (prose("differ.small_s.more_work_at", values=", ".join(short(v) for v in more_work)) if more_work
            else prose("differ.small_s.less_work_everywhere"))
    cells = "; ".join(prose("differ.small_s.cell", subs=short(v), dkm=f0(d["update"]), kop=f0(k["update"]),
                            inverse=f0(ratio(k["work"], d["work"]))) for v, d, k in rows)
    parts = [prose("differ.small_s")]
    smallest, d_smallest = rows[0][0], rows[0][1]
    if d_smallest["knn"] < 0.5 * d_smallest["update"]:
        parts.append(prose("differ.small_s.fixed_costs", subs=short(smallest),
                           knn_share=f"{d_smallest['knn'] / d_smallest['update']:.0%}"))
    return " ".join([*parts, prose("differ.small_s.cells", cells=cells), speed, work])


# --------------------------------------------------------------------------- not measured
def missing(res: Results, unmeasured: list[str]) -> str:
    """What was not measured: failed points, the sections (by title) kept from an older report,
    planned points missing from the store."""
    cfg = res.cfg

    def describe(p: dict[str, Any]) -> str:
        return (f"{'Spark ' if p.get('kind') == 'spark' else ''}{DATASET_NAMES.get(p['dataset'], p['dataset'])} "
                f"{label(p['method'], p.get('new_cost', 'live'))} (|S| = {p['subs']:,}, m = {p['m']}, "
                f"k_max = {p['k_max']}, T = {p['T']}"
                + (f", run {p['run'] + 1} of {cfg.runs}" if cfg.runs > 1 and "run" in p else "") + ")")

    lines = [prose("missing.failed", what=describe(rec["point"]), error=rec.get("error", "failed"))
             for rec in res.store.records.values() if rec.get("status") != "ok"]
    ten_m = _ten_m_not_planned(res)
    if ten_m:
        lines.append(ten_m)
    if unmeasured:
        lines.append(prose("missing.older", sections=", ".join(section_key(t) for t in unmeasured)))
    # A section none of whose points was measured is reported as not regenerated, not point by point.
    full = replace(cfg, figures=tuple(f for f in FIGURES if res.measured(f)))
    spark = res.spark_planned if res.spark() else []
    missing = [p for p in [*full.plan(), *spark] if p.key() not in res.store.records]
    if missing:
        lines.append(prose("missing.planned", n=len(missing), points="; ".join(describe(asdict(p)) for p in missing)))
    body = "\n".join(dict.fromkeys(lines)) if lines else prose("missing.none")
    return prose("missing") + "\n\n" + body


def _ten_m_not_planned(res: Results) -> str:
    """Why the paper's default |S| is absent, when it was not among the measured values."""
    cfg = res.cfg
    planned = any(PAPER_SUBS in cfg.sweep_values("fig9", ds)[1] for ds in cfg.datasets)
    if planned or "place" not in cfg.datasets:
        return ""
    k = res.default_setting("place").get(("kop", "live"))
    if k is None:
        return ""
    subs = cfg.table_point("place", "kop", "live").subs
    peaks = [r["peak_rss_gib"] for r in res.engine() if r.get("status") == "ok" and "peak_rss_gib" in r]
    return prose("missing.ten_m", kop_pairs=f0(k["work"]), subs=f"{subs:,}",
                 kop_pairs_10m=f"{k['work'] * PAPER_SUBS / subs / 1e6:,.0f}M",
                 peak=f"{max(peaks):.1f} GiB" if peaks else "not recorded")
