"""Benchmark of the Spark + Delta pipeline (issue 4), written to ``docs/benchmarks.md``.

One command, one Spark session (``local[2]`` by default), one warehouse under ``--workdir``:

1. generate the paper workload from the real Place data (docs/design.md §5: ``|O_init| = 1M``,
   ``|S| = 1M``, per timestamp 1,000 objects / 100 insertions / 100 deletions, ``k_max = 10``)
   and ingest it into the Delta landing tables (ingest time reported on its own);
2. the partition job (DkM-SKS defaults: ``m = 20``, ``γ1 = 100,000``, ``γ2 = 20``, grid 16,384);
3. catch-up: ``--catchup`` pending timestamps in ONE micro-batch run, then ``--chunked``
   further timestamps with ``max_timestamps = --per-run`` (objects/s and per-phase times from
   each run's ``MicrobatchReport``);
4. naive Spark (:mod:`dkmsks.bench.naive_spark`): the keyword join + window top-k + MERGE a user would
   write, seeded with the pipeline's state, timed on ``--naive`` timestamps;
5. follow mode (``dkm bench follow`` in a subprocess on ``local[m + 2]``, after this
   benchmark's session and JVM stop, so that their memory and cores go to it): ``--latency``
   rounds of one timestamp each with warm worker tasks, then one round over ``--warm-backlog``
   pending timestamps (warm catch-up throughput);
6. the naive results after its last timestamp are compared with the pipeline's at that
   timestamp (same data, same seed state), and, on a separate SMALL workload
   (``--verify-*``), the naive approach computed from scratch is compared with the oracle and
   with the pipeline.

Usage: ``dkm bench pipeline [--quick] [--no-docs] [--workdir DIR]``. ``--quick`` runs small
sizes (20k objects, 2k subscriptions) and writes docs only when ``--doc PATH`` is given. Raw
numbers go to ``<workdir>/results.json`` as they come, with the commit, the machine and the
parameters.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dkmsks.bench import naive_spark
from dkmsks.bench.common import (
    DKM,
    REPO,
    PeakMemory,
    Report,
    ResultFile,
    add_doc_flags,
    add_quick_flag,
    add_workload_flags,
    bench_main,
    dataset_path,
    describe_machine,
    load_average,
    say,
)
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median
from dkmsks.core.model import Results

DOCS = REPO / "docs" / "benchmarks.md"
prose = Prose.load("pipeline")

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
    from dkmsks.io.formats import read_objects
    from dkmsks.io.writers import write_events, write_objects

    started = time.perf_counter()
    spec = WorkloadSpec(o_init=o_init, subscriptions=subscriptions, timestamps=timestamps, seed=seed)
    vocab = Vocabulary()
    source = read_objects(dataset_path("place", must_exist=True), vocab, limit=spec.objects_needed).objects
    objects, events = generate_workload(source, spec)
    folder.mkdir(parents=True, exist_ok=True)
    write_objects(folder / "objects.tsv.gz", objects, vocab)
    write_events(folder / "events.tsv.gz", events, vocab)
    return {"objects": len(objects), "events": len(events), "seconds": time.perf_counter() - started}


def use_database(spark, root: Path, name: str):
    """A fresh database of this benchmark's own (its name is one of the ``bp_*`` below), with
    the project's tables registered; its :class:`~dkmsks.warehouse.Warehouse`."""
    from dkmsks.spark.catalog import register
    from dkmsks.warehouse import Warehouse

    warehouse = Warehouse(root, name)
    spark.sql("DROP DATABASE IF EXISTS IDENTIFIER(:name) CASCADE", args={"name": name})
    shutil.rmtree(warehouse.tables_dir, ignore_errors=True)
    register(spark, warehouse)
    return warehouse


def ingest(spark, warehouse, folder: Path) -> dict:
    """Ingest the workload's two files; rows, rejections and seconds of each."""
    from dkmsks.spark.ingest import ingest_events, ingest_objects

    out = {}
    for key, fn, path in (("objects", ingest_objects, folder / "objects.tsv.gz"),
                          ("events", ingest_events, folder / "events.tsv.gz")):
        started = time.perf_counter()
        r = fn(spark, warehouse, path, run_id="bench")
        out[key] = {"rows": r.accepted, "rejected": r.rejected, "seconds": time.perf_counter() - started}
    return out


def partition(spark, warehouse, workers: int) -> dict:
    """Run the partition job (DkM-SKS, ``workers``); its time and phases."""
    from dkmsks.core.config import Method, PartitionConfig
    from dkmsks.jobs.partition import run_partition

    started = time.perf_counter()
    rep = run_partition(spark, warehouse, PartitionConfig(method=Method.DKM, workers=workers), run_id="bench")
    return {"seconds": time.perf_counter() - started, "phases_ms": rep.phases_ms,
            "subscriptions": rep.subscriptions, "subsets": rep.subsets}


def microbatch(spark, warehouse, *, until: int, max_timestamps: int | None, run_id: str) -> dict:
    """Run the micro-batch job up to ``until``; its counts, time and phases."""
    from dkmsks.jobs.microbatch import run_microbatch

    started = time.perf_counter()
    rep = run_microbatch(spark, warehouse, run_id=run_id, until=until, max_timestamps=max_timestamps)
    wall = time.perf_counter() - started
    return {"timestamps": rep.timestamps, "objects": rep.objects, "insertions": rep.insertions,
            "deletions": rep.deletions, "rejected": rep.rejected, "seconds": wall,
            "phases_ms": rep.phases_ms}


def catchup_summary(runs: list[dict]) -> dict:
    """The totals of a catch-up made of several runs (time, timestamps, objects, phases)."""
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
    """Whether results ``a`` and ``b`` are equal, with their sizes and the first difference."""
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
    from dkmsks.storage.export import results_as_of
    from dkmsks.storage.lake import Lake

    folder = workdir / "verify_workload"
    T = args.verify_timestamps
    gen = make_workload(folder, o_init=args.verify_o_init, subscriptions=args.verify_subscriptions,
                        timestamps=T, seed=args.seed + 1)
    warehouse = use_database(spark, workdir / "warehouse", "bp_verify")
    ingest(spark, warehouse, folder)
    partition(spark, warehouse, args.workers)
    microbatch(spark, warehouse, until=T, max_timestamps=None, run_id="verify")
    pipeline = results_as_of(Lake.of(warehouse), T)[1]

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

def measure(args) -> dict:
    """Run every step of the benchmark, recording each; the results."""
    from dkmsks.spark.session import build_session, stop_session_and_jvm
    from dkmsks.warehouse import Warehouse

    workdir: Path = args.workdir
    if workdir.exists() and not args.keep:
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    c0, c1 = args.catchup, args.catchup + args.chunked
    n_latency = max(args.latency, args.naive)
    T = c1 + n_latency + args.warm_backlog
    params = {"o_init": args.o_init, "subscriptions": args.subscriptions, "timestamps": T, "workers": args.workers,
              "catchup": args.catchup, "chunked": args.chunked, "per_run": args.per_run, "latency": n_latency,
              "naive": args.naive, "warm_backlog": args.warm_backlog, "objects_per_ts": 1000, "inserts_per_ts": 100,
              "deletes_per_ts": 100,
              "k_max": 10, "seed": args.seed, "master": args.master, "method": "dkm", "gamma1": 100_000,
              "gamma2": 20, "grid": 16384, "theta": 20, "quick": args.quick,
              "verify": [args.verify_o_init, args.verify_subscriptions, args.verify_timestamps]}
    rec = ResultFile(workdir / "results.json", params, spark=True)
    load_start = load_average()
    mem = PeakMemory().start()
    t_start = time.perf_counter()

    folder = workdir / "workload"
    say(f"generating the workload: |O_init|={args.o_init:,}, |S|={args.subscriptions:,}, T={T}")
    rec.put("generate", make_workload(folder, o_init=args.o_init, subscriptions=args.subscriptions,
                                      timestamps=T, seed=args.seed))
    say(f"generated in {rec.data['steps']['generate']['seconds']:.1f} s")

    naive_final: Results | None = None  # the naive tables' results, collected before their session ends
    spark = build_session(Warehouse(workdir / "warehouse"), app_name="dkmsks-bench-pipeline", master=args.master)
    try:
        if args.verify_o_init > 0:
            try:
                verify_small(spark, workdir, args, rec)
            except Exception as err:  # recorded, the timing run goes on
                rec.error("verify", err)
                traceback.print_exc()

        main = use_database(spark, workdir / "warehouse", "bp_main")
        rec.put("ingest", ingest(spark, main, folder))
        ing = rec.data["steps"]["ingest"]
        say(f"ingest: objects {ing['objects']['seconds']:.1f} s, events {ing['events']['seconds']:.1f} s")

        p = partition(spark, main, args.workers)
        rec.put("partition", p)
        say(f"partition job: {p['seconds']:.1f} s ("
            + ", ".join(f"{k} {v / 1e3:.1f}" for k, v in p["phases_ms"].items()) + ")")

        try:
            r = microbatch(spark, main, until=c0, max_timestamps=None, run_id="catchup-all")
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
                    r = microbatch(spark, main, until=c1, max_timestamps=args.per_run, run_id="catchup-chunked")
                    if not r["timestamps"]:
                        break
                    runs.append(r)
                    say(f"  run of {len(r['timestamps'])} timestamps ({r['timestamps'][0]}..{r['timestamps'][-1]}): "
                        f"{r['seconds']:.1f} s")
            except Exception as err:
                rec.error("catchup_chunked", err)
                traceback.print_exc()
            if runs:
                rec.put("catchup_chunked", {"run_list": runs, **catchup_summary(runs)})
                s = rec.data["steps"]["catchup_chunked"]
                say(f"catch-up, {args.per_run} per run: {s['objects_per_s']:,.0f} objects/s")

        # Naive Spark, seeded with the pipeline's state at c1, on timestamps c1+1 .. c1+naive.
        naive_steps: list[dict[str, Any]] = []
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
                    say(f"naive t={t}: {st.total_ms / 1e3:.1f} s "
                        f"({st.candidate_pairs:,} pairs, {st.changed:,} changed; "
                        + ", ".join(f"{k} {v / 1e3:.1f}" for k, v in st.phases_ms.items()) + ")")
                # The naive tables live in this session's in-memory catalog (dkmsks.spark.catalog
                # registers only the project's tables): collect their results before it stops.
                naive_final = naive_spark.naive_results(spark)
            except Exception as err:
                rec.error("naive", err)
                traceback.print_exc()

    finally:
        stop_session_and_jvm(spark)  # its memory and cores go to the follow subprocess

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

    try:
        if naive_final is not None and lat:
            try:
                from dkmsks.storage.export import results_as_of
                from dkmsks.storage.lake import Lake

                t_cmp = naive_steps[-1]["t"]
                rec.put("naive_vs_pipeline_full", {"t": t_cmp, **compare(naive_final,
                                                                          results_as_of(Lake.of(main), t_cmp)[1])})
                say(f"naive vs pipeline at t={t_cmp}: "
                    f"{'EQUAL' if rec.data['steps']['naive_vs_pipeline_full']['equal'] else 'DIFFERENT'}")
            except Exception as err:
                rec.error("naive_vs_pipeline_full", err)
                traceback.print_exc()
    finally:
        rec.data["peak_rss_gib"] = mem.stop() / 2**30
        rec.data["total_s"] = time.perf_counter() - t_start
        rec.data["load_avg"] = [load_start, load_average()]
        rec.save()
    return rec.data


# ----------------------------------------------------------------------------------------- report

def fmt_phases(ph: dict, scale: float = 1.0, digits: int = 1) -> str:
    """Phase times as ``name value`` pairs, scaled and rounded."""
    return ", ".join(f"{k} {v * scale:.{digits}f}" for k, v in ph.items())


def _top(phases: dict) -> str:
    return max(phases, key=lambda k: phases[k])


def targets(d: dict) -> list[str]:
    """The issue's targets, one table row each: met, not met (and by how much), or not measured."""
    s, errors = d["steps"], d["errors"]
    names = {"partition": prose("target.name.partition", limit=f"{TARGET_PARTITION_S / 60:g} min"),
             "follow": prose("target.name.follow", limit=f"{TARGET_FOLLOW_S:g} s"),
             "catchup_all": prose("target.name.catchup", limit=f"{TARGET_CATCHUP_OPS:,.0f}"),
             "naive": prose("target.name.naive", limit=f"{TARGET_NAIVE_RATIO:g}")}
    rows = {key: prose("target.not_measured", target=name, error=errors.get(key, "")) for key, name in names.items()}
    if "partition" in s:
        p = s["partition"]
        ok = p["seconds"] <= TARGET_PARTITION_S
        rows["partition"] = prose(
            "target.partition", target=names["partition"], status=prose.status(ok), seconds=f"{p['seconds']:.1f}",
            phases=fmt_phases(p["phases_ms"], 1e-3), miss="" if ok else prose(
                "target.partition.miss", times=f"{p['seconds'] / TARGET_PARTITION_S:.1f}", top=_top(p["phases_ms"])))
    if "follow" in s:
        f = s["follow"]
        ok, ph = f["median_s"] <= TARGET_FOLLOW_S, f["median_phases_s"]
        rows["follow"] = prose(
            "target.follow", target=names["follow"], status=prose.status(ok), median=f"{f['median_s']:.2f}",
            rounds=len(f["runs"]), phases=fmt_phases(ph, 1, 2), miss="" if ok else prose(
                "target.follow.miss", times=f"{f['median_s'] / TARGET_FOLLOW_S:.1f}", top=_top(ph),
                top_s=f"{ph[_top(ph)]:.2f}"))
    if "catchup_all" in s:
        c = s["catchup_all"]
        ok, ph = c["objects_per_s"] >= TARGET_CATCHUP_OPS, c["phases_s"]
        rows["catchup_all"] = prose(
            "target.catchup", target=names["catchup_all"], status=prose.status(ok),
            objects_per_s=f"{c['objects_per_s']:,.0f}", objects=f"{c['objects']:,}", timestamps=c["timestamps"],
            seconds=f"{c['seconds']:.1f}", miss="" if ok else prose(
                "target.catchup.miss", times=f"{TARGET_CATCHUP_OPS / c['objects_per_s']:.1f}", top=_top(ph),
                top_s=f"{ph[_top(ph)]:.1f}"))
    if "warm_catchup" in s:
        w = s["warm_catchup"]
        rows["warm_catchup"] = prose(
            "target.warm_catchup", limit=f"{TARGET_CATCHUP_OPS:,.0f}",
            status=prose.status(w["objects_per_s"] >= TARGET_CATCHUP_OPS), objects_per_s=f"{w['objects_per_s']:,.0f}",
            objects=f"{w['objects']:,}", timestamps=w["timestamps"], seconds=f"{w['seconds']:.1f}",
            phases=fmt_phases(w["phases_s"]))
    if "naive" in s and s["naive"]["steps"] and "follow" in s:
        nv = median([x["seconds"] for x in s["naive"]["steps"]])
        r = nv / s["follow"]["median_s"]
        ok = r >= TARGET_NAIVE_RATIO
        rows["naive"] = prose(
            "target.naive", target=names["naive"], status=prose.status(ok), ratio=f"{r:.1f}", naive=f"{nv:.1f}",
            follow=f"{s['follow']['median_s']:.2f}", miss="" if ok else prose(
                "target.naive.miss", needed=f"{nv / TARGET_NAIVE_RATIO:.2f}"))
    order = ("partition", "follow", "catchup_all", "warm_catchup", "naive")
    return [rows[key] for key in order if key in rows]


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
    """The markdown report of a measurement."""
    p, s, m = d["params"], d["steps"], d["machine"]
    out = [prose("head", command="dkm bench pipeline" + (" --quick" if p["quick"] else ""), commit=d["commit"],
                 date=d["date"], minutes=f"{d['total_s'] / 60:.1f}", peak_gib=f"{d['peak_rss_gib']:.1f}")]
    machine_text = prose("machine", machine=describe_machine(m), master=p["master"])
    if "load_avg" in d:
        machine_text += " " + prose("machine.load", load_start=f"{d['load_avg'][0]:.1f}",
                                    load_end=f"{d['load_avg'][1]:.1f}", cores=m["nproc"])
    out.append(machine_text)
    out.append(prose("parameters", o_init=f"{p['o_init']:,}", subs=f"{p['subscriptions']:,}",
                     objects_per_ts=f"{p['objects_per_ts']:,}", inserts_per_ts=p["inserts_per_ts"],
                     deletes_per_ts=p["deletes_per_ts"], k_max=p["k_max"], seed=p["seed"], m=p["workers"],
                     gamma1=f"{p['gamma1']:,}", gamma2=p["gamma2"], grid=f"{p['grid']:,}", T=p["timestamps"],
                     catchup=p["catchup"], chunked_from=p["catchup"] + 1, chunked_to=p["catchup"] + p["chunked"],
                     per_run=p["per_run"], latency=p["latency"], naive=p["naive"],
                     warm_backlog=p.get("warm_backlog", 0)))
    out += d.get("notes", [])
    rows = [prose("results")]
    if "generate" in s:
        rows.append(prose("row.generate", seconds=f"{s['generate']['seconds']:.1f}"))
    if "ingest" in s:
        i = s["ingest"]
        rows.append(prose("row.ingest", seconds=f"{i['objects']['seconds'] + i['events']['seconds']:.1f}",
                          objects_s=f"{i['objects']['seconds']:.1f}", objects=f"{i['objects']['rows']:,}",
                          events_s=f"{i['events']['seconds']:.1f}", events=f"{i['events']['rows']:,}"))
    if "partition" in s:
        rows.append(prose("row.partition", seconds=f"{s['partition']['seconds']:.1f}",
                          phases=fmt_phases(s["partition"]["phases_ms"], 1e-3),
                          subsets=f"{s['partition']['subsets']:,}"))
    for key, block in (("catchup_all", "row.catchup_all"), ("catchup_chunked", "row.catchup_chunked")):
        if key in s:
            c = s[key]
            rows.append(prose(block, per_run=p["per_run"], timestamps=c["timestamps"], runs=c["runs"],
                              objects_per_s=f"{c['objects_per_s']:,.0f}", seconds=f"{c['seconds']:.1f}",
                              per_timestamp=f"{c['per_timestamp_s']:.2f}", phases=fmt_phases(c["phases_s"])))
    if "follow" in s:
        f = s["follow"]
        rows.append(prose("row.follow", master=f.get("master", ""), startup=f"{f.get('startup_s', 0):.1f}",
                          rounds=len(f["runs"]), median=f"{f['median_s']:.2f}",
                          min=f"{min(r['seconds'] for r in f['runs']):.2f}", max=f"{f['max_s']:.2f}",
                          objects_per_s=f"{p['objects_per_ts'] / f['median_s']:,.0f}",
                          phases=fmt_phases(f["median_phases_s"], 1, 2)))
    if "warm_catchup" in s:
        w = s["warm_catchup"]
        rows.append(prose("row.warm_catchup", timestamps=w["timestamps"], objects_per_s=f"{w['objects_per_s']:,.0f}",
                          seconds=f"{w['seconds']:.1f}", phases=fmt_phases(w["phases_s"])))
    if "naive" in s and s["naive"]["steps"]:
        st = s["naive"]["steps"]
        rows.append(prose("row.naive", steps=len(st), median=f"{median([x['seconds'] for x in st]):.1f}",
                          min=f"{min(x['seconds'] for x in st):.1f}",
                          phases=", ".join(f"{k} {median([x['phases_ms'][k] / 1e3 for x in st]):.1f}"
                                           for k in sorted({k for x in st for k in x["phases_ms"]})),
                          pairs=f"{median([x['pairs'] for x in st]):,.0f}"))
    out.append("\n".join(rows))
    if "follow" in s and "naive" in s and s["naive"]["steps"]:
        nv = median([x["seconds"] for x in s["naive"]["steps"]])
        lines = [prose("ratios", follow=f"{nv / s['follow']['median_s']:.1f}")]
        # The naive baseline's MERGE writes its results back into a Delta table, which the
        # pipeline's journal append does differently: the ratio without it bounds the gap from below.
        merge = [x["phases_ms"].get("merge") for x in s["naive"]["steps"]]
        if all(m is not None for m in merge):
            no_merge = median([x["seconds"] - x["phases_ms"]["merge"] / 1e3 for x in s["naive"]["steps"]])
            lines.append(prose("ratio.without_merge", naive=f"{no_merge:.1f}",
                               follow=f"{no_merge / s['follow']['median_s']:.1f}"))
        lines += [prose(block, per_run=p["per_run"], ratio=f"{nv / s[key]['per_timestamp_s']:.0f}")
                  for key, block in (("catchup_all", "ratio.catchup_all"), ("catchup_chunked", "ratio.catchup_chunked"))
                  if key in s]
        out.append("\n".join(lines))
    checks = []
    if "verify" in s:
        v = s["verify"]
        checks.append(prose("check.small", o_init=f"{v['o_init']:,}", subs=f"{v['subscriptions']:,}",
                            T=v["timestamps"],
                            naive_oracle=v["naive_vs_oracle"]["equal"],
                            pipeline_oracle=v["pipeline_vs_oracle"]["equal"],
                            naive_pipeline=v["naive_vs_pipeline"]["equal"],
                            checked=f"{v['naive_vs_oracle']['subscriptions']:,}",
                            rows=f"{v['naive_vs_oracle']['result_rows']:,}"))
    if "naive_vs_pipeline_full" in s:
        c = s["naive_vs_pipeline_full"]
        checks.append(prose("check.full", t=c["t"], naive=p["naive"], equal=c["equal"],
                            checked=f"{c['subscriptions']:,}", rows=f"{c['result_rows']:,}"))
    if checks:
        out.append(prose("checks") + "\n\n" + "\n".join(checks))
    out.append("\n".join([prose("targets"), *targets(d)]))
    if d["errors"]:
        out.append(prose("failures") + "\n\n" + "\n".join(
            prose("failure", step=k, error=v.splitlines()[-1][:300]) for k, v in d["errors"].items()))
    return "\n\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench pipeline``: run (or, with ``--report-only``, reread) and report; the exit status."""
    ap = argparse.ArgumentParser(prog="dkm bench pipeline", description=__doc__.split("\n\n")[0])
    add_workload_flags(ap, o_init=1_000_000, subscriptions=1_000_000, seed=7, workers=20)
    ap.add_argument("--catchup", type=int, default=100, help="timestamps processed in one run (%(default)s)")
    ap.add_argument("--chunked", type=int, default=50, help="timestamps processed in runs of --per-run (%(default)s)")
    ap.add_argument("--per-run", type=int, default=10, help="max_timestamps of the chunked catch-up (%(default)s)")
    ap.add_argument("--latency", type=int, default=20, help="follow-mode rounds of one timestamp (%(default)s)")
    ap.add_argument("--warm-backlog", type=int, default=100,
                    help="then one follow round over this many pending timestamps (%(default)s)")
    ap.add_argument("--naive", type=int, default=3, help="naive Spark timestamps (%(default)s)")
    ap.add_argument("--verify-o-init", type=int, default=20_000,
                    help="small check workload |O_init| (%(default)s; 0 = skip)")
    ap.add_argument("--verify-subscriptions", type=int, default=2_000, help="small check |S| (%(default)s)")
    ap.add_argument("--verify-timestamps", type=int, default=3, help="small check timestamps (%(default)s)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="warehouse + workload folder (default /tmp/bench_pipeline[_quick])")
    ap.add_argument("--keep", action="store_true", help="do not wipe --workdir first")
    ap.add_argument("--report-only", type=Path, default=None, help="re-render the section from a results.json")
    ap.add_argument("--note", action="append", default=[], help="a paragraph to add to the section (repeatable)")
    add_quick_flag(ap, "small sizes (20k objects, 2k subscriptions); docs only with --doc", o_init=20_000,
                   subscriptions=2_000, catchup=10, chunked=10, per_run=5, latency=4, warm_backlog=5)
    add_doc_flags(ap, default=DOCS)
    return bench_main(ap, argv, run)


def run(args: argparse.Namespace) -> Report:
    """Measure (or reread a ``results.json``); the report."""
    if args.workdir is None:
        args.workdir = Path("/tmp/bench_pipeline_quick" if args.quick else "/tmp/bench_pipeline")
    data = read_results(args.report_only) if args.report_only else measure(args)
    if args.note:
        data["notes"] = list(args.note)
    return Report("dkm bench pipeline", report(data))
