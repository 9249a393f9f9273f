"""``dkm bench``: benchmarks. ``dkm bench paper`` reproduces the paper's experiments.

The measuring and the reporting live in :mod:`dkmsks.bench.paper` (in-memory engine),
:mod:`dkmsks.bench.paper_spark` (the Spark pipeline through ``dkm run``) and
:mod:`dkmsks.bench.paper_report` (plots and ``docs/paper-reproduction.md``); this module only
parses flags.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parents[3]


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(float(v)) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="benchmarks (dkm bench paper: the paper's experiments)",
                              description="Benchmarks of dkmsks.")
    sub = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    q = sub.add_parser(
        "paper",
        help="reproduce the paper's Tables 2-3 and Figures 7-10 (KOP, SOP, DkM-SKS)",
        description=(
            "Runs the paper's protocol (DESIGN §5) on the real Place data and the Twitter stand-in "
            "for KOP, SOP and DkM-SKS with the in-memory engine (m simulated workers): update time "
            "over time (Fig. 7), the impact of m (Fig. 8), |S| (Fig. 9) and k_max (Fig. 10), load "
            "balance (Table 2) and the kNN update / insertion / deletion split (Table 3), each with "
            "the deterministic work counters; and the default setting and the m sweep on the Spark "
            "pipeline (dkm run). Every measured point is appended to DIR/results-*.jsonl, so an "
            "interrupted run keeps its points and a rerun skips them. Then writes PNG plots and a "
            "markdown report."
        ),
    )
    q.add_argument("--quick", action="store_true",
                   help="small sizes (20k objects, 20k subscriptions, 12 timestamps; no Spark): about a minute")
    q.add_argument("--out", type=Path, default=None,
                   help="results folder (default .cache/bench/paper, quick: .cache/bench/paper-quick)")
    q.add_argument("--docs", type=Path, default=None,
                   help="markdown report to write (default docs/paper-reproduction.md; quick: OUT/paper-reproduction.md)")
    q.add_argument("--img-dir", type=Path, default=None,
                   help="folder for the PNG plots (default docs/img/paper; quick: OUT/img)")
    q.add_argument("--datasets", type=_names, default=("place", "twitter"), help="place,twitter (%(default)s)")
    q.add_argument("--figures", type=_names, default=("tables", "fig7", "fig8", "fig9", "fig10"),
                   help="which experiments to measure: tables (Tables 2-3 and the targets at the default "
                        "setting), fig7, fig8, fig9, fig10 (all)")
    q.add_argument("--o-init", type=int, default=None, help="|O_init| (1,000,000)")
    q.add_argument("--subscriptions", type=int, default=None, help="|S| default (1,000,000)")
    q.add_argument("--workers", type=int, default=None, help="m default (20)")
    q.add_argument("--k-max", type=int, default=None, help="k_max default (10)")
    q.add_argument("--t-series", type=int, default=None, help="timestamps of Figure 7 and the tables (120)")
    q.add_argument("--t-table", type=int, default=None,
                   help="timestamps of the Tables 2-3 points (default: --t-series, i.e. the Figure 7 run)")
    q.add_argument("--series-subs", type=int, default=None,
                   help="|S| of Figure 7 (default: --subscriptions)")
    q.add_argument("--table-subs-twitter", type=int, default=None,
                   help="|S| of Tables 2-3 on the Twitter stand-in (default: --subscriptions)")
    q.add_argument("--t-sweep", type=int, default=None, help="timestamps of each sweep point (10)")
    q.add_argument("--runs", type=int, default=None, help="repeats of the Figure 7 points (1)")
    q.add_argument("--ms", type=_ints, default=None, help="Figure 8 values of m (5,10,20,40)")
    q.add_argument("--subs-values", type=_ints, default=None,
                   help="Figure 9 values of |S| (250000,...,10000000)")
    q.add_argument("--subs-values-twitter", type=_ints, default=None,
                   help="Figure 9 values of |S| on the Twitter stand-in (default: --subs-values)")
    q.add_argument("--k-values", type=_ints, default=None, help="Figure 10 values of k_max (5,10,20,40)")
    q.add_argument("--seed", type=int, default=None, help="workload seed (7)")
    q.add_argument("--spark", action=argparse.BooleanOptionalAction, default=None,
                   help="also run the Spark pipeline points (default: on, off with --quick)")
    q.add_argument("--spark-o-init", type=int, default=100_000, help="|O_init| of the Spark points (%(default)s)")
    q.add_argument("--spark-subscriptions", type=int, default=100_000, help="|S| of the Spark points (%(default)s)")
    q.add_argument("--spark-timestamps", type=int, default=20, help="timestamps of the Spark points (%(default)s)")
    q.add_argument("--spark-ms", type=_ints, default=(5, 10, 20, 40), help="m values on Spark (%(default)s)")
    q.add_argument("--spark-datasets", type=_names, default=("place",), help="data sets on Spark (%(default)s)")
    q.add_argument("--spark-code", type=Path, default=None,
                   help="run the Spark CLI of this source tree (e.g. a snapshot of a commit) instead of "
                        "the installed one")
    q.add_argument("--series-subs-twitter", type=int, default=None,
                   help="|S| of Figure 7 on the Twitter stand-in (default: --subscriptions)")
    q.add_argument("--sweep-subs", type=int, default=None,
                   help="|S| of the m and k_max sweeps (default: --subscriptions)")
    q.add_argument("--report-only", action="store_true", help="measure nothing; rewrite plots and report")
    q.add_argument("--no-report", action="store_true", help="measure only")
    q.add_argument("--quiet", action="store_true", help="no progress bars")
    q.set_defaults(func=run_paper)


def _config(args: argparse.Namespace):
    from dkmsks.bench.paper import PaperConfig

    cfg = PaperConfig.quick_config() if args.quick else PaperConfig()
    over = {
        "datasets": args.datasets, "figures": args.figures, "o_init": args.o_init,
        "subs": args.subscriptions, "m": args.workers, "k_max": args.k_max,
        "t_series": args.t_series, "t_sweep": args.t_sweep, "runs": args.runs, "ms": args.ms,
        "subs_values": args.subs_values, "k_values": args.k_values, "seed": args.seed,
    }
    for name, value in over.items():
        if value is not None:
            setattr(cfg, name, value)
    if args.series_subs is not None:
        cfg.series_subs = {ds: args.series_subs for ds in ("place", "twitter")}
    if args.series_subs_twitter is not None:
        cfg.series_subs["twitter"] = args.series_subs_twitter
    if args.t_table is not None:
        cfg.t_table = args.t_table
    if args.table_subs_twitter is not None:
        cfg.table_subs = {"twitter": args.table_subs_twitter}
    if args.sweep_subs is not None:
        cfg.sweep_subs = args.sweep_subs
    if args.subs_values_twitter is not None:
        cfg.subs_values_by_dataset = {"twitter": args.subs_values_twitter}
    bad = [f for f in cfg.figures if f not in ("tables", "fig7", "fig8", "fig9", "fig10")]
    if bad:
        raise ValueError(f"unknown experiment(s) {', '.join(bad)}; choose among tables, fig7, fig8, fig9, fig10")
    if cfg.t_series < 1 or cfg.t_sweep < 1 or cfg.runs < 1:
        raise ValueError("--t-series, --t-sweep and --runs must be >= 1")
    return cfg


def run_paper(args: argparse.Namespace) -> int:
    from dkmsks.bench.common import dataset_path
    from dkmsks.bench.paper import Runner, Store

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    started = time.perf_counter()
    cfg = _config(args)
    out = args.out or (_REPO / ".cache" / "bench" / ("paper-quick" if args.quick else "paper"))
    docs = args.docs or (out / "paper-reproduction.md" if args.quick else _REPO / "docs" / "paper-reproduction.md")
    img = args.img_dir or (out / "img" if args.quick else _REPO / "docs" / "img" / "paper")
    for ds in cfg.datasets:
        path = dataset_path(ds)
        if not path.exists():
            raise FileNotFoundError(f"real data file {path} is absent (set DKMSKS_DATA_DIR)")
    from dkmsks.bench.paper_spark import SparkConfig, run_spark_points

    store = Store(out)
    spark_on = args.spark if args.spark is not None else not args.quick
    scfg = SparkConfig(o_init=args.spark_o_init, subs=args.spark_subscriptions,
                       T=args.spark_timestamps, ms=args.spark_ms, default_m=cfg.m,
                       datasets=args.spark_datasets, seed=cfg.seed, k_max=cfg.k_max,
                       code_root=args.spark_code)
    if not args.report_only:
        Runner(cfg, store, progress=not args.quiet).run()
        if spark_on:
            run_spark_points(scfg, store, out, progress=not args.quiet)
    if not args.no_report:
        from dkmsks.bench.paper_report import write_report

        write_report(cfg, store, docs, img, elapsed_s=time.perf_counter() - started,
                     command=" ".join(["dkm", "bench", "paper"] + sys.argv[3:]) if sys.argv[1:3] == ["bench", "paper"]
                     else "dkm bench paper",
                     spark_points=scfg.points() if spark_on else [])
        print(f"wrote {docs} and plots in {img}")
    print(f"done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0
