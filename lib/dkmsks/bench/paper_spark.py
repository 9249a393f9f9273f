"""The paper's default setting and its ``m`` sweep on the Spark pipeline (workers = Spark tasks).

Only the public command line is used, each step in its own process: ``dkm generate`` writes the
workload files once per data set, ``dkm run`` ingests, partitions and processes every
timestamp into a fresh warehouse per ``(method, m)``, and ``dkm sql`` reads the per-worker
``worker_metrics`` (kNN / insertion / deletion milliseconds and work counters per timestamp)
and the ``run_metrics`` phase times back as JSON. Each finished point is appended to the same
store as the in-memory points (``"kind": "spark"``), so a rerun skips it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dkmsks.bench.common import DKM, REPO, dataset_path, load_average, run_command
from dkmsks.bench.paper_points import Store, point_record
from dkmsks.spark.session import DEFAULT_MASTER
from dkmsks.spark.sql_files import statement

#: The methods measured on Spark, PS²Stream among them (``dkm run --method ps2``).
METHODS = ("kop", "sop", "dkm", "ps2")


@dataclass(frozen=True)
class SparkPoint:
    """One ``dkm run`` on local Spark: the workload, the method and m."""

    dataset: str
    o_init: int
    subs: int
    k_max: int
    m: int
    method: str
    T: int
    seed: int = 7
    new_cost: str = "live"
    kind: str = "spark"

    def key(self) -> str:
        """The point's identity in the store."""
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class SparkConfig:
    """The Spark points to measure: one workload, the methods at each m."""

    o_init: int = 100_000
    subs: int = 100_000
    T: int = 20
    ms: tuple[int, ...] = (5, 10, 20, 40)
    default_m: int = 20
    datasets: tuple[str, ...] = ("place",)
    seed: int = 7
    k_max: int = 10
    timeout_s: float = 1800.0
    code_root: Path | None = None  # run the CLI of this source tree (its lib/ on PYTHONPATH)
    master: str = field(default_factory=lambda: os.environ.get("DKMSKS_SPARK_MASTER", DEFAULT_MASTER))

    def run(self, args: list[str], log: Path) -> tuple[int, float, str]:
        """``dkm ARGS`` from the code under measurement: exit code, seconds, stdout."""
        env = dict(os.environ)
        if self.code_root is not None:
            env["PYTHONPATH"] = str(self.code_root / "lib")
        done = run_command([*DKM, *args], log, timeout=self.timeout_s, env=env, cwd=self.code_root)
        if done.timed_out:
            return -1, done.seconds, f"timed out after {self.timeout_s:.0f} s"
        return done.returncode, done.seconds, done.stdout

    def points(self) -> list[SparkPoint]:
        """The default m for every method first, then the other m values for DkM-SKS, then
        for KOP, SOP and PS²Stream (so an interrupted run has the most useful points)."""
        others = sorted(set(self.ms) - {self.default_m})
        order = [(self.default_m, me) for me in METHODS] + [(m, "dkm") for m in others] + [
            (m, me) for me in METHODS if me != "dkm" for m in others]
        return [SparkPoint(ds, self.o_init, self.subs, self.k_max, m, me, self.T, self.seed)
                for ds in self.datasets for m, me in order]


def parse_sql_json(stdout: str) -> list[dict[str, Any]]:
    """The JSON cells of ``dkm sql`` output (``DataFrame.show`` prints ``|{...}|`` rows)."""
    rows = []
    for line in stdout.splitlines():
        s = line.strip()
        if s.startswith("|{") and s.endswith("|"):
            rows.append(json.loads(s[1:-1].strip()))
    return rows


def run_spark_points(cfg: SparkConfig, store: Store, out: Path, *, progress: bool = True) -> int:
    """Measure every Spark point of ``cfg`` not yet in ``store``; returns how many succeeded."""
    from tqdm import tqdm

    todo = [p for p in cfg.points() if not store.done(p)]
    n = 0
    with tqdm(total=len(todo), unit="run", desc="spark points", disable=not progress,
              dynamic_ncols=True) as bar:
        for p in todo:
            rec = measure_spark_point(cfg, p, out)
            store.add(rec)
            n += rec["status"] == "ok"
            bar.update(1)
    return n


def measure_spark_point(cfg: SparkConfig, p: SparkPoint, out: Path) -> dict[str, Any]:
    """``dkm generate`` (once per workload), ``dkm run`` on a fresh warehouse, ``dkm sql``."""
    started = time.perf_counter()
    data = out / "spark-data" / f"{p.dataset}-{p.o_init}-{p.subs}-{p.T}-k{p.k_max}-s{p.seed}"
    log = out / "spark-logs" / f"{p.dataset}-{p.method}-m{p.m}.log"
    code = cfg.code_root if cfg.code_root is not None else REPO
    if not (data / "events.tsv.gz").exists():
        rc, _, text = cfg.run([
            "generate", "--source", str(dataset_path(p.dataset)), "--out", str(data),
            "--o-init", str(p.o_init), "--subscriptions", str(p.subs), "--timestamps", str(p.T),
            "--k-max", str(p.k_max), "--seed", str(p.seed)], log)
        if rc != 0:
            return point_record(p, "failed", code=code, error=f"dkm generate exit {rc}: {text[-300:]} (log {log})")
    wh = out / "spark-wh" / f"{p.dataset}-{p.method}-m{p.m}"
    shutil.rmtree(wh, ignore_errors=True)
    load0 = load_average()
    rc, run_s, text = cfg.run([
        "run", "--objects", str(data / "objects.tsv.gz"), "--events", str(data / "events.tsv.gz"),
        "--method", p.method, "--workers", str(p.m), "--warehouse", str(wh), "--master", cfg.master], log)
    if rc != 0:
        return point_record(p, "failed", code=code, error=f"dkm run exit {rc} (see {log}): {text[-300:]}")
    rc, _, text = cfg.run(["sql", "--warehouse", str(wh), "--limit", "1000000",
                           statement("bench/spark_point_metrics.sql")], log)
    rows = parse_sql_json(text) if rc == 0 else []
    per_t = sorted((r for r in rows if "t" in r), key=lambda r: r["t"])
    if rc != 0 or not per_t:
        return point_record(p, "failed", code=code, error=f"dkm sql exit {rc}, {len(per_t)} metric rows (see {log})")
    rec = point_record(p, "ok", code=code)
    rec["run_s"] = run_s
    rec["master"] = cfg.master
    rec["ts"] = {k: [r[k] for r in per_t] for k in per_t[0]}
    rec["phases_ms"] = {f"{r['job']}.{r['phase']}": r["ms"] for r in rows if "phase" in r}
    rec["load_avg"] = [load0, load_average()]
    shutil.rmtree(wh, ignore_errors=True)
    rec["elapsed_s"] = time.perf_counter() - started  # generate (once), run, sql and clean-up
    return rec
