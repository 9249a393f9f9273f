"""``docs/paper-reproduction.md`` and its plots from the points measured by ``dkm bench paper``.

The numbers come from :mod:`~dkmsks.bench.paper_results`, the plots from
:mod:`~dkmsks.bench.paper_plots`, every sentence from ``templates/paper.md``
(:mod:`~dkmsks.bench.prose`): this module computes the values, lays out the tables and picks
the sentences the data supports. Rerunning the report never measures anything.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from dkmsks.bench.common import DATASET_NAMES, describe_machine, load_average, machine, utc_now
from dkmsks.bench.paper_format import f0, f1, f2, rel, table_row
from dkmsks.bench.paper_history import History, section_key
from dkmsks.bench.paper_notes import differences, missing
from dkmsks.bench.paper_plots import plot_series, plot_spark, plot_sweep, plot_table2, plot_table3, plot_workers
from dkmsks.bench.paper_points import PaperConfig, Store
from dkmsks.bench.paper_results import (
    AVOIDED_BELOW,
    GROWS_ABOVE,
    HEAVY_ABOVE,
    METHODS,
    NAMES,
    SINGLE_ABOVE,
    SWEEPS,
    TREND_WINDOW,
    Results,
    label,
    per_worker,
    ps2_observation,
    short,
    summarize,
    summarize_spark,
)
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median, ratio
from dkmsks.core.workload import WorkloadSpec

prose = Prose.load("paper")

#: The paper's Table 2 (load balance, ms) and Table 3 (decomposed time on Place, ms).
PAPER_T2 = {"place": {"dkm": 32.08, "ps2": 27490.11, "kop": 549.23, "sop": 14037.33},
            "twitter": {"dkm": 51.03, "ps2": 21962.50, "kop": 486.97, "sop": 12265.40}}
PAPER_T3 = {"knn": {"dkm": 471.00, "ps2": 32892.90, "kop": 7684.48, "sop": 18549.04},
            "insert": {"dkm": 35.36, "ps2": 1.51, "kop": 1.59, "sop": 1110.65},
            "delete": {"dkm": 1.10, "ps2": 1.54, "kop": 1.42, "sop": 0.79}}
PAPER_T3["update"] = {me: sum(PAPER_T3[part][me] for part in ("knn", "insert", "delete")) for me in NAMES}
#: The issue's target: DkM-SKS's total work at most this fraction of KOP's.
WORK_TARGET = 0.01
_HASH = re.compile(r"^[0-9a-f]{40}")


# --------------------------------------------------------------------------- document
class ReportError(RuntimeError):
    """A report that would drop a section: its experiment has no point in the store and no
    earlier measurement of it is at hand."""


#: The sections of the paper's §6 per experiment, by title, in report order.
SECTIONS: dict[str, tuple[str, ...]] = {
    "tables": ("Headline: the default setting", "Table 2: load balance (ms), default setting",
               "Table 3: decomposed update time (ms per timestamp), default setting"),
    "fig7": ("Figure 7: update time as a function of time",),
    **{fig: (title,) for fig, title in SWEEPS.items()},
    "spark": ("Spark pipeline (workers = Spark tasks)",),
}


class Older:
    """Where a section without a measured point comes from: the newest version of it that the
    report's git history measured (:class:`~dkmsks.bench.paper_history.History`), its plots
    restored beside this report's; ``None`` history: such a section fails the report."""

    def __init__(self, history: History | None, img: Path, docs: Path) -> None:
        self.history, self.img, self.docs = history, img, docs

    def section(self, experiment: str, title: str) -> str:
        """The section ``title`` as last measured, under a banner naming its commit and dates."""
        found = self.history.find(title) if self.history is not None else None
        if found is None or self.history is None:
            where = (f"the report's git history ({self.history.rel}) holds no measured version of it"
                     if self.history is not None and self.history.rel else "no earlier report was searched")
            raise ReportError(
                f"section '{title}' ({experiment}) has no measured point in the result store and {where}: "
                f"measure it (bench/paper_full.sh) or leave it out of --figures")
        banner = prose("older", commit=found.commit[:10], committed=found.committed[:10],
                       generated=found.generated or prose("older.unknown"),
                       measured=found.measured or prose("older.unknown"))
        return f"## {title}\n\n{banner}\n\n{self.history.restore_images(found, self.img, self.docs)}"


def covered(res: Results) -> list[str]:
    """The experiments this report has sections for: the configured ones and those with a
    measured point (a sweep re-run alone has the default setting's), and the Spark points when
    planned or stored."""
    out = [e for e in SECTIONS if e != "spark" and (e in res.cfg.figures or res.measured(e))]
    if res.spark_planned or res.spark():
        out.append("spark")
    return out


def write_report(cfg: PaperConfig, store: Store, docs: Path, img: Path, *, command: str,
                 spark_points: list[Any] | None = None, history: bool = True) -> None:
    """Plots and the report from the store. A section of a configured experiment with no
    measured point keeps its last measured version from the report's git history (``history``),
    marked as older, with its commit and dates; without one, :class:`ReportError`."""
    img.mkdir(parents=True, exist_ok=True)
    docs.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(img / "older", ignore_errors=True)  # restored again below, for the sections that need them
    res = Results(cfg, store, spark_points)
    pngs: dict[str, Path] = {}
    if res.measured("tables"):
        for name, path in (("table2", plot_table2(res, img, PAPER_T2)), ("table3", plot_table3(res, img, PAPER_T3))):
            if path is not None:
                pngs[name] = path
    if res.measured("fig7"):
        pngs.update({f"fig7_{what}": path for what, path in plot_series(res, img).items()})
    workers_png = plot_workers(res, img)
    if workers_png is not None:
        pngs["workers"] = workers_png
    pngs.update({fig: plot_sweep(res, fig, img) for fig in SWEEPS if res.measured(fig)})
    spark_png = plot_spark(res, img)
    if spark_png is not None:
        pngs["spark"] = spark_png
    # Figure 9 run alone to |S| = 10M (bench/paper_full.sh d + sweep-report) has a report of its
    # own beside this one: the Figure 9 section links it and shows its plot.
    alone = docs.parent / "paper-fig9.md"
    if alone.is_file() and alone.resolve() != docs.resolve():
        pngs["fig9_alone"] = alone
        if (docs.parent / "img" / "paper-fig9" / "fig9.png").is_file():
            pngs["fig9_alone_png"] = docs.parent / "img" / "paper-fig9" / "fig9.png"
    older = Older(History(docs) if history else None, img, docs)
    docs.write_text(render(res, {k: rel(v, docs) for k, v in pngs.items()}, command, older))


def render(res: Results, pngs: dict[str, str], command: str, older: Older) -> str:
    """The report; ``pngs`` maps a plot (``fig7_time``, ``fig8``, ``spark``...) to its link. A
    covered experiment (:func:`covered`) without a measured point gets its sections from
    ``older``."""
    exps = covered(res)

    def section(exp: str, *makers: Any) -> list[str]:
        if exp not in exps:
            return []
        if bool(res.spark()) if exp == "spark" else res.measured(exp):
            return [make() for make in makers]
        return [older.section(exp, title) for title in SECTIONS[exp]]

    parts = [_title(res, command, exps), _machine(res), _parameters(res)]
    parts += section("tables", lambda: _headline(res), lambda: _table2(res, pngs.get("table2")),
                  lambda: _table3(res, pngs.get("table3")))
    parts += section("fig7", lambda: _fig7(res, pngs))
    parts += [_workers(res, pngs.get("workers")), _ps2(res)]
    for fig in SWEEPS:
        parts += section(fig, lambda fig=fig: _sweep(res, fig, pngs[fig]))
        if fig == "fig9" and "fig9_alone" in pngs and "fig9" in exps:
            plot = pngs.get("fig9_alone_png")
            parts.append(prose("sweep.fig9_alone", doc=pngs["fig9_alone"],
                               plot=f"\n\n![{prose('sweep.fig9_alone.title')}]({plot})" if plot else ""))
    parts += section("spark", lambda: _spark(res, pngs.get("spark")))
    unmeasured = [t for e in exps if not (res.spark() if e == "spark" else res.measured(e)) for t in SECTIONS[e]]
    parts += [_sedona(res), differences(res, _machines(res.engine())[0]["nproc"]), missing(res, unmeasured)]
    return "\n\n".join(p for p in parts if p).rstrip() + "\n"


def _commits(recs: list[dict[str, Any]]) -> str:
    """The commits the records were measured at, with how many points each when several."""
    counts = Counter(rec.get("commit", "not recorded") for rec in recs)
    names = {c: f"`{c[:10]}{'+dirty' if c.endswith('+dirty') else ''}`" if _HASH.match(c) else c for c in counts}
    if len(counts) <= 1:
        return next(iter(names.values()), "`none`")
    return ", ".join(f"{names[c]} ({n} points)" for c, n in counts.most_common())


def _machines(recs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The machines the records were measured on (this one for records that do not say)."""
    out: list[dict[str, str]] = []
    for m in (rec.get("machine") or machine() for rec in recs):
        if m not in out:
            out.append(m)
    return out or [machine()]


def _load(recs: list[dict[str, Any]]) -> tuple[float, float, float]:
    loads = [x for r in recs for x in [*r.get("load_avg", []), *r.get("load_ts", [])] if isinstance(x, (int, float))]
    return (min(loads), median(loads), max(loads)) if loads else (float("nan"),) * 3


def _title(res: Results, command: str, exps: list[str]) -> str:
    recs = list(res.store.records.values())
    dates = sorted(r["date"] for r in recs if r.get("date"))
    left_out = [e for e in SECTIONS if e not in exps]
    coverage = "" if not left_out else " " + prose(
        "title.partial", sections=", ".join(section_key(t) for e in left_out for t in SECTIONS[e]))
    return prose("title", command=command, date=utc_now(), records=len(recs), commits=_commits(recs),
                 first=dates[0] if dates else "–", last=dates[-1] if dates else "–", coverage=coverage,
                 machine_time=machine_time_text(res.store))


def machine_time(store: Store) -> dict[str, float]:
    """The machine time of the measurements in ``store``, in seconds: each successful point's
    own time (``elapsed_s``; a Spark point's generate, run and sql), each engine workload's
    set-up once (the points of one set-up share its ``group``), and how many points recorded
    no time."""
    points = setups = spark = 0.0
    groups: set[str] = set()
    n_engine = n_spark = untimed = 0
    for rec in store.records.values():
        if rec.get("status") != "ok":
            continue
        if "elapsed_s" not in rec:
            untimed += 1
            continue
        if rec["point"].get("kind") == "spark":
            spark += rec["elapsed_s"]
            n_spark += 1
            continue
        points += rec["elapsed_s"]
        n_engine += 1
        setup = rec.get("setup") or {}
        if setup.get("group") and setup["group"] not in groups:
            groups.add(setup["group"])
            setups += sum(setup.get(k, 0.0) for k in ("workload_s", "knn_init_s", "stats_s"))
    return {"total": points + setups + spark, "engine": points, "setups": setups, "spark": spark,
            "n_engine": n_engine, "n_spark": n_spark, "n_setups": len(groups), "untimed": untimed}


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def machine_time_text(store: Store) -> str:
    """One sentence: the store's machine time (:func:`machine_time`)."""
    t = machine_time(store)
    untimed = "" if not t["untimed"] else " " + prose("machine_time.untimed", n=int(t["untimed"]))
    return prose("machine_time", total=_hours(t["total"]), engine=_hours(t["engine"]), n_engine=int(t["n_engine"]),
                 setups=_hours(t["setups"]), n_setups=int(t["n_setups"]), spark=_hours(t["spark"]),
                 n_spark=int(t["n_spark"])) + untimed


def _machine(res: Results) -> str:
    engine, spark = res.engine(), [r for r in res.spark() if r.get("status") == "ok"]
    machines = _machines(engine + spark)
    cores = int(machines[0]["nproc"])
    lo, mid, hi = _load(engine)
    values = dict(machine="; ".join(describe_machine(m) for m in machines), cores=cores, load_lo=f1(lo),
                  load_hi=f1(hi), load_mid=f1(mid), load_now=f1(load_average()))
    # The benchmark keeps at most one single-threaded process per core busy.
    if hi > cores + 1:
        return prose("machine.loaded", **values)
    spark_lo, _, spark_hi = _load(spark)
    spark_load = "" if math.isnan(spark_lo) else prose(
        "machine.spark_load", master=_spark_master(spark), load_lo=f1(spark_lo), load_hi=f1(spark_hi))
    return prose("machine.idle", spark_load=spark_load and " " + spark_load, **values)


def _spark_master(recs: list[dict[str, Any]]) -> str:
    return ", ".join(sorted({r.get("master", "local[2]") for r in recs}))


def _parameters(res: Results) -> str:
    cfg = res.cfg
    rates = {f.name: f.default for f in fields(WorkloadSpec) if f.name.endswith("_per_ts")}
    lines = [prose("parameters", **{k: f"{v:,}" for k, v in rates.items()}, theta=cfg.theta,
                   gamma1=f"{cfg.gamma1:,}", gamma2=cfg.gamma2, grid=f"{cfg.grid:,}", seed=cfg.seed), "",
             "| experiment | data set | |O_init| | |S| | m | k_max | timestamps | varied |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for ds in cfg.datasets:
        p = cfg.table_point(ds, "dkm", "live")
        lines.append(table_row("Tables 2–3, targets", DATASET_NAMES[ds], f"{p.o_init:,}", f"{p.subs:,}", p.m,
                          p.k_max, p.T, "–"))
    for ds in cfg.datasets:
        p = cfg.series_point(ds, "dkm", "live")
        lines.append(table_row("Figure 7", DATASET_NAMES[ds], f"{p.o_init:,}", f"{p.subs:,}", p.m, p.k_max,
                          cfg.t_series, "–"))
    if res.measured("ps2long"):
        for ds in cfg.datasets:
            p = cfg.ps2_long_point(ds)
            lines.append(table_row(prose("parameters.ps2long"), DATASET_NAMES[ds], f"{p.o_init:,}", f"{p.subs:,}", p.m,
                              p.k_max, p.T, "–"))
    for ds in cfg.datasets:
        for fig in (f for f in SWEEPS if res.measured(f)):
            name, values = cfg.sweep_values(fig, ds)
            b = cfg.base(ds, series=False)
            lines.append(table_row(
                "Figure " + fig[3:], DATASET_NAMES[ds], f"{b.o_init:,}",
                "varied" if name == "subs" else f"{b.subs:,}", "varied" if name == "m" else b.m,
                "varied" if name == "k_max" else b.k_max, cfg.t_sweep,
                f"{name} ∈ {{{', '.join(f'{v:,}' for v in values)}}}"))
    lines += ["", prose("variants", runs=cfg.runs, t_sweep=cfg.t_sweep, ps2_theta=cfg.ps2_theta, ps2_rho=cfg.ps2_rho,
                        ps2_alpha=cfg.ps2_alpha, ps2_beta=cfg.ps2_beta, ps2_new=cfg.ps2_new)]
    return "\n".join(lines)


_SUMMARY_HEAD = ("| variant | update | kNN update | insertion | deletion | refresh | load balance | work | "
                 "max worker work | mean worker work | min work | work / min | max/mean |\n|---|" + "---:|" * 12)


def _headline(res: Results) -> str:
    out = [prose("headline")]
    for ds in res.cfg.datasets:
        summ = res.default_setting(ds)
        if not summ:
            continue
        p = res.cfg.table_point(ds, "dkm", "live")
        out.append(prose("headline.setting", dataset=DATASET_NAMES[ds], o_init=f"{p.o_init:,}",
                         subs=f"{p.subs:,}", m=p.m, k_max=p.k_max, T=p.T))
        out.append(_SUMMARY_HEAD + "\n" + "\n".join(
            table_row(label(me, nc), f1(s["update"]), f1(s["knn"]), f1(s["insert"]), f1(s["delete"]),
                 f1(s["refresh"]), f1(s["balance"]), f0(s["work"]), f0(s["work_max"]), f0(s["work_mean"]),
                 f0(s["min_work"]), f1(ratio(s["work"], s["min_work"])), f2(s["imbalance"]))
            for (me, nc), s in summ.items()))
        d = summ.get(("dkm", "live"))
        others = [(me, summ[(me, "live")]) for me in METHODS if me != "dkm" and (me, "live") in summ]
        if d and others:
            out.append(prose("headline.relative", comparisons="; ".join(
                prose("headline.relative_to", method=NAMES[me], work=f"{ratio(d['work'], o['work']):.2e}",
                      work_inverse=f"{ratio(o['work'], d['work']):,.0f}",
                      update=f"{ratio(d['update'], o['update']):.3f}",
                      balance=f"{ratio(d['balance'], o['balance']):.3f}",
                      work_max=f"{ratio(d['work_max'], o['work_max']):.2e}") for me, o in others)))
    out.append(_targets(res))
    return "\n\n".join(p for p in out if p)


def _targets(res: Results) -> str:
    summ = res.default_setting("place") if "place" in res.cfg.datasets else {}
    d, k, s = (summ.get((me, "live")) for me in ("dkm", "kop", "sop"))
    if not (d and k and s):
        return ""
    rows = [prose("targets"),
            prose("target.update", status=prose.status(d["update"] < k["update"] and d["update"] < s["update"]),
                  dkm=f1(d["update"]), kop=f1(k["update"]), sop=f1(s["update"]), n=int(d["n"]),
                  dkm_median=f1(d["update_med"]), kop_median=f1(k["update_med"]), sop_median=f1(s["update_med"])),
            prose("target.balance", status=prose.status(d["balance"] < k["balance"] and d["balance"] < s["balance"]),
                  dkm=f1(d["balance"]), kop=f1(k["balance"]), sop=f1(s["balance"]),
                  dkm_median=f1(d["balance_med"]), kop_median=f1(k["balance_med"]), sop_median=f1(s["balance_med"]),
                  dkm_imbalance=f2(d["imbalance"]), kop_imbalance=f2(k["imbalance"]),
                  sop_imbalance=f2(s["imbalance"]))]
    r = ratio(d["work"], k["work"])
    rows.append(prose("target.work", status=prose.status(r <= WORK_TARGET), ratio=f"{r:.2e}",
                      inverse=f"{1 / r:,.0f}", dkm=f0(d["work"]), kop=f0(k["work"])))
    trends = {nc: res.series_growth("place", "sop", nc) for nc in ("live", "paper")}
    if all(g is None for g in trends.values()):  # no Figure 7 run in this report
        status = prose("status.not_measured")
    elif trends["live"] is not None and trends["live"]["work_max"] > GROWS_ABOVE:
        status = prose("status.met")
    elif trends["paper"] is not None and trends["paper"]["work_max"] > GROWS_ABOVE:
        status = prose("status.met_with_paper_estimate")
    else:
        status = prose("status.not_met_explained")
    sp = res.cfg.series_point("place", "sop", "live")
    text = "; ".join(prose("target.sop_trend", variant=label("sop", nc), w=g["w"], update=f"{g['update']:.2f}",
                           work_max=f"{g['work_max']:.2f}", imbalance_first=f"{g['imb0']:.2f}",
                           imbalance_last=f"{g['imb1']:.2f}")
                     for nc, g in trends.items() if g is not None)
    rows.append(prose("target.sop_grows", status=status, subs=f"{sp.subs:,}", T=sp.T, trends=text))
    return "\n".join(rows)


def _table2(res: Results, png: str | None) -> str:
    subs = sorted({res.cfg.table_point(ds, "dkm", "live").subs for ds in res.cfg.datasets})
    others = [me for me in METHODS if me != "dkm"]
    lines = [prose("table2", cores=_machines(res.engine())[0]["nproc"], subs=" / ".join(f"{v:,}" for v in subs)),
             "", *([f"![{prose('table2.png_title')}]({png})", ""] if png else []),
             table_row("data set", "source", *(NAMES[me] for me in METHODS),
                  *(f"{NAMES[me]} / DkM-SKS" for me in others)), "|---|---|" + "---:|" * (2 * len(METHODS) - 1)]
    for ds in res.cfg.datasets:
        summ = res.default_setting(ds)
        name, pp = DATASET_NAMES[ds], PAPER_T2[ds]
        lines.append(table_row(name, prose("source.paper"), *(f"{pp[me]:,.2f}" for me in METHODS),
                          *(f"{pp[me] / pp['dkm']:.1f}" for me in others)))
        live = {me: summ.get((me, "live")) for me in METHODS}
        # The paper-estimate row: DkM-SKS and SOP with the paper's estimate; KOP and PS²Stream
        # have one variant each.
        paper = {me: summ.get((me, "paper")) if me in ("dkm", "sop") else live[me] for me in METHODS}
        for source, row in ((prose("source.ours"), live), (prose("source.ours_paper_est"), paper)):
            base = row["dkm"]
            if base is None or all(row[me] is None for me in others):
                continue
            cells = {me: x["balance"] for me, x in row.items() if x is not None}
            lines.append(table_row(name, source, *(f1(cells.get(me)) for me in METHODS),
                              *(f"{ratio(cells[me], base['balance']):.1f}" if me in cells else "–" for me in others)))
        if live["dkm"] is not None:
            spread = {me: x["work_max"] - x["work_min"] for me, x in live.items() if x}
            lines.append(table_row(name, prose("source.work_spread"), *(f0(spread.get(me)) for me in METHODS),
                              *(f"{ratio(spread[me], spread['dkm']):.1f}" if me in spread else "–" for me in others)))
    return "\n".join(lines)


_T3_PARTS = (("knn", "kNN update"), ("insert", "subscription ins."), ("delete", "subscription del."),
             ("refresh", "cost refresh (ours)"), ("update", "**update time**"))
#: Table 3's variants of ours: every method with our estimate, then the paper-estimate ones.
_T3_OURS = (*((me, "live") for me in METHODS), ("dkm", "paper"), ("sop", "paper"))


def _table3(res: Results, png: str | None) -> str:
    out = [prose("table3")] + ([f"![{prose('table3.png_title')}]({png})"] if png else [])
    for ds in res.cfg.datasets:
        summ = res.default_setting(ds)
        d = summ.get(("dkm", "live"))
        if d is None:
            continue
        with_paper = ds == "place"  # the paper's Table 3 is on Place
        ours = [v for v in _T3_OURS if v in summ]
        head = (["part"] + ([prose("source.paper_method", method=NAMES[me]) for me in METHODS] if with_paper else [])
                + [label(*v) for v in ours])
        lines = [table_row(*head), "|---|" + "---:|" * (len(head) - 1)]
        for key, part in _T3_PARTS:
            pp = PAPER_T3.get(key)
            cells: list[str] = [part]
            if with_paper:
                cells += [f"{pp[me]:,.2f}" for me in METHODS] if pp else ["–"] * len(METHODS)
            cells += [f1(summ[v][key]) for v in ours]
            lines.append(table_row(*cells))
        # Ratios to DkM-SKS, ours beside the paper's.
        others = [me for me in METHODS if me != "dkm" and (me, "live") in summ]
        rhead = ["part"] + [prose("source.ratio", method=NAMES[me], source=src) for me in others
                            for src in ((prose("source.paper"), prose("source.ours")) if with_paper
                                        else (prose("source.ours"),))]
        rlines = [table_row(*rhead), "|---|" + "---:|" * (len(rhead) - 1)]
        for key, part in _T3_PARTS:
            pp = PAPER_T3.get(key)
            cells = [part]
            for me in others:
                if with_paper:
                    cells.append(f2(pp[me] / pp["dkm"]) if pp else "–")
                cells.append(f2(ratio(summ[(me, "live")][key], d[key])))
            rlines.append(table_row(*cells))
        out += [f"**{DATASET_NAMES[ds]}**", "\n".join(lines), prose("table3.ratios"), "\n".join(rlines)]
    return "\n\n".join(out)


def _fig7(res: Results, pngs: dict[str, str]) -> str:
    w = min(TREND_WINDOW, res.cfg.t_series // 2)
    lines = [prose("fig7", time_png=pngs["fig7_time"], work_png=pngs["fig7_work"], w=w), "",
             "| data set | variant | update time | kNN update | insertion | busiest worker's work | "
             "max/mean work first → last |", "|---|---|---:|---:|---:|---:|---|"]
    for ds in res.cfg.datasets:
        for me, nc in res.cfg.variants_series:
            g = res.series_growth(ds, me, nc)
            if g is not None:
                lines.append(table_row(DATASET_NAMES[ds], label(me, nc), f"×{g['update']:.2f}", f"×{g['knn']:.2f}",
                                  f"×{g['insert']:.2f}", f"×{g['work_max']:.2f}", f"{g['imb0']:.2f} → {g['imb1']:.2f}"))
    out = ["\n".join(lines), prose("fig7.methods", w=w)]
    head = ["| data set | timestamps | " + " | ".join(NAMES[me] for me in METHODS) + " | DkM-SKS / best other |",
            "|---|---|" + "---:|" * (len(METHODS) + 1)]
    orderings = []
    for ds in res.cfg.datasets:
        recs = {me: res.series(ds, me, "live") for me in METHODS}
        if all(r is None for r in recs.values()):
            continue
        n = min(len(r["ts"]["t"]) for r in recs.values() if r is not None)
        for name, part in ((prose("fig7.window.all", n=n), slice(0, n)), (prose("fig7.window.first", w=w), slice(0, w)),
                           (prose("fig7.window.last", w=w), slice(n - w, n))):
            cells = {me: 1e3 * float(np.mean(r["ts"]["update"][part])) for me, r in recs.items() if r is not None}
            head.append(table_row(DATASET_NAMES[ds], name, *(f1(cells.get(me)) for me in METHODS), _best_ratio(cells)))
        whole = {me: summarize(r) for me, r in recs.items() if r is not None}
        orderings.append(_ordering("fig7", ds, [(prose("fig7.whole_run"), whole)]))
    return "\n\n".join([*out, "\n".join(head), *orderings])


def _settings(res: Results, ds: str) -> list[tuple[str, Any]]:
    """The runs whose workers the report examines on ``ds`` (:meth:`Results.settings`), as
    (label, record getter)."""
    return [(prose("setting.tables" if kind == "tables" else "setting.fig7" if kind == "fig7" else "setting.ps2long",
                   subs=f"{p.subs:,}", T=p.T),
             lambda me, nc, kind=kind: res.run_record(kind, ds, me, nc)) for kind, p in res.settings(ds)]


def ps2_workers(res: Results) -> list[tuple[str, str, dict[str, Any]]]:
    """PS²Stream's per-worker view per data set and setting: (data set, setting label, view)."""
    out = []
    for ds in res.cfg.datasets:
        for name, get in _settings(res, ds):
            rec = get("ps2", "live")
            pw = per_worker(rec) if rec is not None else None
            if pw is not None:
                out.append((ds, name, pw))
    return out


def _workers(res: Results, png: str | None) -> str:
    """Estimated load (the main server's) beside the measured work, per worker, every variant."""
    rows = []
    for ds in res.cfg.datasets:
        for setting, get in _settings(res, ds):
            for me, nc in res.cfg.variants_series:
                rec = get(me, nc)
                pw = per_worker(rec) if rec is not None else None
                if pw is None:
                    continue
                rows.append(table_row(DATASET_NAMES[ds], setting, label(me, nc), f2(pw["est0_spread"]),
                                 f2(pw["est1_spread"]), f"{f2(pw['work_first_spread'])} ({pw['w']})",
                                 f"{f2(pw['work_last_spread'])} ({pw['w']})", f2(pw["time_first_spread"]),
                                 f2(pw["time_last_spread"]), f2(pw["corr_first"]), f2(pw["corr_last"]),
                                 f2(pw["new_spread"])))
    if not rows:
        return ""
    head = prose("workers", window=TREND_WINDOW,
                 png=f"\n\n![{prose('workers.png_title')}]({png})" if png else "")
    table = ["| data set | setting | variant | estimated max/mean, start | estimated max/mean, end | "
             "work max/mean, first (timestamps) | work max/mean, last (timestamps) | kNN time max/mean, first | "
             "kNN time max/mean, last | corr(estimate, work), start | corr(estimate, work), end | "
             "new subscriptions max/mean |", "|---|---|---|" + "---:|" * 9, *rows]
    return head + "\n\n" + "\n".join(table)


def _ps2(res: Results) -> str:
    """The paper's PS²Stream observation, tested on the measured runs (thresholds in
    :mod:`~dkmsks.bench.paper_results`)."""
    verdicts: dict[tuple[str, str], bool] = {}
    seen: dict[str, list[str]] = {"heavy": [], "avoided": []}
    out = [prose("ps2", heavy=f"{HEAVY_ABOVE:g}", single=f"{SINGLE_ABOVE:g}", avoided=f"{AVOIDED_BELOW:g}",
                 paper_place=f"{PAPER_T2['place']['ps2']:,.2f}", paper_twitter=f"{PAPER_T2['twitter']['ps2']:,.2f}")]
    for ds, setting, pw in ps2_workers(res):
        obs = ps2_observation(pw)
        verdicts[(ds, setting)] = obs["reproduced"]
        run = f"{DATASET_NAMES[ds]}, {setting}"
        for part in ("heavy", "avoided"):
            if obs[part]:
                seen[part].append(run)
        m, heavy = pw["m"], pw["heavy"]
        values = dict(
            dataset=DATASET_NAMES[ds], setting=setting, w=pw["w"], m=m, est0=f2(pw["est0_spread"]),
            est1=f2(pw["est1_spread"]), work_first=f2(pw["work_first_spread"]), work_last=f2(pw["work_last_spread"]),
            corr_first=f2(pw["corr_first"]), corr_last=f2(pw["corr_last"]), worker=heavy,
            heavy_vs_second=f2(pw["heavy_vs_second"]), rank=pw["heavy_est_rank"],
            heavy_est=f2(pw["est0"][heavy] / pw["est0"].mean()), n_new=f"{pw['n_new']:,}",
            new_heavy=f"{int(pw['new'][heavy]):,}", share=f"{pw['heavy_new_share']:.1%}", fair=f"{1 / m:.1%}",
            new_max=f"{int(pw['new'].max()):,}", new_min=f"{int(pw['new'].min()):,}", new_spread=f2(pw["new_spread"]),
            heavy_last=f2(pw["heavy_last_spread"]), busiest_last=pw["heavy_last"],
            busiest_last_spread=f2(pw["work_last_spread"]), busiest_last_new=f"{int(pw['new'][pw['heavy_last']]):,}",
            subs0=f"{int(pw['subs0'][heavy]):,}", subs1=f"{int(pw['subs1'][heavy]):,}",
            subs_mean0=f"{pw['subs0'].mean():,.0f}", subs_mean1=f"{pw['subs1'].mean():,.0f}")
        parts = [prose("ps2.dataset", **values), prose("ps2.counts_vs_work", **values)]
        if obs["single"]:
            parts.append(prose("ps2.start.one_heavy", **values))
        elif obs["heavy"]:
            parts.append(prose("ps2.start.heavy_not_alone", **values))
        else:
            parts.append(prose("ps2.start.no_heavy", **values))
        if obs["heavy"]:
            parts.append(prose("ps2.new.avoided" if obs["avoided"] else "ps2.new.not_avoided", **values))
            parts.append(prose("ps2.end.kept" if obs["kept"] else "ps2.end.evened", **values))
        else:
            parts.append(prose("ps2.new.busiest_avoided" if obs["avoided"] else "ps2.new.where", **values))
        parts.append(prose("ps2.verdict.reproduced" if obs["reproduced"] else "ps2.verdict.not_reproduced"))
        out.append(" ".join(parts))
    if not verdicts:
        return ""
    for ds in res.cfg.datasets:
        summ = res.default_setting(ds)
        q, k = summ.get(("ps2", "live")), summ.get(("kop", "live"))
        if q and k:
            live = {me: summ[(me, "live")]["imbalance"] for me in METHODS if (me, "live") in summ}
            spread = prose("ps2.spread_rank", dataset=DATASET_NAMES[ds], spread=f2(q["imbalance"]),
                           rank=1 + sum(v > q["imbalance"] for v in live.values()), n=len(live),
                           others=", ".join(f"{NAMES[me]} {f2(v)}" for me, v in live.items() if me != "ps2"))
            same = math.isclose(q["work"], k["work"], rel_tol=1e-9)
            work = prose("ps2.work.same_as_kop" if same else "ps2.work.vs_kop", work=f0(q["work"]),
                         kop=f0(k["work"]), ratio=f2(ratio(q["work"], k["work"])))
            out.append(spread + " " + prose("ps2.insertion", ps2=f1(q["insert"]), kop=f1(k["insert"]), work=work,
                                            paper_ps2=f"{PAPER_T3['insert']['ps2']:.2f}",
                                            paper_kop=f"{PAPER_T3['insert']['kop']:.2f}"))
    names = [f"{DATASET_NAMES[ds]}, {setting}" for ds, setting in verdicts]
    yes = [f"{DATASET_NAMES[ds]}, {setting}" for (ds, setting), v in verdicts.items() if v]
    if len(yes) == len(names):
        out.append(prose("ps2.summary.all", runs="; ".join(names)))
    elif yes:
        out.append(prose("ps2.summary.some", yes="; ".join(yes), no="; ".join(n for n in names if n not in yes)))
    elif seen["heavy"] or seen["avoided"]:
        out.append(prose("ps2.summary.parts", runs="; ".join(names), heavy_x=f"{HEAVY_ABOVE:g}×",
                         heavy="; ".join(seen["heavy"]) or prose("ps2.summary.no_run"),
                         avoided="; ".join(seen["avoided"]) or prose("ps2.summary.no_run")))
    else:
        out.append(prose("ps2.summary.none", runs="; ".join(names)))
    return "\n\n".join(out)


#: A sweep's tables: the summary key, its caption block and how a cell prints.
_SWEEP_METRICS = (("update", "sweep.metric.update", f1), ("balance", "sweep.metric.balance", f1),
                  ("work_max", "sweep.metric.work_max", f0), ("work", "sweep.metric.work", f0))


def _sweep(res: Results, fig: str, png: str) -> str:
    out = [prose("sweep", title=SWEEPS[fig], png=png)]
    for ds in res.cfg.datasets:
        name, values, table = res.sweep(fig, ds)
        variants = [v for v in ((me, "live") for me in METHODS) if v in table] + [
            v for v in table if v[1] != "live"]
        out.append(prose("sweep.dataset", dataset=DATASET_NAMES[ds], T=res.cfg.t_sweep))
        by_value = [(f"{name} = {short(v)}", {me: table[(me, "live")][v][0] for me in METHODS
                                               if (me, "live") in table and table[(me, "live")][v][0] is not None})
                    for v in values]
        out.append(_ordering(fig, ds, by_value))
        for key, caption, fmt in _SWEEP_METRICS:
            head = [name, *(label(*v) for v in variants), prose("sweep.best_other")]
            extra = key == "work"
            if extra:
                head.append(prose("sweep.min_work"))
            lines = [prose(caption), "", table_row(*head), "|" + "---:|" * len(head)]
            for v in values:
                cells = [table[var][v] for var in variants]
                shown = [fmt(s[key]) + (f" ({f2(s['imbalance'])})" if key == "work_max" else "") if s is not None
                         else why for s, why in cells]
                live = {me: table[(me, "live")][v][0][key] for me in METHODS
                        if (me, "live") in table and table[(me, "live")][v][0] is not None}
                row = [f"{v:,}", *shown, _best_ratio(live)]
                if extra:
                    mins = [s["min_work"] for s, _ in cells if s is not None]
                    row.append(f0(mins[0]) if mins else "–")
                lines.append(table_row(*row))
            out.append("\n".join(lines))
    return "\n\n".join(out)


def _best_ratio(cells: dict[str, float]) -> str:
    """DkM-SKS's value over the best (lowest) other method's, ``–`` without both."""
    others = [v for me, v in cells.items() if me != "dkm" and v is not None and not math.isnan(v)]
    d = cells.get("dkm")
    if d is None or not others or min(others) <= 0:
        return "–"
    return f"{d / min(others):.3g}"


#: The paper's ordering of the four methods by update time and DkM-SKS / the best other one
#: there: its Table 3 (Place, default setting), the only numbers the paper gives for a point of
#: Figures 7-10 (their plots are not in its LaTeX source). On the Twitter data set it gives only
#: Table 2 (load balance).
PAPER_ORDER = tuple(sorted(METHODS, key=lambda me: PAPER_T3["update"][me]))
PAPER_RATIO = {"place": ("update", PAPER_T3["update"]),
               "twitter": ("balance", PAPER_T2["twitter"])}
#: What the paper says of each figure beside Table 3 (a block per figure).
_PAPER_SAYS = {"fig7": "ordering.paper.fig7", "fig8": "ordering.paper.fig8", "fig9": "ordering.paper.fig9",
               "fig10": "ordering.paper.fig10", "spark": "ordering.paper.spark"}


def _ordering(fig: str, ds: str, by_value: Sequence[tuple[str, Mapping[str, dict[str, float] | None]]]) -> str:
    """One line: our ordering of the four methods by update time at each value (and by total
    work, which load cannot disturb) beside the paper's, and DkM-SKS / the best other method."""
    full = [(v, {me: s for me, s in cells.items() if s is not None}) for v, cells in by_value]
    full = [(v, c) for v, c in full if all(me in c for me in METHODS)]
    if not full:
        return prose("ordering.none", dataset=DATASET_NAMES[ds])

    def order(cells: dict[str, dict[str, float]], key: str) -> tuple[str, ...]:
        return tuple(sorted(cells, key=lambda me: (cells[me][key], METHODS.index(me))))

    def summary(key: str) -> tuple[str, int]:
        orders = Counter(order(c, key) for _, c in full)
        parts = []
        for o, n in orders.most_common():
            at = [v for v, c in full if order(c, key) == o]
            where = prose("ordering.at_all") if n == len(full) > 1 else prose(
                "ordering.at", values=", ".join(at))
            parts.append(" < ".join(NAMES[me] for me in o) + " " + where)
        return "; ".join(parts), sum(1 for _, c in full if order(c, key) == PAPER_ORDER)

    ours, same = summary("update")
    work, _ = summary("work")
    verdict = ("ordering.reproduced" if same == len(full) else "ordering.partly" if same else "ordering.not_reproduced")
    ratios = [float(_best_ratio({me: c[me]["update"] for me in METHODS})) for _, c in full]
    fastest = sum(1 for _, c in full if order(c, "update")[0] == "dkm")
    key, paper = PAPER_RATIO[ds]
    paper_ratio = paper["dkm"] / min(paper[me] for me in METHODS if me != "dkm")
    return prose("ordering", dataset=DATASET_NAMES[ds], ours=ours, n=len(full), same=same,
                 verdict=prose(verdict, same=same, n=len(full)), work=work,
                 paper_order=" < ".join(NAMES[me] for me in PAPER_ORDER), paper_says=prose(_PAPER_SAYS[fig]),
                 ratio=f"{min(ratios):.3g}" if len(ratios) == 1 else f"{min(ratios):.3g}–{max(ratios):.3g}",
                 fastest=fastest, paper_ratio=f"{paper_ratio:.3g}",
                 paper_ratio_source=prose("ordering.paper_ratio.update" if key == "update"
                                          else "ordering.paper_ratio.balance"))


def _spark(res: Results, png: str | None) -> str:
    recs = res.spark()
    ok = [r for r in recs if r["status"] == "ok"]
    p0 = recs[0]["point"]
    run_s = [summarize_spark(r)["run_s"] for r in ok]
    out = [prose("spark", master=_spark_master(ok), o_init=f"{p0['o_init']:,}", subs=f"{p0['subs']:,}", T=p0["T"],
                 k_max=p0["k_max"], dataset=DATASET_NAMES[p0["dataset"]], run_lo=f0(min(run_s, default=math.nan)),
                 run_hi=f0(max(run_s, default=math.nan)), commits=_commits(ok))]
    if png is not None:
        out.append(f"![Spark, impact of m]({png})")
    lines = ["| method | m | update | kNN update | insertion | deletion | load balance | work | max worker work | "
             "max/mean | min work | `dkm run` wall (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(recs, key=lambda r: (r["point"]["m"], r["point"]["method"])):
        p = r["point"]
        if r["status"] != "ok":
            lines.append(table_row(NAMES[p["method"]], p["m"], prose("spark.failed", error=r.get("error", "")[:160]),
                              *[""] * 9))
            continue
        s = summarize_spark(r)
        lines.append(table_row(NAMES[p["method"]], p["m"], f1(s["update"]), f1(s["knn"]), f1(s["insert"]),
                               f1(s["delete"]), f1(s["balance"]), f0(s["work"]), f0(s["work_max"]),
                               f2(s["imbalance"]), f0(s["min_work"]), f0(s["run_s"])))
    out.append("\n".join(lines))
    by_m: dict[int, dict[str, dict[str, float]]] = {}
    for r in ok:
        by_m.setdefault(r["point"]["m"], {})[r["point"]["method"]] = summarize_spark(r)
    pivot = [prose("spark.methods"), "", table_row("m", *(NAMES[me] for me in METHODS), prose("sweep.best_other")),
             "|" + "---:|" * (len(METHODS) + 2)]
    for m in sorted(by_m):
        cells = {me: by_m[m][me]["update"] for me in METHODS if me in by_m[m]}
        pivot.append(table_row(m, *(f1(cells.get(me)) for me in METHODS), _best_ratio(cells)))
    out.insert(2 if png is not None else 1, "\n".join(pivot))
    ordering = _ordering("spark", p0["dataset"], [(f"m = {m}", by_m[m]) for m in sorted(by_m)])
    out.insert(3 if png is not None else 2, ordering)
    return "\n\n".join(out)


def _sedona(res: Results) -> str:
    """Apache Sedona's ``ST_KNN``, the Spark user's peer: what ``paper_sedona`` found
    (``OUT/sedona.json``)."""
    path = res.store.dir / "sedona.json"
    if not path.is_file():
        return prose("sedona.not_tried")
    rec = json.loads(path.read_text())
    rows = [table_row(f"`{t['artifact']}:{t['version']}`",
                 prose("sedona.fetched") if t["fetched"] else prose("sedona.not_fetched", error=t["fetch_error"]),
                 "–" if not t["fetched"] else prose("sedona.loads") if t.get("loads")
                 else prose("sedona.fails", error=t.get("load_error", ""))) for t in rec["tried"]]
    loaded = [t for t in rec["tried"] if t.get("loads")]
    verdict = (prose("sedona.verdict.loads", release=f"{loaded[0]['artifact']}:{loaded[0]['version']}") if loaded
               else prose("sedona.verdict.none", n=len(rec["tried"]), spark=rec["spark"], scala=rec["scala"]))
    return "\n\n".join([prose("sedona", spark=rec["spark"], scala=rec["scala"], date=rec.get("date", "–"),
                                 commit=str(rec.get("commit", ""))[:10]),
                           "| release | Maven Central | loads on this Spark |\n|---|---|---|\n" + "\n".join(rows),
                           verdict])
