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
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dkmsks.bench.common import dataset_path, load_average

METHODS = ("kop", "sop", "dkm")

#: Per timestamp, over workers: the paper's metrics from ``worker_metrics`` (one JSON per row).
_METRICS_SQL = (
    "SELECT to_json(named_struct('t', t, 'knn_max', max(knn_ms), 'knn_min', min(knn_ms), "
    "'insert', max(insert_ms), 'delete', max(delete_ms), 'work', sum(pairs_tested), "
    "'work_max', max(pairs_tested), 'work_min', min(pairs_tested), 'workers', count(*), "
    "'min_work', sum(pairs_in_ball))) AS j FROM worker_metrics GROUP BY t "
    "UNION ALL SELECT to_json(named_struct('job', job, 'phase', phase, 'ms', sum(ms))) AS j "
    "FROM run_metrics GROUP BY job, phase"
)


@dataclass(frozen=True)
class SparkPoint:
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
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class SparkConfig:
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

    def points(self) -> list[SparkPoint]:
        """The default m for every method first, then the other m values for DkM-SKS, then
        for KOP and SOP (so an interrupted run has the most useful points)."""
        others = sorted(set(self.ms) - {self.default_m})
        order = [(self.default_m, me) for me in METHODS] + [(m, "dkm") for m in others] + [
            (m, me) for me in ("kop", "sop") for m in others]
        return [SparkPoint(ds, self.o_init, self.subs, self.k_max, m, me, self.T, self.seed)
                for ds in self.datasets for m, me in order]


def _dkm() -> list[str]:
    return [sys.executable, "-m", "dkmsks.cli"]


def _sh(cmd: list[str], log: Path, timeout: float, code_root: Path | None = None) -> tuple[int, float, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if code_root is not None:
        env["PYTHONPATH"] = str(code_root / "lib")
    c0 = time.perf_counter()
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=fh, text=True, timeout=timeout,
                                  env=env, cwd=str(code_root) if code_root is not None else None)
        except subprocess.TimeoutExpired:
            return -1, time.perf_counter() - c0, f"timed out after {timeout:.0f} s"
        fh.write(proc.stdout)
    return proc.returncode, time.perf_counter() - c0, proc.stdout


def parse_sql_json(stdout: str) -> list[dict[str, Any]]:
    """The JSON cells of ``dkm sql`` output (``DataFrame.show`` prints ``|{...}|`` rows)."""
    rows = []
    for line in stdout.splitlines():
        s = line.strip()
        if s.startswith("|{") and s.endswith("|"):
            rows.append(json.loads(s[1:-1].strip()))
    return rows


def run_spark_points(cfg: SparkConfig, store: Any, out: Path, *, progress: bool = True) -> int:
    """Measure every Spark point of ``cfg`` not yet in ``store``; returns how many succeeded."""
    from tqdm import tqdm

    todo = [p for p in cfg.points() if not _done(store, p)]
    if not todo:
        return 0
    logs = out / "spark-logs"
    logs.mkdir(parents=True, exist_ok=True)
    n = 0
    with tqdm(total=len(todo), unit="run", desc="spark points", disable=not progress,
              dynamic_ncols=True) as bar:
        for p in todo:
            data = out / "spark-data" / f"{p.dataset}-{p.o_init}-{p.subs}-{p.T}-k{p.k_max}-s{p.seed}"
            log = logs / f"{p.dataset}-{p.method}-m{p.m}.log"
            rec = _record(p)
            if not (data / "events.tsv.gz").exists():
                rc, secs, text = _sh(_dkm() + [
                    "generate", "--source", str(dataset_path(p.dataset)), "--out", str(data),
                    "--o-init", str(p.o_init), "--subscriptions", str(p.subs), "--timestamps", str(p.T),
                    "--k-max", str(p.k_max), "--seed", str(p.seed)], log, cfg.timeout_s, cfg.code_root)
                if rc != 0:
                    rec.update(status="failed", error=f"dkm generate exit {rc}: {text[-300:]} (log {log})")
                    store.add(rec)
                    bar.update(1)
                    continue
            wh = out / "spark-wh" / f"{p.dataset}-{p.method}-m{p.m}"
            shutil.rmtree(wh, ignore_errors=True)
            load0 = load_average()
            rc, run_s, text = _sh(_dkm() + [
                "run", "--objects", str(data / "objects.tsv.gz"), "--events", str(data / "events.tsv.gz"),
                "--method", p.method, "--workers", str(p.m), "--warehouse", str(wh)], log, cfg.timeout_s,
                cfg.code_root)
            if rc != 0:
                rec.update(status="failed", error=f"dkm run exit {rc} (see {log}): {text[-300:]}")
                store.add(rec)
                bar.update(1)
                continue
            rc, _, text = _sh(_dkm() + ["sql", "--warehouse", str(wh), "--limit", "1000000",
                                        _METRICS_SQL], log, cfg.timeout_s, cfg.code_root)
            rows = parse_sql_json(text) if rc == 0 else []
            per_t = sorted((r for r in rows if "t" in r), key=lambda r: r["t"])
            phases = [r for r in rows if "phase" in r]
            if rc != 0 or not per_t:
                rec.update(status="failed", error=f"dkm sql exit {rc}, {len(per_t)} metric rows (see {log})")
                store.add(rec)
                bar.update(1)
                continue
            rec["status"] = "ok"
            rec["run_s"] = run_s
            rec["ts"] = {k: [r[k] for r in per_t] for k in per_t[0]}
            rec["phases_ms"] = {f"{r['job']}.{r['phase']}": r["ms"] for r in phases}
            rec["load_avg"] = [load0, load_average()]
            rec["code"] = str(cfg.code_root) if cfg.code_root is not None else "working tree"
            store.add(rec)
            shutil.rmtree(wh, ignore_errors=True)
            n += 1
            bar.update(1)
    return n


def _record(p: SparkPoint) -> dict[str, Any]:
    return {"key": p.key(), "point": asdict(p), "status": "failed",
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _done(store: Any, p: SparkPoint) -> bool:
    rec = store.records.get(p.key())
    return rec is not None and rec.get("status") == "ok"
