"""The PNG plots of the paper report (Figures 7-10, PS²Stream's workers and the Spark ``m`` sweep),
from the store."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dkmsks.bench.common import DATASET_NAMES
from dkmsks.bench.paper_results import METHODS, NAMES, SWEEPS, Results, label, per_worker, short, summarize_spark

COLORS = {("kop", "live"): "tab:blue", ("sop", "live"): "tab:orange", ("dkm", "live"): "tab:green",
          ("dkm", "paper"): "tab:olive", ("sop", "paper"): "tab:red", ("ps2", "live"): "tab:purple"}
STYLES = {"live": "-", "paper": "--"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_series(res: Results, img: Path) -> dict[str, Path]:
    """Figure 7: update time (and max worker work) per timestamp, one panel per data set."""
    plt = _plt()
    out = {}
    for what, key, ylabel, scale in (("time", "update", "update time per timestamp [ms]", 1e3),
                                     ("work", "work_max", "pairs tested by the busiest worker", 1.0)):
        fig, axes = plt.subplots(1, len(res.cfg.datasets), figsize=(6.2 * len(res.cfg.datasets), 4.2),
                                 squeeze=False)
        for ax, ds in zip(axes[0], res.cfg.datasets, strict=True):
            for me, nc in res.cfg.variants_series:
                rec = res.series(ds, me, nc)
                if rec is None:
                    continue
                ts = rec["ts"]
                y = np.asarray(ts[key], float) * scale
                if what == "time" and y.size >= 15:
                    # raw values faint, a centred 9-timestamp rolling median bold (load noise)
                    ax.plot(ts["t"], y, STYLES[nc], color=COLORS[(me, nc)], linewidth=0.6, alpha=0.3)
                    h = 4
                    smooth = [float(np.median(y[max(0, i - h): i + h + 1])) for i in range(y.size)]
                    ax.plot(ts["t"], smooth, STYLES[nc], color=COLORS[(me, nc)], linewidth=1.8,
                            label=label(me, nc) + " (9-ts rolling median)")
                else:
                    ax.plot(ts["t"], y, STYLES[nc], color=COLORS[(me, nc)], label=label(me, nc), linewidth=1.2)
            p = res.cfg.series_point(ds, "dkm", "live")
            ax.set_title(f"{DATASET_NAMES[ds]} (|O_init| = {p.o_init:,}, |S| = {p.subs:,}, m = {p.m})",
                         fontsize=10)
            ax.set_yscale("log")
            ax.set_xlabel("timestamp")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        fig.suptitle("Figure 7: " + ("update time as a function of time" if what == "time"
                                     else "busiest worker's work as a function of time (deterministic)"))
        fig.tight_layout()
        path = img / f"fig7_{what}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out[what] = path
    return out


def plot_workers(res: Results, img: Path) -> Path | None:
    """PS²Stream per worker, one column per data set, two rows per run (Tables 2-3, Figure 7):
    the estimated count load ``L(w)`` and the measured work, each relative to the mean worker,
    at the start and at the end; then where the run's new subscriptions went."""
    cols = []
    for ds in res.cfg.datasets:
        views = []
        for kind, p in res.settings(ds):
            rec = res.run_record(kind, ds, "ps2", "live")
            pw = per_worker(rec) if rec is not None else None
            if pw is not None:
                name = {"tables": "Tables 2–3 run", "fig7": "Figure 7 run"}.get(
                    kind, "PS²Stream alone, default setting")
                views.append((f"{DATASET_NAMES[ds]}, {name} (|S| = {p.subs:,}, {p.T} timestamps)", pw))
        if views:
            cols.append(views)
    if not cols:
        return None
    plt = _plt()
    n_rows = 2 * max(len(v) for v in cols)
    fig, axes = plt.subplots(n_rows, len(cols), figsize=(7.0 * len(cols), 3.4 * n_rows), squeeze=False)
    for col, views in enumerate(cols):
        for i, (title, pw) in enumerate(views):
            x = np.arange(pw["m"])
            bars = ((pw["est0"], "estimated L(w), start", "tab:gray"),
                    (pw["est1"], "estimated L(w), end", "lightgray"),
                    (pw["work_first"], f"work, first {pw['w']} timestamps", "tab:purple"),
                    (pw["work_last"], f"work, last {pw['w']} timestamps", "plum"))
            ax = axes[2 * i][col]
            width = 0.2
            for j, (values, name, color) in enumerate(bars):
                v = np.asarray(values, float)
                ax.bar(x + (j - 1.5) * width, v / v.mean(), width, label=name, color=color)
            top = max(float(np.max(np.asarray(v, float) / np.mean(v))) for v, *_ in bars)
            ax.set_ylim(0, 1.35 * top)
            ax.axhline(1.0, color="black", linewidth=0.6)
            ax.set_xticks(x)
            ax.set_xlabel("worker")
            ax.set_ylabel("relative to the mean worker")
            ax.set_title(title, fontsize=9)
            ax.legend(fontsize=7, ncol=2, loc="upper center")
            ax.grid(True, axis="y", alpha=0.3)
            ax = axes[2 * i + 1][col]
            ax.bar(x, pw["new"], color="tab:purple")
            ax.axhline(pw["n_new"] / pw["m"], color="black", linewidth=0.6, label="fair share (1/m)")
            ax.set_xticks(x)
            ax.set_xlabel("worker")
            ax.set_ylabel(f"new subscriptions, {pw['T']} timestamps")
            ax.legend(fontsize=7)
            ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("PS²Stream per worker: estimated count load L(w) vs measured work; where new subscriptions went")
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    path = img / "workers_ps2.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_sweep(res: Results, fig: str, img: Path) -> Path:
    """Plot sweep ``fig`` (update time, load balance, busiest worker's work) into ``img``."""
    plt = _plt()
    dss = res.cfg.datasets
    panels = (("update", "update time [ms]"), ("balance", "load balance [ms]"),
              ("work_max", "busiest worker's work [pairs/ts]"))
    figure, axes = plt.subplots(len(dss), len(panels), figsize=(5.0 * len(panels), 3.8 * len(dss)),
                                squeeze=False)
    xname = {"fig8": "m (workers)", "fig9": "|S| (initial subscriptions)", "fig10": "k_max"}[fig]
    for row, ds in enumerate(dss):
        _, values, table = res.sweep(fig, ds)
        for col, (key, ylabel) in enumerate(panels):
            ax = axes[row][col]
            for (me, nc), cells in table.items():
                xs = [v for v in values if cells[v][0] is not None]
                ys = [cells[v][0][key] for v in xs]
                if xs:
                    ax.plot(xs, ys, STYLES[nc] + "o", color=COLORS[(me, nc)], label=label(me, nc),
                            markersize=4)
            ax.set_yscale("log")
            if fig in ("fig9", "fig8"):
                ax.set_xscale("log")
            ax.set_xticks(values)
            ax.set_xticklabels([short(v) for v in values])
            if fig != "fig10":
                ax.minorticks_off()
            ax.set_xlabel(xname)
            ax.set_ylabel(ylabel)
            ax.set_title(DATASET_NAMES[ds], fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            if col == 0:
                ax.legend(fontsize=7)
    figure.suptitle(SWEEPS[fig])
    figure.tight_layout()
    path = img / f"{fig}.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_spark(res: Results, img: Path) -> Path | None:
    """Plot the Spark points against m into ``img``; ``None`` when none was measured."""
    recs = [r for r in res.spark() if r["status"] == "ok"]
    if not recs:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    for me in ("dkm", "ps2", "kop", "sop"):
        pts = sorted((r["point"]["m"], summarize_spark(r)) for r in recs if r["point"]["method"] == me)
        if not pts:
            continue
        xs = [p[0] for p in pts]
        for ax, key in zip(axes, ("update", "balance", "work_max"), strict=True):
            ax.plot(xs, [p[1][key] for p in pts], "-o", color=COLORS[(me, "live")], label=NAMES[me], markersize=4)
    ms = sorted({r["point"]["m"] for r in recs})
    for ax, yl in zip(axes, ("update time [ms]", "load balance [ms]", "busiest worker's work [pairs/ts]"),
                       strict=True):
        ax.set_xscale("log")
        ax.set_xticks(ms)
        ax.set_xticklabels([str(m) for m in ms])
        ax.minorticks_off()
        ax.set_yscale("log")
        ax.set_xlabel("m (workers = Spark tasks)")
        ax.set_ylabel(yl)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Spark pipeline (dkm run): impact of m")
    fig.tight_layout()
    path = img / "spark_m.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_table2(res: Results, img: Path, paper: dict[str, dict[str, float]]) -> Path | None:
    """Table 2 as bars: each method's load balance relative to DkM-SKS's, the paper's beside
    ours, one panel per data set (``paper``: the paper's Table 2); ``None`` when nothing of it
    was measured."""
    rows = {ds: res.default_setting(ds) for ds in res.cfg.datasets}
    if not any(("dkm", "live") in summ for summ in rows.values()):
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(rows), figsize=(6.0 * len(rows), 3.8), squeeze=False)
    methods = [me for me in METHODS if me != "dkm"]
    for ax, (ds, summ) in zip(axes[0], rows.items(), strict=True):
        x = np.arange(len(methods))
        d = summ.get(("dkm", "live"))
        ours = [summ[(me, "live")]["balance"] / d["balance"] if d and (me, "live") in summ and d["balance"] > 0
                else np.nan for me in methods]
        theirs = [paper[ds][me] / paper[ds]["dkm"] for me in methods]
        ax.bar(x - 0.2, theirs, 0.4, label="paper", color="lightgray", edgecolor="black")
        ax.bar(x + 0.2, ours, 0.4, label="ours", color=[COLORS[(me, "live")] for me in methods])
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_xticks(x)
        ax.set_xticklabels([NAMES[me] for me in methods])
        ax.set_yscale("log")
        ax.set_ylabel("load balance / DkM-SKS's")
        ax.set_title(DATASET_NAMES[ds], fontsize=10)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Table 2: load balance relative to DkM-SKS (default setting)")
    fig.tight_layout()
    path = img / "table2.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_table3(res: Results, img: Path, paper: dict[str, dict[str, float]]) -> Path | None:
    """Table 3 as bars: kNN update, insertion and deletion per method, the paper's (Place)
    beside ours per data set (``paper``: the paper's Table 3); ``None`` when nothing of it was
    measured."""
    panels = [("paper, Place", {me: {part: paper[part][me] for part in ("knn", "insert", "delete")} for me in METHODS})]
    for ds in res.cfg.datasets:
        summ = res.default_setting(ds)
        ours = {me: summ[(me, "live")] for me in METHODS if (me, "live") in summ}
        if ours:
            panels.append((f"ours, {DATASET_NAMES[ds]}", ours))
    if len(panels) == 1:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False)
    parts = (("knn", "kNN update", "tab:gray"), ("insert", "subscription ins.", "tab:cyan"),
             ("delete", "subscription del.", "tab:pink"))
    for ax, (title, by_method) in zip(axes[0], panels, strict=True):
        methods = [me for me in METHODS if me in by_method]
        x = np.arange(len(methods))
        for j, (key, name, color) in enumerate(parts):
            ax.bar(x + (j - 1) * 0.27, [max(by_method[me][key], 1e-3) for me in methods], 0.27, label=name,
                   color=color)
        ax.set_xticks(x)
        ax.set_xticklabels([NAMES[me] for me in methods])
        ax.set_yscale("log")
        ax.set_ylabel("ms per timestamp")
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Table 3: decomposed update time (default setting)")
    fig.tight_layout()
    path = img / "table3.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
