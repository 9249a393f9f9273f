"""The warehouse on a local folder and on S3-compatible object storage, side by side in one run.

The same live workload (the paper's |O_init| = 1M, |S| = 1M, m = 20, DkM-SKS by default) on two
warehouses: a folder, and ``s3://`` on the Versity S3 Gateway this run starts on 127.0.0.1
(``scripts/objectstore.sh``, its data in the work folder). Each step runs on one warehouse, then
on the other, before the next step, so the machine's drift falls on both alike:

1. the ingestion job and the partition job (``spark_apps/ingest.py``, ``spark_apps/partition.py``);
2. follow mode live (``dkm follow``): a publisher (:class:`dkmsks.client.Client`, no JVM) lands
   one timestamp every ``--interval`` seconds (1,000 objects, 100 insertions, 100 deletions);
   measured are the publish call and the freshness to commit (from the call's return to the
   timestamp's ledger record, looked for every 50 ms through delta-rs); then a burst of
   ``--burst`` timestamps in one call, and the warm catch-up in objects per second;
3. Delta maintenance (``dkm maintain``).

Both warehouses must then give the same ``dkm export`` at the last timestamp, byte for byte.
The targets (issue "One warehouse for many hosts"): the object store within 1.5x of the folder
on each step, and freshness to commit at most 0.5 s p50 at 1M/1M.

    dkm bench storage [--quick] [--doc docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dkmsks.bench.common import (
    DKM,
    REPO,
    Report,
    ResultFile,
    add_doc_flags,
    add_quick_flag,
    add_workload_flags,
    bench_main,
    load_average,
    paper_workload,
    run_command,
    say,
    workload_spec,
)
from dkmsks.bench.freshness import LedgerWatch, _stream_rows
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median, percentile

prose = Prose.load("storage")
#: The object store within this factor of the folder on every step; freshness to commit (s, p50).
RATIO_TARGET, FRESH_TARGET = 1.5, 0.5
KINDS = ("folder", "object store")
#: The client settings of the object store's env file this run passes to every command.
STORE_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION")


def start_store(folder: Path) -> dict[str, str]:
    """Start a private object store for this run (``scripts/objectstore.sh``); its settings."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DKMSKS_OBJECTSTORE_DIR": str(folder), "DKMSKS_OBJECTSTORE_PORT": str(port)}
    done = subprocess.run([str(REPO / "scripts" / "objectstore.sh"), "start"], env=env, capture_output=True,
                          text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/objectstore.sh start failed: {done.stderr.strip()}")
    settings = dict(line.split("=", 1) for line in (folder / "env").read_text().splitlines() if "=" in line)
    return {key: settings[key] for key in STORE_VARIABLES}


def stop_store(folder: Path) -> None:
    """Stop the run's object store by its PID."""
    subprocess.run([str(REPO / "scripts" / "objectstore.sh"), "stop"], capture_output=True, timeout=60,
                   env={**os.environ, "DKMSKS_OBJECTSTORE_DIR": str(folder)})


def job_env(store: dict[str, str] | None, local: Path) -> dict[str, str]:
    """The environment of a command on one warehouse: the store's settings for the object store
    (the folder's commands get none), and a local home of its own."""
    py = sys.executable
    env = {k: v for k, v in os.environ.items() if k not in STORE_VARIABLES}
    env.update(PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py, SPARK_LOCAL_IP="127.0.0.1", DKMSKS_LOCAL_DIR=str(local))
    return {**env, **(store or {})}


def timed(cmd: list[str], log: Path, env: dict[str, str]) -> float:
    """Run a step; its seconds, or stop the benchmark with its log's tail."""
    run = run_command(cmd, log, env=env, cwd=REPO)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} exited {run.returncode}:\n{log.read_text()[-3000:]}")
    return run.seconds


def live(uri: str, env: dict[str, str], stream: dict, n: int, burst: int, interval: float, workers: int,
         log: Path) -> dict:
    """Follow mode on ``uri`` with a publisher: per-timestamp call and freshness, the burst."""
    from dkmsks.client import Client
    from dkmsks.warehouse import Warehouse

    saved = {key: os.environ.get(key) for key in (*STORE_VARIABLES, "DKMSKS_LOCAL_DIR")}
    os.environ.update({key: env[key] for key in (*STORE_VARIABLES, "DKMSKS_LOCAL_DIR") if key in env})
    for key in STORE_VARIABLES:
        if key not in env:
            os.environ.pop(key, None)
    warehouse = Warehouse(uri)
    follow_log = log.open("w")
    follow = subprocess.Popen([*DKM, "follow", "--warehouse", uri, "--slots", str(workers + 2)], env=env,
                              stdout=follow_log, stderr=subprocess.STDOUT, start_new_session=True)
    watch = LedgerWatch(warehouse)
    watch.start()
    try:
        status = warehouse.run_dir / "follow-default.status.json"
        launched, deadline = time.perf_counter(), time.monotonic() + 1800
        while not (status.exists() and json.loads(status.read_text()).get("state") == "following"):
            if follow.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"follow mode did not start (see {log})")
            time.sleep(0.5)
        startup = time.perf_counter() - launched
        client = Client(uri)
        calls: dict[int, tuple[float, float]] = {}
        start = time.monotonic()
        for t in range(1, n + 1):
            time.sleep(max(0.0, start + (t - 1) * interval - time.monotonic()))
            c0 = time.perf_counter()
            client.publish(objects=stream[t][0], events=stream[t][1])
            calls[t] = (time.perf_counter() - c0, time.time())
        if not watch.wait_for(n, 600):
            raise RuntimeError(f"timestamp {n} was not committed within 10 minutes (see {log})")
        rows_o = [r for t in range(n + 1, n + burst + 1) for r in stream[t][0]]
        rows_e = [r for t in range(n + 1, n + burst + 1) for r in stream[t][1]]
        client.publish(objects=rows_o, events=rows_e)
        returned = time.time()
        if not watch.wait_for(n + burst, 1800):
            raise RuntimeError(f"the burst was not committed within 30 minutes (see {log})")
        burst_s = watch.seen[n + burst] - returned
    finally:
        watch.halt.set()
        follow.terminate()
        try:
            follow.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(follow.pid, 9)
        follow_log.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    fresh = [max(0.0, watch.seen[t] - returned_at) for t, (_, returned_at) in sorted(calls.items())]
    return {"startup_s": startup, "publish_s": [c for c, _ in calls.values()], "fresh_s": fresh,
            "burst_objects": len(rows_o), "burst_s": burst_s, "catchup_ops": len(rows_o) / burst_s}


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench storage``: run it; the exit status (1 when the two warehouses' exports differ)."""
    p = argparse.ArgumentParser(prog="dkm bench storage", description=__doc__.splitlines()[0])
    add_workload_flags(p, o_init=1_000_000, subscriptions=1_000_000, timestamps=40, workers=20, seed=11,
                       helps={"timestamps": "timestamps published one at a time"})
    p.add_argument("--burst", type=int, default=100, help="timestamps published in one call at the end (100)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between published timestamps (1)")
    p.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench-storage")
    add_quick_flag(p, "a small run (minutes) to check the benchmark itself", o_init=20_000, subscriptions=5_000,
                   timestamps=6, workers=4, burst=6)
    add_doc_flags(p, default=REPO / "docs" / "benchmarks.md")
    return bench_main(p, argv, run)


def run(args: argparse.Namespace) -> Report:
    """Both warehouses through every step (module doc); the report."""
    from dkmsks.io.writers import write_events, write_objects

    work: Path = args.workdir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"}
    rec = ResultFile(work / "results.json", params, spark=True)
    load_start = load_average()
    n, burst = args.timestamps, args.burst
    objs, evs, vocab = paper_workload(workload_spec(args, timestamps=n + burst))
    objects, events = work / "workload" / "objects.tsv.gz", work / "workload" / "events.tsv.gz"
    objects.parent.mkdir(parents=True)
    write_objects(objects, objs, vocab)
    write_events(events, evs, vocab)
    del objs, evs
    store = start_store(work / "objectstore")
    try:
        places = {"folder": (str(work / "warehouse"), None), "object store": ("s3://dkmsks/bench", store)}
        envs = {kind: job_env(places[kind][1], work / f"local-{i}") for i, kind in enumerate(KINDS)}
        py, apps = sys.executable, REPO / "spark_apps"
        steps: dict[str, dict[str, float]] = {"ingest": {}, "partition": {}, "maintain": {}}
        for kind in KINDS:
            uri, env = places[kind][0], envs[kind]
            say(f"{kind}: ingestion")
            steps["ingest"][kind] = timed([py, str(apps / "ingest.py"), "--warehouse", uri, "--objects", str(objects),
                                           "--events", str(events), "--until", "0", "--run-id", "bench"],
                                          work / "logs" / f"ingest-{kind}.log", env)
        for kind in KINDS:
            uri, env = places[kind][0], envs[kind]
            say(f"{kind}: partition job")
            steps["partition"][kind] = timed([py, str(apps / "partition.py"), "--warehouse", uri, "--method", "dkm",
                                              "--workers", str(args.workers), "--run-id", "bench"],
                                             work / "logs" / f"partition-{kind}.log", env)
        say("reading the stream's rows")
        stream = _stream_rows(objects, events, 1, n + burst)
        lives = {}
        for kind in KINDS:
            say(f"{kind}: follow mode live, {n} timestamps one every {args.interval:g} s, then a burst of {burst}")
            lives[kind] = live(places[kind][0], envs[kind], stream, n, burst, args.interval, args.workers,
                               work / "logs" / f"follow-{kind}.log")
        for kind in KINDS:
            say(f"{kind}: maintenance")
            steps["maintain"][kind] = timed([*DKM, "maintain", "--warehouse", places[kind][0]],
                                            work / "logs" / f"maintain-{kind}.log", envs[kind])
        exports = {}
        for kind in KINDS:
            out = work / f"export-{kind.replace(' ', '-')}.jsonl"
            timed([*DKM, "export", "--warehouse", places[kind][0], "--out", str(out)],
                  work / "logs" / f"export-{kind}.log", envs[kind])
            exports[kind] = out.read_bytes()
    finally:
        stop_store(work / "objectstore")
    rec.put("steps_s", steps)
    rec.put("live", lives)
    rec.put("exports_equal", exports["folder"] == exports["object store"])
    rec.data["load_avg"] = [load_start, load_average()]
    rec.save()
    failure = "" if rec.data["steps"]["exports_equal"] else "the two warehouses' exports differ"
    return Report("dkm bench storage", report(rec.data), failure)


def summary(live_run: dict) -> dict[str, float]:
    """The headline numbers of one warehouse's live run."""
    return {"publish_p50": median(live_run["publish_s"]), "fresh_p50": median(live_run["fresh_s"]),
            "fresh_p95": percentile(live_run["fresh_s"], 0.95), "catchup_ops": live_run["catchup_ops"],
            "startup_s": live_run["startup_s"]}


def report(d: dict) -> str:
    """The markdown report: each step on both warehouses, the ratio and the targets."""
    p, st = d["params"], d["steps"]
    lives = {kind: summary(st["live"][kind]) for kind in KINDS}
    rows = []

    def row(name: str, folder: float, store: float, unit: str, higher_is_better: bool = False) -> None:
        ratio = folder / store if higher_is_better else store / folder
        rows.append(f"| {name} | {folder:,.2f} {unit} | {store:,.2f} {unit} | {ratio:.2f}x | "
                    f"{prose.status(ratio <= RATIO_TARGET)} |")

    for step in ("ingest", "partition", "maintain"):
        row({"ingest": "ingestion job", "partition": "partition job", "maintain": "maintenance (dkm maintain)"}[step],
            st["steps_s"][step]["folder"], st["steps_s"][step]["object store"], "s")
    row("publish (1 timestamp), p50", lives["folder"]["publish_p50"], lives["object store"]["publish_p50"], "s")
    row("freshness to commit, p50", lives["folder"]["fresh_p50"], lives["object store"]["fresh_p50"], "s")
    row("freshness to commit, p95", lives["folder"]["fresh_p95"], lives["object store"]["fresh_p95"], "s")
    row("warm catch-up", lives["folder"]["catchup_ops"], lives["object store"]["catchup_ops"], "objects/s",
        higher_is_better=True)
    row("follow mode's start-up", lives["folder"]["startup_s"], lives["object store"]["startup_s"], "s")
    fresh = lives["object store"]["fresh_p50"]
    return "\n\n".join([
        prose("head", commit=d["commit"], date=d["date"], machine=d["machine"].get("cpu", ""),
              load_start=f"{d['load_avg'][0]:.1f}", load_end=f"{d['load_avg'][1]:.1f}", o_init=f"{p['o_init']:,}",
              subs=f"{p['subscriptions']:,}", m=p["workers"], n=p["timestamps"], burst=p["burst"],
              interval=f"{p['interval']:g}"),
        "\n".join(["| step | folder | object store | object store / folder | ≤ 1.5x |", "|---|---:|---:|---:|---|",
                   *rows]),
        prose("fresh", fresh=f"{fresh:.2f}", fresh_ok=prose.status(fresh <= FRESH_TARGET),
              equal="equal" if st["exports_equal"] else "NOT equal"),
    ])
