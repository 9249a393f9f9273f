"""Load: a backlog of timestamps at the paper's rates processed in ONE micro-batch run.

One command (issue 7, recorded in ``docs/reliability.md``)::

    nice -n 5 dkm bench backlog [--o-init 100000] [--subscriptions 100000]
        [--timestamps 1000] [--workers 20] [--workdir .cache/bench-backlog]

1. ``dkm generate`` a workload from the real Place data at the paper's per-timestamp rates
   (docs/design.md §5: 1,000 objects, 100 insertions, 100 deletions per timestamp);
2. the ingest and partition jobs (``spark_apps/ingest.py``, ``spark_apps/partition.py``);
3. ONE ``spark_apps/microbatch.py`` run over the whole backlog, as a subprocess whose process
   tree (driver, JVM, Python workers) is sampled for its peak resident memory; the run must
   exit 0 (no out-of-memory);
4. the per-timestamp cost from ``timestamp_metrics`` (slowest worker's kNN + insertion +
   deletion time, pairs tested) and the run's phases from ``run_metrics``: the first 100
   timestamps, the 100 before the last 100, and the last 100;
5. ``dkm export`` at the last timestamp equals ``dkm oracle`` (with ``--verify``, default on
   when ``|S| * T`` is small enough for the brute-force oracle to finish in minutes).

Raw numbers go to ``<workdir>/results.json`` (with the commit, the machine and the parameters);
a Markdown summary is printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from dkmsks.bench.common import (
    DKM,
    REPO,
    Report,
    ResultFile,
    add_workload_flags,
    bench_main,
    dataset_path,
    run_command,
)
from dkmsks.bench.stats import mean, median

PY = sys.executable


def step(cmd: list[str], log: Path, *, sample_memory: bool = False) -> dict:
    """Run one step of the benchmark; its wall time and peak memory, or exit with its log's tail."""
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY, SPARK_LOCAL_IP="127.0.0.1")
    log.unlink(missing_ok=True)
    run = run_command(cmd, log, env=env, cwd=REPO, sample_memory=sample_memory)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} exited {run.returncode} after {run.seconds:.1f} s:\n"
                         f"{log.read_text()[-4000:]}")
    return {"cmd": " ".join(cmd), "rc": run.returncode, "seconds": round(run.seconds, 1),
            "peak_rss_mb": round(run.peak_rss_mib) if run.peak_rss_mib is not None else None}


def spark_app(name: str) -> list[str]:
    """The command line that runs ``spark_apps/<name>.py`` with this interpreter."""
    return [PY, str(REPO / "spark_apps" / f"{name}.py")]


def metrics(warehouse: Path) -> dict:
    """Per-timestamp costs (first vs last 100) and run phases, read through Spark SQL views."""
    from dkmsks.spark.session import build_session
    from dkmsks.warehouse import Warehouse

    spark = build_session(Warehouse(warehouse), app_name="bench-backlog-metrics")
    try:
        rows = spark.sql(
            "SELECT t, knn_ms_slowest_worker + insert_ms + delete_ms AS ms, knn_ms_slowest_worker AS knn_ms, "
            "pairs_tested, pairs_in_ball, work_max_over_mean, subscriptions FROM timestamp_metrics ORDER BY t"
        ).collect()
        try:
            phases = spark.sql("SELECT run_id, from_t, to_t, phase, ms FROM run_metrics WHERE job = 'microbatch' "
                               "ORDER BY to_t").collect()
        except Exception as err:  # noqa: BLE001 - the phase table is informative only
            print(f"run_metrics unreadable: {err}", file=sys.stderr)
            phases = []
        ledger = spark.sql("SELECT count(*) AS n, count(DISTINCT t) AS d, max(t) AS last FROM ledger").collect()[0]
    finally:
        spark.stop()

    def window(rs) -> dict:
        return {
            "timestamps": len(rs),
            "worker_ms_median": round(median(r.ms for r in rs), 2),
            "worker_ms_mean": round(mean(r.ms for r in rs), 2),
            "knn_ms_median": round(median(r.knn_ms for r in rs), 2),
            "pairs_tested_mean": round(mean(r.pairs_tested for r in rs), 1),
            "pairs_in_ball_mean": round(mean(r.pairs_in_ball for r in rs), 1),
            "work_max_over_mean": round(mean(r.work_max_over_mean for r in rs), 3),
            "live_subscriptions_mean": round(mean(r.subscriptions for r in rs), 1),
        }

    return {
        "per_timestamp_rows": len(rows),
        "first_100": window(rows[:100]),
        "previous_100": window(rows[-200:-100]) if len(rows) >= 200 else None,
        "last_100": window(rows[-100:]),
        "ledger": {"rows": ledger.n, "distinct": ledger.d, "last": ledger.last},
        "run_phases_ms": [(r.run_id, r.from_t, r.to_t, r.phase, round(r.ms)) for r in phases],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench backlog``: run the benchmark; the exit status (1 when the export differs from the oracle)."""
    p = argparse.ArgumentParser(prog="dkm bench backlog", description=__doc__.splitlines()[0])
    add_workload_flags(p, o_init=100_000, subscriptions=100_000, timestamps=1000, objects_per_ts=1000,
                       inserts_per_ts=100, deletes_per_ts=100, k_max=10, seed=7, workers=20, method="dkm")
    p.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench-backlog")
    p.add_argument("--verify", choices=["auto", "yes", "no"], default="auto",
                   help="compare the last timestamp with dkm oracle (auto: when small enough)")
    p.add_argument("--partition-args", default="", help="extra flags for the partition job, e.g. '--gamma1 40'")
    return bench_main(p, argv, run)


def run(a: argparse.Namespace) -> Report:
    """Generate, ingest, partition, process the whole backlog in one run, check it; the report."""
    source = dataset_path("place", must_exist=True)

    work = a.workdir.resolve()
    wl, wh, logs = work / "workload", work / "warehouse", work / "logs"
    shutil.rmtree(wh, ignore_errors=True)
    results = ResultFile(work / "results.json", {k: str(v) for k, v in vars(a).items()}, spark=True)
    steps = results.data["steps"]
    dkm = list(DKM)
    objects, events = wl / "objects.tsv.gz", wl / "events.tsv.gz"
    results.put("generate", step(dkm + [
        "generate", "--source", str(source), "--out", str(wl), "--o-init", str(a.o_init),
        "--subscriptions", str(a.subscriptions), "--timestamps", str(a.timestamps),
        "--objects-per-ts", str(a.objects_per_ts), "--inserts-per-ts", str(a.inserts_per_ts),
        "--deletes-per-ts", str(a.deletes_per_ts), "--k-max", str(a.k_max), "--seed", str(a.seed)],
        logs / "generate.log"))
    results.put("ingest", step(spark_app("ingest") + [
        "--warehouse", str(wh), "--objects", str(objects), "--events", str(events), "--run-id", "bench"],
        logs / "ingest.log"))
    results.put("partition", step(spark_app("partition") + [
        "--warehouse", str(wh), "--method", a.method, "--workers", str(a.workers), *a.partition_args.split(),
        "--run-id", "bench"], logs / "partition.log"))
    results.put("microbatch", step(spark_app("microbatch") + ["--warehouse", str(wh), "--run-id", "backlog"],
                                   logs / "microbatch.log", sample_memory=True))
    steps["microbatch"]["summary"] = [ln for ln in (logs / "microbatch.log").read_text().splitlines()
                                      if ln.startswith("processed")]
    verify = a.verify == "yes" or (a.verify == "auto" and a.subscriptions * a.timestamps <= 5e7)
    if verify:
        step(dkm + ["export", "--warehouse", str(wh), "--out", str(work / "export.jsonl")], logs / "export.log")
        step(dkm + ["oracle", "--objects", str(objects), "--events", str(events), "--as-of", str(a.timestamps),
                    "--out", str(work / "oracle.jsonl")], logs / "oracle.log")
        results.data["export_equals_oracle"] = (
            (work / "export.jsonl").read_bytes() == (work / "oracle.jsonl").read_bytes())
    results.data["metrics"] = metrics(wh)
    results.save()

    m, mb = results.data["metrics"], steps["microbatch"]
    first, last = m["first_100"], m["last_100"]
    prev = m["previous_100"] or {}  # none on a run shorter than 200 timestamps
    lines = [f"commit {results.data['commit']}", "",
             "| |O_init| | |S| | timestamps | m | one run | peak RSS | ledger | export = oracle |",
             "|---|---|---|---|---|---|---|---|",
             f"| {a.o_init:,} | {a.subscriptions:,} | {a.timestamps:,} | {a.workers} | {mb['seconds']:.0f} s | "
             f"{mb['peak_rss_mb']:,} MiB | {m['ledger']['distinct']:,} distinct of {m['ledger']['rows']:,} rows | "
             f"{results.data.get('export_equals_oracle', 'not checked')} |",
             "", "| per timestamp | first 100 | the 100 before the last | last 100 |", "|---|---|---|---|"]
    lines += [f"| {key} | {first[key]:,} | {format(prev[key], ',') if key in prev else '–'} | {last[key]:,} |"
              for key in ("worker_ms_median", "worker_ms_mean", "knn_ms_median", "pairs_tested_mean",
                          "pairs_in_ball_mean", "work_max_over_mean", "live_subscriptions_mean")]
    lines += ["", f"run phases: {m['run_phases_ms']}", f"raw: {results.path}"]
    failure = "" if results.data.get("export_equals_oracle", True) else \
        f"dkm export at t = {a.timestamps} differs from dkm oracle"
    return Report("dkm bench backlog", "\n".join(lines), failure)
