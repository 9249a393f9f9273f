"""Benchmark of the Spark + Delta pipeline (issue 4), written to ``docs/benchmarks.md``.

One command, one Spark session (``local[2]`` by default), one warehouse under ``--workdir``:

1. generate the paper workload from the real Place data (DESIGN §5: ``|O_init| = 1M``,
   ``|S| = 1M``, per timestamp 1,000 objects / 100 insertions / 100 deletions, ``k_max = 10``)
   and ingest it into the Delta landing tables (ingest time reported on its own);
2. the partition job (DkM-SKS defaults: ``m = 20``, ``γ1 = 100,000``, ``γ2 = 20``, grid 16,384);
3. catch-up: ``--catchup`` pending timestamps in ONE micro-batch run, then ``--chunked``
   further timestamps with ``max_timestamps = --per-run`` (objects/s and per-phase times from
   each run's ``MicrobatchReport``);
4. naive Spark (:mod:`dkmsks.bench.naive_spark`): the keyword join + window top-k + MERGE a user would
   write, seeded with the pipeline's state, timed on ``--naive`` timestamps;
5. follow mode (``dkm bench follow`` in a subprocess on ``local[m + 2]``, after this
   benchmark's session stops: the embedded metastore admits one JVM): ``--latency`` rounds of one
   timestamp each with warm worker tasks, then one round over ``--warm-backlog`` pending
   timestamps (warm catch-up throughput);
6. the naive results after its last timestamp are compared with the pipeline's at that
   timestamp (same data, same seed state), and, on a separate SMALL workload
   (``--verify-*``), the naive approach computed from scratch is compared with the oracle and
   with the pipeline.

Usage: ``dkm bench pipeline [--quick] [--no-docs] [--workdir DIR]``. ``--quick`` runs small
sizes (20k objects, 2k subscriptions) and writes docs only when ``--docs PATH`` is given. Raw
numbers go to ``<workdir>/results.json`` as they come, with the commit, the machine and the
parameters.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from dkmsks.bench import naive_spark
from dkmsks.bench.common import DKM, REPO, PeakMemory, ResultFile, dataset_path, describe_machine, say, \
    write_doc_section
from dkmsks.bench.stats import median

DOCS = REPO / "docs" / "benchmarks.md"

# Issue 4 targets.
TARGET_PARTITION_S = 300.0
TARGET_FOLLOW_S = 2.0
TARGET_CATCHUP_OPS = 10_000.0
TARGET_NAIVE_RATIO = 20.0


# --------------------------------------------------------------------------------------- workload

def make_workload(folder: Path, *, o_init: int, subscriptions: int, timestamps: int, seed: int) -> dict:
    """Generate the paper workload from the real data into ``folder`` (objects/events .tsv.gz)."""
    from dkmsks.core.model import Vocabulary
    from dkmsks.core.workload import WorkloadSpec, generate_workload
    from dkmsks.io.formats import read_objects, write_events, write_objects

    started = time.perf_counter()
    spec = WorkloadSpec(o_init=o_init, subscriptions=subscriptions, timestamps=timestamps, seed=seed)
    vocab = Vocabulary()
    source = read_objects(dataset_path("place", must_exist=True), vocab, limit=spec.objects_needed).objects
    objects, events = generate_workload(source, spec)
    folder.mkdir(parents=True, exist_ok=True)
    write_objects(folder / "objects.tsv.gz", objects, vocab)
    write_events(folder / "events.tsv.gz", events, vocab)
    return {"objects": len(objects), "events": len(events), "seconds": time.perf_counter() - started}


def use_database(spark, name: str) -> None:
    """A fresh database of this benchmark's own (its name is one of the ``bp_*`` below)."""
    spark.sql("DROP DATABASE IF EXISTS IDENTIFIER(:name) CASCADE", args={"name": name})
    spark.sql("CREATE DATABASE IDENTIFIER(:name)", args={"name": name})
    spark.catalog.setCurrentDatabase(name)


def ingest(spark, folder: Path) -> dict:
    from dkmsks.spark import tables
    from dkmsks.spark.ingest import ingest_events, ingest_objects

    tables.ensure_tables(spark)
    out = {}
    for key, fn, path in (("objects", ingest_objects, folder / "objects.tsv.gz"),
                          ("events", ingest_events, folder / "events.tsv.gz")):
        started = time.perf_counter()
        r = fn(spark, path, run_id="bench")
        out[key] = {"rows": r.accepted, "rejected": r.rejected, "seconds": time.perf_counter() - started}
    return out


def partition(spark, workers: int) -> dict:
    from dkmsks.spark.partition_job import PartitionParams, run_partition

    started = time.perf_counter()
    rep = run_partition(spark, PartitionParams(method="dkm", workers=workers), run_id="bench")
    return {"seconds": time.perf_counter() - started, "phases_ms": rep.phases_ms,
            "subscriptions": rep.subscriptions, "subsets": rep.subsets}


def microbatch(spark, *, until: int, max_timestamps: int | None, run_id: str) -> dict:
    from dkmsks.spark.microbatch_job import run_microbatch

    started = time.perf_counter()
    rep = run_microbatch(spark, run_id=run_id, until=until, max_timestamps=max_timestamps)
    wall = time.perf_counter() - started
    return {"timestamps": rep.timestamps, "objects": rep.objects, "insertions": rep.insertions,
            "deletions": rep.deletions, "rejected": rep.rejected, "seconds": wall,
            "phases_ms": rep.phases_ms}


def catchup_summary(runs: list[dict]) -> dict:
    secs = sum(r["seconds"] for r in runs)
    n_ts = sum(len(r["timestamps"]) for r in runs)
    objs = sum(r["objects"] for r in runs)
    phases: dict[str, float] = {}
    for r in runs:
        for k, v in r["phases_ms"].items():
            phases[k] = phases.get(k, 0.0) + v / 1e3
    return {"runs": len(runs), "timestamps": n_ts, "objects": objs, "seconds": secs,
            "objects_per_s": objs / secs if secs else float("nan"),
            "per_timestamp_s": secs / n_ts if n_ts else float("nan"), "phases_s": phases}


def compare(a, b) -> dict:
    from dkmsks.core.model import describe_difference, results_equal

    eq = results_equal(a, b)
    return {"equal": bool(eq), "subscriptions": len(a), "result_rows": int(sum(len(r.object_ids) for r in a.values())),
            "difference": "" if eq else describe_difference(a, b)}


# --------------------------------------------------------------------------------------- verify

def verify_small(spark, workdir: Path, args, rec: ResultFile) -> None:
    """Naive from scratch == oracle == pipeline on a small workload (own database)."""
    from dkmsks.core.model import Vocabulary
    from dkmsks.core.oracle import oracle_results
    from dkmsks.io.formats import read_events, read_objects
    from dkmsks.spark.export import results_as_of

    folder = workdir / "verify_workload"
    T = args.verify_timestamps
    gen = make_workload(folder, o_init=args.verify_o_init, subscriptions=args.verify_subscriptions,
                        timestamps=T, seed=args.seed + 1)
    use_database(spark, "bp_verify")
    ingest(spark, folder)
    partition(spark, args.workers)
    microbatch(spark, until=T, max_timestamps=None, run_id="verify")
    pipeline = results_as_of(spark, T)[1]

    started = time.perf_counter()
    naive_spark.naive_initial(spark)
    steps = [naive_spark.naive_step(spark, t) for t in range(1, T + 1)]
    naive = naive_spark.naive_results(spark)
    naive_s = time.perf_counter() - started

    v = Vocabulary()
    objs = read_objects(folder / "objects.tsv.gz", v).objects
    evs = read_events(folder / "events.tsv.gz", v).events
    oracle = oracle_results(objs, evs, T)
    out = {"workload": gen, "o_init": args.verify_o_init, "subscriptions": args.verify_subscriptions,
           "timestamps": T, "naive_seconds": naive_s,
           "naive_pairs_per_ts": [s.candidate_pairs for s in steps],
           "naive_vs_oracle": compare(naive, oracle), "pipeline_vs_oracle": compare(pipeline, oracle),
           "naive_vs_pipeline": compare(naive, pipeline)}
    rec.put("verify", out)
    spark.catalog.setCurrentDatabase("default")
    spark.sql("DROP DATABASE IF EXISTS bp_verify CASCADE")
    for key in ("naive_vs_oracle", "pipeline_vs_oracle", "naive_vs_pipeline"):
        say(f"verify ({args.verify_o_init:,} objects, {args.verify_subscriptions:,} subscriptions, t=1..{T}): "
            f"{key}: {'EQUAL' if out[key]['equal'] else 'DIFFERENT: ' + out[key]['difference']}")


# ------------------------------------------------------------------------------------------- main

def run(args) -> dict:
    from dkmsks.spark.session import build_session, stop_session_and_jvm

    workdir: Path = args.workdir
    if workdir.exists() and not args.keep:
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    c0, c1 = args.catchup, args.catchup + args.chunked
    n_latency = max(args.latency, args.naive)
    T = c1 + n_latency + args.warm_backlog
    params = {"o_init": args.o_init, "subscriptions": args.subscriptions, "timestamps": T, "workers": args.workers,
              "catchup": args.catchup, "chunked": args.chunked, "per_run": args.per_run, "latency": n_latency,
              "naive": args.naive, "warm_backlog": args.warm_backlog, "objects_per_ts": 1000, "inserts_per_ts": 100, "deletes_per_ts": 100,
              "k_max": 10, "seed": args.seed, "master": args.master, "method": "dkm", "gamma1": 100_000,
              "gamma2": 20, "grid": 16384, "theta": 20, "quick": args.quick,
              "verify": [args.verify_o_init, args.verify_subscriptions, args.verify_timestamps]}
    rec = ResultFile(workdir / "results.json", params, spark=True)
    mem = PeakMemory().start()
    t_start = time.perf_counter()

    folder = workdir / "workload"
    say(f"generating the workload: |O_init|={args.o_init:,}, |S|={args.subscriptions:,}, T={T}")
    rec.put("generate", make_workload(folder, o_init=args.o_init, subscriptions=args.subscriptions,
                                      timestamps=T, seed=args.seed))
    say(f"generated in {rec.data['steps']['generate']['seconds']:.1f} s")

    spark = build_session(workdir / "warehouse", app_name="dkmsks-bench-pipeline", master=args.master)
    try:
        if args.verify_o_init > 0:
            try:
                verify_small(spark, workdir, args, rec)
            except Exception as err:  # recorded, the timing run goes on
                rec.error("verify", err)
                traceback.print_exc()

        use_database(spark, "bp_main")
        rec.put("ingest", ingest(spark, folder))
        ing = rec.data["steps"]["ingest"]
        say(f"ingest: objects {ing['objects']['seconds']:.1f} s, events {ing['events']['seconds']:.1f} s")

        p = partition(spark, args.workers)
        rec.put("partition", p)
        say(f"partition job: {p['seconds']:.1f} s (" + ", ".join(f"{k} {v / 1e3:.1f}" for k, v in p["phases_ms"].items()) + ")")

        try:
            r = microbatch(spark, until=c0, max_timestamps=None, run_id="catchup-all")
            rec.put("catchup_all", {"run_list": [r], **catchup_summary([r])})
            say(f"catch-up, {len(r['timestamps'])} timestamps in one run: {r['seconds']:.1f} s, "
                f"{rec.data['steps']['catchup_all']['objects_per_s']:,.0f} objects/s")
        except Exception as err:
            rec.error("catchup_all", err)
            traceback.print_exc()

        if args.chunked:
            runs: list[dict] = []
            try:
                while True:
                    r = microbatch(spark, until=c1, max_timestamps=args.per_run, run_id="catchup-chunked")
                    if not r["timestamps"]:
                        break
                    runs.append(r)
                    say(f"  run of {len(r['timestamps'])} timestamps ({r['timestamps'][0]}..{r['timestamps'][-1]}): {r['seconds']:.1f} s")
            except Exception as err:
                rec.error("catchup_chunked", err)
                traceback.print_exc()
            if runs:
                rec.put("catchup_chunked", {"run_list": runs, **catchup_summary(runs)})
                s = rec.data["steps"]["catchup_chunked"]
                say(f"catch-up, {args.per_run} per run: {s['objects_per_s']:,.0f} objects/s")

        # Naive Spark, seeded with the pipeline's state at c1, on timestamps c1+1 .. c1+naive.
        naive_steps = []
        if args.naive:
            try:
                started = time.perf_counter()
                naive_spark.seed_from_state(spark)
                rec.put("naive_seed", {"seconds": time.perf_counter() - started})
                for t in range(c1 + 1, c1 + args.naive + 1):
                    st = naive_spark.naive_step(spark, t)
                    naive_steps.append({"t": st.t, "objects": st.objects, "pairs": st.candidate_pairs,
                                        "changed": st.changed, "phases_ms": st.phases_ms, "seconds": st.total_ms / 1e3})
                    rec.put("naive", {"steps": naive_steps})
                    say(f"naive t={t}: {st.total_ms / 1e3:.1f} s ({st.candidate_pairs:,} pairs, {st.changed:,} changed; "
                        + ", ".join(f"{k} {v / 1e3:.1f}" for k, v in st.phases_ms.items()) + ")")
            except Exception as err:
                rec.error("naive", err)
                traceback.print_exc()

    finally:
        stop_session_and_jvm(spark)  # frees the embedded metastore for the follow subprocess

    # Follow mode: warm worker tasks, one timestamp per round, then a backlog in one round.
    lat: list[dict] = []
    try:
        out_json = workdir / "follow.json"
        cmd = [*DKM, "bench", "follow", "--warehouse", str(workdir / "warehouse"), "--database", "bp_main",
               "--timestamps", str(n_latency), "--backlog", str(args.warm_backlog), "--json", str(out_json)]
        say("follow mode: " + " ".join(cmd[1:]))
        subprocess.run(cmd, check=True)
        f = json.loads(out_json.read_text())
        lat = f["rounds"]
        rec.put("follow", {"runs": lat, "median_s": f["median_s"], "max_s": max(r["seconds"] for r in lat),
                           "startup_s": f["startup_s"], "median_phases_s": f["median_phases_s"],
                           "master": f["master"]})
        if "backlog" in f:
            rec.put("warm_catchup", f["backlog"])
        say(f"follow mode: median {f['median_s']:.2f} s per timestamp")
    except Exception as err:
        rec.error("follow", err)
        traceback.print_exc()

    spark = build_session(workdir / "warehouse", app_name="dkmsks-bench-pipeline", master=args.master)
    try:
        spark.catalog.setCurrentDatabase("bp_main")  # (use_database would start it afresh)
        if naive_steps and lat:
            try:
                from dkmsks.spark.export import results_as_of

                t_cmp = naive_steps[-1]["t"]
                rec.put("naive_vs_pipeline_full", {"t": t_cmp, **compare(naive_spark.naive_results(spark),
                                                                          results_as_of(spark, t_cmp)[1])})
                say(f"naive vs pipeline at t={t_cmp}: "
                    f"{'EQUAL' if rec.data['steps']['naive_vs_pipeline_full']['equal'] else 'DIFFERENT'}")
            except Exception as err:
                rec.error("naive_vs_pipeline_full", err)
                traceback.print_exc()
    finally:
        spark.stop()
        rec.data["peak_rss_gib"] = mem.stop() / 2**30
        rec.data["total_s"] = time.perf_counter() - t_start
        rec.save()
    return rec.data


# ----------------------------------------------------------------------------------------- report

def targets(d: dict) -> list[tuple[str, str, str]]:
    s = d["steps"]
    rows = []
    if "partition" in s:
        p = s["partition"]
        ph = p["phases_ms"]
        top = max(ph, key=ph.get)
        ok = p["seconds"] <= TARGET_PARTITION_S
        rows.append(("partition job ≤ 5 min", "met" if ok else "not met",
                     f"{p['seconds']:.1f} s (" + ", ".join(f"{k} {v / 1e3:.1f}" for k, v in ph.items()) + ")"
                     + ("" if ok else f"; {p['seconds'] / TARGET_PARTITION_S:.1f}× the target, dominated by {top}")))
    else:
        rows.append(("partition job ≤ 5 min", "not measured", d["errors"].get("partition", "")))
    if "follow" in s:
        f = s["follow"]
        ok = f["median_s"] <= TARGET_FOLLOW_S
        ph = f["median_phases_s"]
        top = max(ph, key=ph.get)
        rows.append(("follow mode ≤ 2 s per timestamp (median)", "met" if ok else "not met",
                     f"{f['median_s']:.2f} s over {len(f['runs'])} rounds of one timestamp, warm workers (" +
                     ", ".join(f"{k} {v:.2f}" for k, v in ph.items()) + ")" +
                     ("" if ok else f"; {f['median_s'] / TARGET_FOLLOW_S:.1f}× the target, dominated by {top} ({ph[top]:.2f} s)")))
    else:
        rows.append(("follow mode ≤ 2 s per timestamp (median)", "not measured", d["errors"].get("follow", "")))
    if "catchup_all" in s:
        c = s["catchup_all"]
        ok = c["objects_per_s"] >= TARGET_CATCHUP_OPS
        ph = c["phases_s"]
        top = max(ph, key=ph.get)
        rows.append(("catch-up ≥ 10,000 objects/s", "met" if ok else "not met",
                     f"{c['objects_per_s']:,.0f} objects/s ({c['objects']:,} objects, {c['timestamps']} timestamps in one run, {c['seconds']:.1f} s)"
                     + ("" if ok else f"; {TARGET_CATCHUP_OPS / c['objects_per_s']:.1f}× too slow, dominated by {top} ({ph[top]:.1f} s)")))
    else:
        rows.append(("catch-up ≥ 10,000 objects/s", "not measured", d["errors"].get("catchup_all", "")))
    if "warm_catchup" in s:
        w = s["warm_catchup"]
        ok = w["objects_per_s"] >= TARGET_CATCHUP_OPS
        rows.append(("catch-up ≥ 10,000 objects/s, warm (a follow session finds a backlog)", "met" if ok else "not met",
                     f"{w['objects_per_s']:,.0f} objects/s ({w['objects']:,} objects, {w['timestamps']} timestamps in one round, "
                     f"{w['seconds']:.1f} s: {fmt_phases(w['phases_s'])})"))
    if "naive" in s and s["naive"]["steps"] and "follow" in s:
        nv = median([x["seconds"] for x in s["naive"]["steps"]])
        ratio = nv / s["follow"]["median_s"]
        ok = ratio >= TARGET_NAIVE_RATIO
        rows.append(("≥ 20× faster per timestamp than naive Spark", "met" if ok else "not met",
                     f"{ratio:.1f}× (naive {nv:.1f} s vs follow mode {s['follow']['median_s']:.2f} s per timestamp, medians)"
                     + ("" if ok else f"; needs the pipeline at ≤ {nv / TARGET_NAIVE_RATIO:.2f} s per timestamp")))
    else:
        rows.append(("≥ 20× faster per timestamp than naive Spark", "not measured", d["errors"].get("naive", "")))
    return rows


def fmt_phases(ph: dict, scale: float = 1.0, digits: int = 1) -> str:
    return ", ".join(f"{k} {v * scale:.{digits}f}" for k, v in ph.items())


def read_results(path: Path) -> dict:
    """A ``results.json`` of this benchmark. Those written before results carried their commit
    (``docs/bench_pipeline_results.json``) give the memory as ``free -g`` output."""
    data = json.loads(path.read_text())
    m = data["machine"]
    if "memory" not in m:
        m["memory"] = next(ln.split()[1] for ln in m["free_g"].splitlines() if ln.startswith("Mem:")) + " GiB"
    data.setdefault("commit", "not recorded")
    return data


def report(d: dict) -> str:
    p, s, m = d["params"], d["steps"], d["machine"]
    out = ["## Spark pipeline", ""]
    out.append(f"Generated by `dkm bench pipeline{' --quick' if p['quick'] else ''}` at commit `{d['commit']}` on {d['date']} "
               f"(took {d['total_s'] / 60:.1f} min; peak RSS of the driver, JVM and Python workers together "
               f"{d['peak_rss_gib']:.1f} GiB).")
    out.append("")
    out.append(f"Machine: {describe_machine(m)}; Spark master `{p['master']}`. The machine is shared with "
               "other work, so wall times carry some noise.")
    out.append("")
    out.append(f"Parameters: real Place data, |O_init| = {p['o_init']:,}, |S| = {p['subscriptions']:,} (paper protocol, "
               f"DESIGN §5), per timestamp {p['objects_per_ts']:,} objects / {p['inserts_per_ts']} insertions / "
               f"{p['deletes_per_ts']} deletions, k_max = {p['k_max']}, seed {p['seed']}; DkM-SKS with m = {p['workers']}, "
               f"γ1 = {p['gamma1']:,}, γ2 = {p['gamma2']}, grid {p['grid']:,}. {p['timestamps']} timestamps: "
               f"1..{p['catchup']} in one run, {p['catchup'] + 1}..{p['catchup'] + p['chunked']} in runs of "
               f"{p['per_run']}, then {p['latency']} follow-mode rounds of one timestamp (naive Spark on the first {p['naive']} of those), "
               f"then one follow round over {p.get('warm_backlog', 0)} timestamps.")
    out.append("")
    for note in d.get("notes", []):
        out += [note, ""]
    out.append("### Results")
    out.append("")
    out.append("| step | measured | phases (s) |")
    out.append("|---|---:|---|")
    if "generate" in s:
        out.append(f"| generate workload files (not part of any target) | {s['generate']['seconds']:.1f} s | – |")
    if "ingest" in s:
        i = s["ingest"]
        out.append(f"| ingest files → Delta landing tables | {i['objects']['seconds'] + i['events']['seconds']:.1f} s | "
                   f"objects {i['objects']['seconds']:.1f} ({i['objects']['rows']:,} rows), events {i['events']['seconds']:.1f} ({i['events']['rows']:,} rows) |")
    if "partition" in s:
        out.append(f"| partition job (O_init read + stats, initial kNN in Spark tasks, plan, state write) | {s['partition']['seconds']:.1f} s | "
                   f"{fmt_phases(s['partition']['phases_ms'], 1e-3)} ({s['partition']['subsets']:,} subsets) |")
    for key, label in (("catchup_all", "catch-up, all pending in one run"),
                       ("catchup_chunked", f"catch-up, {p['per_run']} timestamps per run")):
        if key in s:
            c = s[key]
            out.append(f"| {label}: {c['timestamps']} timestamps, {c['runs']} run(s) | **{c['objects_per_s']:,.0f} objects/s** "
                       f"({c['seconds']:.1f} s, {c['per_timestamp_s']:.2f} s per timestamp) | {fmt_phases(c['phases_s'])} (sums over runs) |")
    if "follow" in s:
        f = s["follow"]
        out.append(f"| follow mode (`{f.get('master', '')}`, warm worker tasks; start-up {f.get('startup_s', 0):.1f} s), median of {len(f['runs'])} rounds of one timestamp | "
                   f"**{f['median_s']:.2f} s** per timestamp (min {min(r['seconds'] for r in f['runs']):.2f}, max {f['max_s']:.2f}; "
                   f"{1000 / f['median_s']:,.0f} objects/s) | "
                   f"{fmt_phases(f['median_phases_s'], 1, 2)} (medians) |")
    if "warm_catchup" in s:
        w = s["warm_catchup"]
        out.append(f"| warm catch-up: one follow round over {w['timestamps']} pending timestamps | **{w['objects_per_s']:,.0f} objects/s** "
                   f"({w['seconds']:.1f} s) | {fmt_phases(w['phases_s'])} |")
    if "naive" in s and s["naive"]["steps"]:
        st = s["naive"]["steps"]
        phases = sorted({k for x in st for k in x["phases_ms"]})
        out.append(f"| naive Spark (keyword join + window top-k + MERGE), median of {len(st)} timestamps | "
                   f"**{median([x['seconds'] for x in st]):.1f} s** per timestamp (min {min(x['seconds'] for x in st):.1f}) | "
                   + ", ".join(f"{k} {median([x['phases_ms'][k] / 1e3 for x in st]):.1f}" for k in phases)
                   + f" (medians); {median([x['pairs'] for x in st]):,.0f} candidate pairs per timestamp |")
    out.append("")
    if "follow" in s and "naive" in s and s["naive"]["steps"]:
        nv = median([x["seconds"] for x in s["naive"]["steps"]])
        out.append("Ratios (same run, same data):")
        out.append("")
        out.append(f"- naive per timestamp / follow mode per timestamp: **{nv / s['follow']['median_s']:.1f}×**")
        for key, label in (("catchup_all", "catch-up in one run"), ("catchup_chunked", f"catch-up in runs of {p['per_run']}")):
            if key in s:
                out.append(f"- naive per timestamp / pipeline per timestamp in {label}: **{nv / s[key]['per_timestamp_s']:.0f}×**")
        out.append("")
    checks = []
    if "verify" in s:
        v = s["verify"]
        checks.append(f"- Small workload ({v['o_init']:,} objects, {v['subscriptions']:,} subscriptions, "
                      f"t = 1..{v['timestamps']}), naive computed from scratch (initial phase included): naive = oracle "
                      f"**{v['naive_vs_oracle']['equal']}**, pipeline = oracle **{v['pipeline_vs_oracle']['equal']}**, "
                      f"naive = pipeline **{v['naive_vs_pipeline']['equal']}** ({v['naive_vs_oracle']['subscriptions']:,} "
                      f"subscriptions, {v['naive_vs_oracle']['result_rows']:,} result rows).")
    if "naive_vs_pipeline_full" in s:
        c = s["naive_vs_pipeline_full"]
        checks.append(f"- Benchmark workload at t = {c['t']} (naive seeded with the pipeline's state {p['naive']} "
                      f"timestamps earlier): naive = pipeline **{c['equal']}** ({c['subscriptions']:,} subscriptions, "
                      f"{c['result_rows']:,} result rows).")
    if checks:
        out += ["Apples to apples (byte-identical results, ids and squared distances):", "", *checks, ""]
    out.append("### Issue targets")
    out.append("")
    out.append("| target | status | measured |")
    out.append("|---|---|---|")
    for name, status, text in targets(d):
        out.append(f"| {name} | {status} | {text} |")
    out.append("")
    if d["errors"]:
        out.append("Failures during the run:")
        out.append("")
        for k, v in d["errors"].items():
            out.append(f"- {k}: `{v.splitlines()[-1][:300]}`")
        out.append("")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dkm bench pipeline", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (20k objects, 2k subscriptions); docs only with --docs")
    ap.add_argument("--o-init", type=int, default=None, help="|O_init| (1,000,000; quick 20,000)")
    ap.add_argument("--subscriptions", type=int, default=None, help="|S| (1,000,000; quick 2,000)")
    ap.add_argument("--workers", type=int, default=20, help="m (%(default)s)")
    ap.add_argument("--catchup", type=int, default=None, help="timestamps processed in one run (100; quick 10)")
    ap.add_argument("--chunked", type=int, default=None, help="timestamps processed in runs of --per-run (50; quick 10)")
    ap.add_argument("--per-run", type=int, default=None, help="max_timestamps of the chunked catch-up (10; quick 5)")
    ap.add_argument("--latency", type=int, default=None, help="follow-mode rounds of one timestamp (20; quick 4)")
    ap.add_argument("--warm-backlog", type=int, default=None,
                    help="then one follow round over this many pending timestamps (100; quick 5)")
    ap.add_argument("--naive", type=int, default=None, help="naive Spark timestamps (3; quick 3)")
    ap.add_argument("--verify-o-init", type=int, default=20_000, help="small check workload |O_init| (%(default)s; 0 = skip)")
    ap.add_argument("--verify-subscriptions", type=int, default=2_000, help="small check |S| (%(default)s)")
    ap.add_argument("--verify-timestamps", type=int, default=3, help="small check timestamps (%(default)s)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workdir", type=Path, default=None, help="warehouse + workload folder (default /tmp/bench_pipeline[_quick])")
    ap.add_argument("--keep", action="store_true", help="do not wipe --workdir first")
    ap.add_argument("--docs", type=Path, default=None, help=f"markdown file to update (default {DOCS}; quick: none)")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--report-only", type=Path, default=None, help="re-render the section from a results.json")
    ap.add_argument("--note", action="append", default=[], help="a paragraph to add to the section (repeatable)")
    args = ap.parse_args(argv)
    q = args.quick
    defaults = {"o_init": (1_000_000, 20_000), "subscriptions": (1_000_000, 2_000), "catchup": (100, 10),
                "chunked": (50, 10), "per_run": (10, 5), "latency": (20, 4), "naive": (3, 3), "warm_backlog": (100, 5)}
    for k, (full, quick) in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, quick if q else full)
    if args.workdir is None:
        args.workdir = Path("/tmp/bench_pipeline_quick" if q else "/tmp/bench_pipeline")

    if args.report_only:
        data = read_results(args.report_only)
    else:
        data = run(args)
    if args.note:
        data["notes"] = list(args.note)
    text = report(data)
    print()
    print(text)
    docs = args.docs or (None if q else DOCS)
    if docs and not args.no_docs:
        write_doc_section(docs, "pipeline", text)
        print(f"\nwrote the section to {docs}")
    return 0

