"""Freshness of a live warehouse: publishers, follow mode and a SQL reader at the same time.

The setting of the issue "a live service on one warehouse": the paper's |O_init| = 1M,
|S| = 1M, m = 20, DkM-SKS. After the initial phase (``dkm run --until 0``), three parties run
side by side on one warehouse, each in processes of its own as users run them:

- **follow mode** (``dkm follow``): warm workers, each new timestamp processed as it lands;
- **a publisher** (this process, through :class:`dkmsks.client.Client`, no JVM): one timestamp
  every ``--interval`` seconds (1,000 objects, 100 insertions, 100 deletions), then a burst of
  ``--burst`` timestamps in one call;
- **a SQL reader** (a warm Spark application of its own): once a second, the last processed
  timestamp from the ``ledger`` view and a few subscriptions' results from ``knn_results``.

Measured per timestamp: the publisher's call time; the *freshness*, from the publish call's
return to the timestamp being committed (a delta-rs look at the ledger every 50 ms) and to
the SQL reader's first answer that includes it; the reader's query times; whether the lag grows
over the run; and the burst's catch-up throughput (objects per second from the call's return
to the commit of its last timestamp).

    dkm bench freshness [--quick] [--doc docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from dkmsks.bench.common import (
    REPO,
    Report,
    ResultFile,
    TreeMemory,
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
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median, percentile
from dkmsks.storage.lake import has_table

prose = Prose.load("freshness")
TITLE = "Freshness of a live warehouse"
DKM = [str(Path(sys.executable).with_name("dkm"))]
#: Each Spark-free reader answers within this many seconds at |S| = 1M (issue 13.6).
READER_TARGET = 2.0
TARGETS = {"publish_p50": 0.5, "fresh_p50": 1.0, "fresh_p95": 2.0, "query_p50": 2.0, "catchup_ops": 20_000.0}
#: The live service on this machine (issue 18): follow mode warm within 5 minutes of its launch,
#: and everything together (follow, the SQL reader, the publisher) within 16 GiB.
STARTUP_TARGET_S, PEAK_TARGET_GIB = 300.0, 16.0
#: The steps of the initial phase an earlier run measured, kept when ``--keep`` reuses its warehouse.
INITIAL_STEPS = ("initial_phase_s", "initial_peak_gib", "initial_phase_commit")
#: How memory was sampled (:class:`TreeMemory`): since a240a3c the PSS is read only at a new high
#: of the resident sizes or every 5 s; runs before that read it every 0.5 s.
GATED_SAMPLING = "resident sizes sampled every 0.5 s and the PSS at each new high of their sum or every 5 s,"
EVERY_SAMPLING = "sampled every 0.5 s"


# --------------------------------------------------------------------------- the SQL reader
def reader_main(warehouse: str, out: str, sub_ids: str, period: float) -> int:
    """The SQL reader (a child process): a warm Spark application querying once a period."""
    from dkmsks.spark.session import build_session
    from dkmsks.warehouse import Warehouse

    spark = build_session(Warehouse(Path(warehouse)), app_name="bench-freshness-reader")
    ids = [int(s) for s in sub_ids.split(",")]
    stop = Path(out + ".stop")
    with open(out, "a", encoding="utf-8") as fh:
        while not stop.exists():
            started_wall, started = time.time(), time.perf_counter()
            last = spark.sql("SELECT max(t) AS t FROM ledger").collect()[0].t
            mid = time.perf_counter()
            rows = spark.sql("SELECT sub_id, rank, object_id, distance FROM knn_results WHERE sub_id IN (:a, :b, :c)",
                             args={"a": ids[0], "b": ids[1], "c": ids[2]}).collect()
            done = time.perf_counter()
            fh.write(json.dumps({"start": started_wall, "end": started_wall + (done - started), "last_t": last,
                                 "ledger_s": mid - started, "results_s": done - mid, "rows": len(rows)}) + "\n")
            fh.flush()
            time.sleep(max(0.0, period - (done - started)))
    spark.stop()
    return 0


# --------------------------------------------------------------------------- the run
def _stream_rows(objects: Path, events: Path, first: int, last: int) -> dict[int, tuple[list, list]]:
    """The workload's rows of timestamps ``first..last`` as the client takes them, by ``t``."""
    import pyarrow.compute as pc
    import pyarrow.csv as pv

    by_t: dict[int, tuple[list, list]] = {t: ([], []) for t in range(first, last + 1)}
    opts = pv.ConvertOptions(column_types={"keywords": "string", "op": "string"}, strings_can_be_null=True)
    for path, slot in ((objects, 0), (events, 1)):
        # Batch by batch, keeping only the published timestamps' rows: not O_init's or S's (10M at |S| = 10M).
        for batch in pv.open_csv(path, parse_options=pv.ParseOptions(delimiter="\t"), convert_options=opts):
            for row in batch.filter(pc.greater_equal(batch["t"], first)).to_pylist():
                t = int(row["t"])
                if first <= t <= last:
                    by_t[t][slot].append({k: v for k, v in row.items() if v is not None})
    return by_t


class LedgerWatch(threading.Thread):
    """When each timestamp became committed (visible to readers), from the ledger via delta-rs."""

    def __init__(self, warehouse, period: float = 0.05) -> None:
        super().__init__(daemon=True)
        from dkmsks.storage.lake import Lake

        self.lake, self.period, self.halt = Lake.of(warehouse), period, threading.Event()
        self.seen: dict[int, float] = {}

    def run(self) -> None:
        """Poll the ledger until halted, noting when each timestamp first became visible."""
        from dkmsks.storage.journal import last_processed

        while not self.halt.is_set():
            last = last_processed(self.lake)
            now = time.time()
            if last is not None:
                for t in range(max(self.seen, default=0) + 1, last + 1):
                    self.seen[t] = now
            self.halt.wait(self.period)

    def wait_for(self, t: int, timeout: float) -> bool:
        """Whether timestamp ``t`` became visible within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if t in self.seen:
                return True
            time.sleep(0.05)
        return False


def _time_readers(warehouse, client, sub_id: int, last_t: int, work: Path, runs: int) -> dict[str, float]:
    """Median seconds of each Spark-free reader, each run a fresh process as a user starts it
    (``Client.results`` in this warm process)."""
    wh = str(warehouse.root)
    commands = {
        "dkm status": [*DKM, "status", "--warehouse", wh],
        "dkm results": [*DKM, "results", "--warehouse", wh, "--sub", str(sub_id)],
        "dkm watch (one timestamp)": [*DKM, "watch", "--warehouse", wh, "--sub", str(sub_id),
                                      "--from", str(last_t - 1), "--until", str(last_t)],
        "dkm export (every subscription)": [*DKM, "export", "--warehouse", wh, "--out", str(work / "export.jsonl")],
    }
    timings: dict[str, float] = {}
    for name, cmd in commands.items():
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            seconds.append(time.perf_counter() - started)
        timings[name] = median(seconds)
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        client.results(sub_id)
        seconds.append(time.perf_counter() - started)
    timings["Client.results (warm process)"] = median(seconds)
    return timings


def stream_already_processed(warehouse: object) -> str | None:
    """Why a kept warehouse cannot be measured again (``None`` when it can): every timestamp it
    has processed after the initial phase would be published again as a replay and "seen" at once,
    so the run would report nonsense freshness and catch-up."""
    from dkmsks.storage.journal import last_processed
    from dkmsks.storage.lake import Lake

    last = last_processed(Lake.of(warehouse))  # type: ignore[arg-type]
    if last is not None and last > 0:
        return (f"the warehouse {warehouse.root} has processed the stream up to t={last}; a run needs it "  # type: ignore[attr-defined]
                "at the end of its initial phase (t=0): run without --keep, or keep a copy of it made then")
    return None


def measure(args: argparse.Namespace) -> dict:
    """Publish the workload timestamp by timestamp and measure when each becomes visible."""
    from dkmsks.client import Client
    from dkmsks.io.writers import write_events, write_objects
    from dkmsks.warehouse import Warehouse

    work: Path = args.workdir
    n, burst = args.timestamps, args.burst
    total_t = n + burst
    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"}
    earlier = json.loads((work / "results.json").read_text()) if (work / "results.json").exists() else {}
    rec = ResultFile(work / "results.json", params, spark=True)
    load_start = load_average()
    workload = work / "workload"
    objects, events = workload / "objects.tsv.gz", workload / "events.tsv.gz"
    warehouse = Warehouse(work / "warehouse")
    if not (args.keep and events.exists()):
        shutil.rmtree(work, ignore_errors=True)
        objs, evs, vocab = paper_workload(workload_spec(args, timestamps=total_t))
        workload.mkdir(parents=True, exist_ok=True)
        write_objects(objects, objs, vocab)
        write_events(events, evs, vocab)
        rec = ResultFile(work / "results.json", params, spark=True)
    if not has_table(warehouse, "journal"):
        say("initial phase: dkm run --until 0 (ingest O_init, partition)")
        initial = TreeMemory({"initial phase": os.getpid()}, proportional=True).start()  # its child's tree
        done = run_command([*DKM, "run", "--objects", str(objects), "--events", str(events), "--warehouse",
                            str(warehouse.root), "--workers", str(args.workers), "--until", "0"],
                           work / "initial.log")
        initial.stop()
        if done.returncode != 0:
            raise RuntimeError(f"the initial phase failed (see {work / 'initial.log'})")
        rec.put("initial_phase_s", done.seconds)
        rec.put("initial_peak_gib", initial.peak / 2**30)
        rec.put("initial_phase_commit", rec.data["commit"])
    else:  # reused (--keep): the earlier run's measurement of it, with the commit it ran on
        refused = stream_already_processed(warehouse)
        if refused:
            raise SystemExit(f"dkm bench freshness --keep: {refused}")
        for key in INITIAL_STEPS:
            if key in earlier.get("steps", {}):
                rec.put(key, earlier["steps"][key])

    say("reading the stream's rows")
    stream = _stream_rows(objects, events, 1, total_t)
    follow_log = open(work / "follow.log", "w")  # noqa: SIM115 - the child's whole life
    launched = time.perf_counter()
    follow = subprocess.Popen([*DKM, "follow", "--warehouse", str(warehouse.root), "--slots",
                               str(args.workers + 2), "--poll", str(args.poll)], stdout=follow_log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    memory = TreeMemory({"publisher": os.getpid(), "follow": follow.pid}, proportional=True).start()
    rec.put("memory_measure", "pss")
    rec.put("memory_sampling", GATED_SAMPLING)
    watch = LedgerWatch(warehouse)
    watch.start()
    reader_out = work / "reader.jsonl"
    reader_out.unlink(missing_ok=True)
    Path(str(reader_out) + ".stop").unlink(missing_ok=True)  # an earlier run's (--keep) would stop it at once
    reader = None
    client = Client(warehouse.root)
    try:
        status = warehouse.run_dir / "follow-default.status.json"
        deadline = time.monotonic() + 1800
        while not (status.exists() and json.loads(status.read_text()).get("state") == "following"):
            if follow.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"follow mode did not start (see {work / 'follow.log'})")
            time.sleep(1)
        rec.put("follow_startup_s", time.perf_counter() - launched)
        rec.put("startup_peak_gib", memory.peak / 2**30)
        rec.put("load_avg_following", load_average())
        say(f"follow mode is warm after {rec.data['steps']['follow_startup_s']:.0f} s; starting the SQL reader")
        sub_ids = ",".join(str(r["id"]) for r in stream[1][1][:3] if r.get("op") == "insert") or "1,2,3"
        reader = subprocess.Popen([sys.executable, "-m", "dkmsks.bench.freshness", "--reader", str(warehouse.root),
                                   str(reader_out), sub_ids, "1.0"], stdout=subprocess.DEVNULL,
                                  stderr=open(work / "reader.log", "w"), start_new_session=True)  # noqa: SIM115
        memory.add("SQL reader", reader.pid)
        while not reader_out.exists() or not reader_out.read_text().strip():
            if reader.poll() is not None:
                raise RuntimeError(f"the SQL reader failed (see {work / 'reader.log'})")
            time.sleep(1)

        say(f"publishing {n} timestamps, one every {args.interval:g} s")
        calls: dict[int, dict[str, float]] = {}
        start = time.monotonic()
        for t in range(1, n + 1):
            time.sleep(max(0.0, start + (t - 1) * args.interval - time.monotonic()))
            c0 = time.perf_counter()
            client.publish(objects=stream[t][0], events=stream[t][1])
            calls[t] = {"call_s": time.perf_counter() - c0, "returned": time.time()}
        if not watch.wait_for(n, 600):
            raise RuntimeError(f"timestamp {n} was not committed within 10 minutes")
        time.sleep(2 * args.interval)  # the reader's next answers

        say(f"burst: {burst} timestamps in one call")
        rows_o = [r for t in range(n + 1, total_t + 1) for r in stream[t][0]]
        rows_e = [r for t in range(n + 1, total_t + 1) for r in stream[t][1]]
        c0 = time.perf_counter()
        client.publish(objects=rows_o, events=rows_e)
        burst_call, burst_returned = time.perf_counter() - c0, time.time()
        if not watch.wait_for(total_t, 1800):
            raise RuntimeError("the burst was not committed within 30 minutes")
        burst_s = watch.seen[total_t] - burst_returned
        rec.put("burst", {"timestamps": burst, "objects": len(rows_o), "events": len(rows_e), "call_s": burst_call,
                          "seconds": burst_s, "objects_per_s": len(rows_o) / burst_s})
    finally:
        memory.stop()
        rec.put("peak_gib", memory.peak / 2**30)
        rec.put("peak_parts_gib", {name: b / 2**30 for name, b in memory.at_peak.items()})
        watch.halt.set()
        Path(str(reader_out) + ".stop").touch()
        if reader is not None:
            try:
                reader.wait(timeout=120)
            except subprocess.TimeoutExpired:
                reader.kill()
        follow.terminate()
        try:
            follow.wait(timeout=120)
        except subprocess.TimeoutExpired:
            follow.kill()
        follow_log.close()

    say("the Spark-free readers at this size (follow stopped)")
    watched = int(next(r["id"] for r in stream[1][1] if r.get("op") == "insert"))
    rec.put("readers", _time_readers(warehouse, client, watched, total_t, work, args.reader_runs))

    answers = [json.loads(line) for line in reader_out.read_text().splitlines() if line.strip()]
    per_t = []
    for t, c in sorted(calls.items()):
        committed = watch.seen.get(t)
        sql = next((a["end"] for a in answers if a["last_t"] is not None and a["last_t"] >= t
                    and a["end"] >= c["returned"]), None)
        per_t.append({"t": t, "call_s": c["call_s"], "fresh_commit_s": None if committed is None else
                      max(0.0, committed - c["returned"]), "fresh_sql_s": None if sql is None else sql - c["returned"]})
    rec.put("per_timestamp", per_t)
    rec.put("reader", answers)
    rec.data["load_avg"] = [load_start, load_average()]
    rec.save()
    return rec.data


# --------------------------------------------------------------------------- the report
def summary(d: dict) -> dict[str, float]:
    """The headline numbers of a measurement (medians, percentiles, catch-up rate)."""
    per_t = d["steps"]["per_timestamp"]
    calls = [r["call_s"] for r in per_t]
    commit = [r["fresh_commit_s"] for r in per_t if r["fresh_commit_s"] is not None]
    sql = [r["fresh_sql_s"] for r in per_t if r["fresh_sql_s"] is not None]
    queries = [a["ledger_s"] + a["results_s"] for a in d["steps"]["reader"]]
    third = max(1, len(commit) // 3)
    return {
        "n": len(per_t), "publish_p50": median(calls), "publish_p95": percentile(calls, 0.95),
        "fresh_p50": median(commit), "fresh_p95": percentile(commit, 0.95),
        "fresh_sql_p50": median(sql), "fresh_sql_p95": percentile(sql, 0.95),
        "query_p50": median(queries), "query_p95": percentile(queries, 0.95), "queries": len(queries),
        "first_third": median(commit[:third]), "last_third": median(commit[-third:]),
        "catchup_ops": d["steps"]["burst"]["objects_per_s"],
    }


def report(d: dict) -> str:
    """The markdown report of a measurement, with each target met or not."""
    s, p = summary(d), d["params"]
    met = {key: (s[key] >= limit if key == "catchup_ops" else s[key] <= limit) for key, limit in TARGETS.items()}
    bounded = s["last_third"] <= max(1.5 * s["first_third"], s["first_third"] + 0.25)
    b = d["steps"]["burst"]
    return "\n\n".join([
        prose("head", title=TITLE + ("" if section(p) == "freshness" else f" at |S| = {_short(p['subscriptions'])}"),
              commit=d["commit"], date=d["date"], machine=d["machine"].get("cpu", ""),
              load_start=f"{d['load_avg'][0]:.1f}", load_end=f"{d['load_avg'][1]:.1f}",
              o_init=f"{p['o_init']:,}", subs=f"{p['subscriptions']:,}", m=p["workers"], n=s["n"],
              interval=f"{p['interval']:g}", burst=p["burst"], poll=f"{p['poll']:g}"),
        prose("table",
              publish_p50=f"{s['publish_p50']:.2f}", publish_p95=f"{s['publish_p95']:.2f}",
              fresh_p50=f"{s['fresh_p50']:.2f}", fresh_p95=f"{s['fresh_p95']:.2f}",
              fresh_sql_p50=f"{s['fresh_sql_p50']:.2f}", fresh_sql_p95=f"{s['fresh_sql_p95']:.2f}",
              query_p50=f"{s['query_p50']:.2f}", query_p95=f"{s['query_p95']:.2f}", queries=s["queries"],
              catchup=f"{s['catchup_ops']:,.0f}", burst_objects=f"{b['objects']:,}", burst_s=f"{b['seconds']:.1f}",
              publish_ok=prose.status(met["publish_p50"]),
              fresh_ok=prose.status(met["fresh_p50"] and met["fresh_p95"]),
              fresh_sql_ok=prose.status(s["fresh_sql_p50"] <= TARGETS["fresh_p50"]
                                        and s["fresh_sql_p95"] <= TARGETS["fresh_p95"]),
              query_ok=prose.status(met["query_p50"]), catchup_ok=prose.status(met["catchup_ops"])),
        prose("lag.bounded" if bounded else "lag.grows", first=f"{s['first_third']:.2f}",
              last=f"{s['last_third']:.2f}"),
        *([service(d)] if "follow_startup_s" in d["steps"] else []),
        *([prose("readers", subs=f"{p['subscriptions']:,}", runs=p.get("reader_runs", 3)),
           "\n".join(["| reader | median (s) | ≤ 2 s |", "|---|---:|---|",
                      *(f"| {name} | {sec:.2f} | {prose.status(sec <= READER_TARGET)} |"
                        for name, sec in d["steps"]["readers"].items())])]
          if "readers" in d["steps"] else []),
    ])


def service(d: dict) -> str:
    """The live service's start-up and memory against their targets: follow mode's start-up, the
    peak memory of everything together while it ran, and the initial phase's."""
    st = _memory_steps(d["steps"])
    parts = st.get("peak_parts_gib", {})
    initial = st.get("initial_peak_gib")
    initial_row = (prose("service.initial", initial_s=f"{st['initial_phase_s']:,.0f}", initial_gib=f"{initial:.1f}",
                         initial_commit=str(st.get("initial_phase_commit", d["commit"]))[:7],
                         initial_ok=prose.status(initial <= PEAK_TARGET_GIB), measure=st["memory_measure"].upper())
                   if initial is not None and "initial_phase_s" in st else "")
    return "\n\n".join(["\n".join([
        prose("service", m=d["params"]["workers"], startup_s=f"{st['follow_startup_s']:,.0f}",
              sampling=st.get("memory_sampling", EVERY_SAMPLING),
              startup_ok=prose.status(st["follow_startup_s"] <= STARTUP_TARGET_S),
              startup_gib=f"{st['startup_peak_gib']:.1f}", peak_gib=f"{st['peak_gib']:.1f}",
              peak_ok=prose.status(st["peak_gib"] <= PEAK_TARGET_GIB), measure=st["memory_measure"].upper(),
              parts=", ".join(f"{name} {gib:.1f}" for name, gib in parts.items())),
        *([initial_row] if initial_row else []),
    ]), prose("memory.pss" if st["memory_measure"] == "pss" else "memory.rss")])


def _memory_steps(steps: dict) -> dict:
    """The memory steps under their names; a run before they were sampled as PSS summed
    resident sizes (RSS) under ``*_rss_*`` names."""
    if "memory_measure" in steps:
        return steps
    old = {"startup_peak_rss_gib": "startup_peak_gib", "peak_rss_gib": "peak_gib",
           "peak_rss_parts_gib": "peak_parts_gib", "initial_peak_rss_gib": "initial_peak_gib"}
    return {**{old.get(k, k): v for k, v in steps.items()}, "memory_measure": "rss"}


def section(params: dict) -> str:
    """The section of the docs a run goes to: ``freshness`` at the default |S| = 1M, else one of
    its own per size (``freshness-10m``), so a run at another size keeps the 1M one."""
    return params.get("section") or ("freshness" if params["subscriptions"] == 1_000_000
                                     else f"freshness-{_short(params['subscriptions']).lower()}")


def _short(n: int) -> str:
    """``10000000`` -> ``10M``, ``20000`` -> ``20k``, ``1500`` -> ``1500``."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench freshness`` (or, with ``--reader``, the SQL reader process); the exit status."""
    if argv and argv[0] == "--reader":
        return reader_main(argv[1], argv[2], argv[3], float(argv[4]))
    p = argparse.ArgumentParser(prog="dkm bench freshness", description=__doc__.splitlines()[0])
    add_workload_flags(p, o_init=1_000_000, subscriptions=1_000_000, timestamps=60, seed=7, workers=20,
                       helps={"timestamps": "timestamps published one per --interval"})
    p.add_argument("--interval", type=float, default=2.0, help="seconds between publishes (%(default)s)")
    p.add_argument("--burst", type=int, default=100, help="then this many timestamps in one call (%(default)s)")
    p.add_argument("--poll", type=float, default=0.1, help="follow mode's poll interval (%(default)s)")
    p.add_argument("--reader-runs", type=int, default=3, help="runs of each Spark-free reader (%(default)s)")
    p.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench" / "freshness")
    p.add_argument("--keep", action="store_true", help="reuse the workload and warehouse of an earlier run")
    p.add_argument("--report-only", type=Path, default=None, help="render an earlier results.json")
    p.add_argument("--section", default=None,
                   help="the section of --doc to write (freshness at |S| = 1M, else freshness-10m etc.)")
    add_quick_flag(p, "20k/20k, m = 4, 10 + 10 timestamps", o_init=20_000, subscriptions=20_000, workers=4,
                   timestamps=10, burst=10)
    add_doc_flags(p)
    return bench_main(p, argv, run)


def run(args: argparse.Namespace) -> Report:
    """Measure (or reread a ``results.json``); the report, for its section of the docs."""
    data = json.loads(args.report_only.read_text()) if args.report_only else measure(args)
    return Report("dkm bench " + (args.section or section(data["params"])), report(data))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
