"""SQL through Spark Connect beside ``dkm sql``: per-query time of the two, side by side.

On a warehouse given (``--warehouse``; the paper's 1M/1M after ``dkm bench serve`` for the
record), ``scripts/spark_connect.sh start`` runs the Connect server, then for each query:

1. **per command**, as a user types it: ``dkm sql --json Q`` (a Spark driver of its own: a JVM
   started, the tables and views registered, the query, the JVM stopped) and ``dkm sql --remote
   sc://localhost:PORT --json Q`` (the Connect client in a fresh Python process, no JVM),
   alternately, ``--runs`` times each;
2. **per query in a warm process**: the same query ``--runs`` times on one classic session of
   this process and on one Connect client session, alternately.

Both give the same rows (checked). The queries: the ledger's last timestamp, three
subscriptions' results (``knn_results``: the reader's point query) and a count of
``knn_current`` (every subscription's state: a scan of the snapshot and the journal's tail).

    dkm bench connect --warehouse W [--runs 5] [--doc docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dkmsks.bench.common import DKM, REPO, Refused, Report, ResultFile, add_doc_flags, bench_main, load_average, say
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median

prose = Prose.load("connect")
SCRIPT = REPO / "scripts" / "spark_connect.sh"


def queries(warehouse: Any) -> dict[str, str]:
    """The measured queries, by name (three live subscriptions' ids from the state)."""
    from dkmsks.storage import tables
    from dkmsks.storage.lake import Lake

    ids = Lake.of(warehouse).read(tables.STATE, columns=["sub_id"]).column("sub_id").to_pylist()
    if len(ids) < 3:
        raise Refused(f"{warehouse.root}: fewer than three subscriptions in knn_state")
    a, b, c = sorted(ids)[len(ids) // 4], sorted(ids)[len(ids) // 2], sorted(ids)[3 * len(ids) // 4]
    return {"ledger: last timestamp": "SELECT max(t) AS t FROM ledger",
            "knn_results: three subscriptions": "SELECT sub_id, rank, object_id, distance FROM knn_results "
                                                f"WHERE sub_id IN ({a}, {b}, {c}) ORDER BY sub_id, rank",
            "knn_current: count": "SELECT count(*) AS n FROM knn_current"}


def _command(cmd: list[str]) -> tuple[float, list[dict[str, Any]]]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[3:6])}: exit {done.returncode}: {done.stderr.strip()[-2000:]}")
    return seconds, [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Start the server, time both ways, stop it (module doc)."""
    from dkmsks.spark.connect import read_token, remote_session, token_path
    from dkmsks.spark.session import build_session
    from dkmsks.warehouse import Warehouse

    warehouse = Warehouse.at(str(args.warehouse), args.database)
    rec = ResultFile(args.json or warehouse.run_dir / "bench-connect.json",
                     {k: str(v) for k, v in vars(args).items()}, spark=True)
    rec.put("load_before", load_average())
    wanted = queries(warehouse)
    port = args.port
    base = [str(SCRIPT), "--warehouse", str(warehouse.root), "--database", warehouse.database]
    started = time.perf_counter()
    up = subprocess.run([base[0], "start", *base[1:], "--port", str(port)], capture_output=True, text=True,
                        timeout=900)
    if up.returncode != 0:
        raise RuntimeError(f"scripts/spark_connect.sh start failed: {up.stdout}{up.stderr}")
    rec.put("server_start_s", time.perf_counter() - started)
    url = f"sc://localhost:{port}"
    wh = ["--warehouse", str(warehouse.root), "--database", warehouse.database]
    per_command: dict[str, dict[str, list[float]]] = {}
    warm: dict[str, dict[str, list[float]]] = {}
    same: dict[str, bool] = {}
    try:
        for name, sql in wanted.items():
            say(f"per command: {name}")
            times: dict[str, list[float]] = {"dkm sql": [], "dkm sql --remote": []}
            rows: dict[str, list[dict[str, Any]]] = {}
            for _ in range(args.runs):
                times["dkm sql"].append((local := _command([*DKM, "sql", *wh, "--json", sql]))[0])
                times["dkm sql --remote"].append((remote := _command([*DKM, "sql", *wh, "--remote", url, "--json",
                                                                      sql]))[0])
                rows["local"], rows["remote"] = local[1], remote[1]
            per_command[name] = times
            same[name] = rows["local"] == rows["remote"]
        say("warm sessions in this process")
        classic = build_session(warehouse, app_name="bench-connect")
        client = remote_session(url, read_token(token_path(warehouse)))
        try:
            for name, sql in wanted.items():
                times = {"classic session": [], "Connect client": []}
                classic.sql(sql).collect()
                client.sql(sql).collect()  # each side's first query pays for plans and caches
                for _ in range(args.runs):
                    for label, session in (("classic session", classic), ("Connect client", client)):
                        t0 = time.perf_counter()
                        session.sql(sql).collect()
                        times[label].append(time.perf_counter() - t0)
                warm[name] = times
        finally:
            client.stop()
            classic.stop()
    finally:
        subprocess.run([base[0], "stop", *base[1:]], capture_output=True, text=True, timeout=300)
    from dkmsks.storage import tables
    from dkmsks.storage.lake import Lake

    lake = Lake.of(warehouse)
    rec.put("size", {"subscriptions": lake.read(tables.STATE, columns=["sub_id"]).num_rows,
                     "objects": lake.read(tables.OBJECTS, columns=["id"]).num_rows})
    rec.put("per_command", per_command)
    rec.put("warm", warm)
    rec.put("same_rows", same)
    rec.put("load_after", load_average())
    return rec.data


def report(d: dict[str, Any]) -> str:
    """The Markdown report: medians side by side."""
    st = d["steps"]
    head = prose("head", commit=d["commit"], date=d["date"], machine=d["machine"].get("cpu", ""),
                 load_before=f"{st['load_before']:.1f}", load_after=f"{st['load_after']:.1f}",
                 runs=d["params"]["runs"], subs=f"{st['size']['subscriptions']:,}",
                 objects=f"{st['size']['objects']:,}", start_s=f"{st['server_start_s']:.0f}",
                 same="the same rows" if all(st["same_rows"].values()) else "DIFFERENT rows")
    rows = ["| query | `dkm sql` (s) | `dkm sql --remote` (s) | warm classic session (s) | warm Connect client (s) |",
            "|---|---:|---:|---:|---:|"]
    for name, times in st["per_command"].items():
        w = st["warm"][name]
        rows.append(f"| {name} | {median(times['dkm sql']):.2f} | {median(times['dkm sql --remote']):.2f} | "
                    f"{median(w['classic session']):.3f} | {median(w['Connect client']):.3f} |")
    return "\n\n".join([head, "\n".join(rows), prose("reading")])


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench connect``; the exit status."""
    p = argparse.ArgumentParser(prog="dkm bench connect", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", type=Path, required=True, help="a warehouse with processed timestamps")
    p.add_argument("--database", default="default")
    p.add_argument("--runs", type=int, default=5, help="runs of each query, each way (%(default)s)")
    p.add_argument("--port", type=int, default=15002, help="the Connect server's port (%(default)s)")
    p.add_argument("--json", type=Path, default=None, help="where the results go (default <warehouse>/run/)")
    p.add_argument("--report-only", type=Path, default=None, help="render an earlier results file")
    add_doc_flags(p)
    return bench_main(p, argv, run)


def run(args: argparse.Namespace) -> Report:
    """Measure (or reread); the report for the docs."""
    if args.runs < 1:
        raise Refused("--runs takes a number >= 1")
    data = json.loads(args.report_only.read_text()) if args.report_only else measure(args)
    return Report("dkm bench connect", report(data))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
