"""A run's commit, measured: one idempotent append to the journal through Spark and through delta-rs.

Every micro-batch run and follow-mode round commits with one blind append to the ``journal``
table, tagged with Delta's transaction id (``txnAppId``/``txnVersion``). The project writes it
from the driver with delta-rs (:meth:`dkmsks.storage.lake.Lake.append`), not with a Spark job;
this benchmark gives the figures behind that choice. In one fresh warehouse (its tables
created by the project's DDL) and one session, it appends the same ``--rows`` journal records
``--runs`` times each way, alternately so load changes hit both alike, after ``--warmup``
untimed appends each:

- **Spark**: ``createDataFrame`` of the Arrow batch, then ``insertInto`` the table under the
  transaction-id session confs (:func:`dkmsks.spark.delta_io.insert`, how the project's Spark
  writes are tagged);
- **delta-rs**: :meth:`Lake.append` with an app transaction (``write_deltalake``), what
  :func:`dkmsks.storage.journal.commit` runs.

Reported: medians (and the spread) of the wall time per append, the ratio Spark / delta-rs of
the medians, and the table's row count afterwards (every append landed once). The session's
start is not counted in either.

    dkm bench append [--rows 1000] [--runs 15] [--warmup 2] [--doc docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from dkmsks.bench.common import REPO, ResultFile, load_average, say, write_doc_section
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median, ratio

prose = Prose.load("append")

APP_SPARK, APP_RS = "dkmsks-bench-append-spark", "dkmsks-bench-append-delta-rs"


def journal_batch(rows: int, t: int, schema=None):
    """``rows`` journal ``change`` records of one timestamp (5 results each), as Arrow; with
    ``schema``, every other column of it as nulls, in its order."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(t)
    sub = np.arange(rows, dtype=np.int64)
    ids = rng.integers(0, 1_000_000, size=(rows, 5), dtype=np.int64)
    d2 = np.sort(rng.random((rows, 5)), axis=1)
    batch = pa.table({
        "record": pa.array(["change"] * rows), "t": pa.array(np.full(rows, t, dtype=np.int64)),
        "plan_version": pa.array(np.ones(rows, dtype=np.int64)), "run_id": pa.array(["bench-append"] * rows),
        "worker": pa.array((sub % 20).astype(np.int32)), "sub_id": pa.array(sub),
        "change": pa.array(["update"] * rows),
        "object_ids": pa.array(list(ids), type=pa.list_(pa.int64())),
        "d2": pa.array(list(d2), type=pa.list_(pa.float64())),
    })
    if schema is None:
        return batch
    return pa.table([batch.column(f.name).cast(f.type) if f.name in batch.column_names
                     else pa.nulls(rows, f.type) for f in schema], schema=schema)


def measure(rows: int, runs: int, warmup: int, work: Path) -> dict:
    """Both ways' append times (alternated, warm-ups dropped), the rows that landed and whether
    a replayed transaction version was skipped, in a fresh warehouse under ``work``."""
    from dkmsks.spark.delta_io import insert
    from dkmsks.spark.session import build_session
    from dkmsks.storage import tables
    from dkmsks.storage.lake import Lake
    from dkmsks.warehouse import Warehouse

    warehouse = Warehouse(work / "warehouse")
    started = time.perf_counter()
    spark = build_session(warehouse, app_name="dkmsks-bench-append")
    session_s = time.perf_counter() - started
    lake = Lake.of(warehouse)
    schema = spark.table(tables.JOURNAL).limit(0).toArrow().schema
    times: dict[str, list[float]] = {"spark": [], "delta-rs": []}
    try:
        for i in range(warmup + runs):
            batch = journal_batch(rows, i + 1, schema)
            for way in (("spark", "delta-rs") if i % 2 == 0 else ("delta-rs", "spark")):
                t0 = time.perf_counter()
                if way == "spark":
                    insert(spark, spark.createDataFrame(batch), tables.JOURNAL, app_id=APP_SPARK, version=i + 1)
                else:
                    lake.append(tables.JOURNAL, batch, app_id=APP_RS, version=i + 1)
                seconds = time.perf_counter() - t0
                if i >= warmup:
                    times[way].append(seconds)
            if i == warmup - 1 or i == warmup + runs - 1 or (i - warmup) % 5 == 4:
                last = {way: f"{v[-1]:.3f} s" if v else "(warm-up)" for way, v in times.items()}
                say(f"append {i + 1}/{warmup + runs}: spark {last['spark']}, delta-rs {last['delta-rs']}")
        landed = lake.read(tables.JOURNAL, columns=["t"]).num_rows
        # A replay of a committed transaction version is skipped by both ways.
        replay = journal_batch(rows, 1, schema)
        insert(spark, spark.createDataFrame(replay), tables.JOURNAL, app_id=APP_SPARK, version=1)
        replay_rs = lake.append(tables.JOURNAL, replay, app_id=APP_RS, version=1)
        after_replay = lake.read(tables.JOURNAL, columns=["t"]).num_rows
        commits = lake.version(tables.JOURNAL)
    finally:
        spark.stop()
    return {"session_s": session_s, "seconds": times, "rows_landed": landed,
            "rows_expected": 2 * rows * (warmup + runs), "replay_skipped": after_replay == landed and not replay_rs,
            "journal_version": commits}


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench append``: measure, save ``results.json``, print (and with ``--doc`` write) the section."""
    p = argparse.ArgumentParser(prog="dkm bench append", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1000, help="journal records per append (%(default)s)")
    p.add_argument("--runs", type=int, default=15, help="timed appends each way (%(default)s)")
    p.add_argument("--warmup", type=int, default=2, help="untimed appends each way first (%(default)s)")
    p.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench" / "append",
                   help="results.json goes here (%(default)s)")
    p.add_argument("--doc", type=Path, default=None, help="write the report section into this Markdown file")
    args = p.parse_args(argv)
    if args.rows < 1 or args.runs < 1 or args.warmup < 0:
        p.error("--rows and --runs must be at least 1, --warmup at least 0")
    params = {"rows": args.rows, "runs": args.runs, "warmup": args.warmup}
    rec = ResultFile(args.workdir / "results.json", params, spark=True)
    rec.put("load_before", load_average())
    with tempfile.TemporaryDirectory(prefix="dkmsks-bench-append-") as tmp:
        out = measure(args.rows, args.runs, args.warmup, Path(tmp))
    out["load_after"] = load_average()
    rec.put("appends", out)
    spark_s, rs_s = out["seconds"]["spark"], out["seconds"]["delta-rs"]
    if out["rows_landed"] != out["rows_expected"] or not out["replay_skipped"]:
        say(f"append: {out['rows_landed']} rows landed, {out['rows_expected']} expected; "
            f"replay skipped: {out['replay_skipped']}")
        return 1
    d = rec.data
    text = prose("head", commit=d["commit"], date=d["date"], machine=d["machine"].get("cpu", ""),
                 nproc=d["machine"]["nproc"], load=f"{d['steps']['load_before']:.1f}",
                 load_after=f"{out['load_after']:.1f}", rows=f"{args.rows:,}", runs=args.runs,
                 warmup=args.warmup, session=f"{out['session_s']:.1f}",
                 spark_median=f"{median(spark_s):.3f}", spark_min=f"{min(spark_s):.3f}",
                 spark_max=f"{max(spark_s):.3f}", rs_median=f"{median(rs_s):.4f}", rs_min=f"{min(rs_s):.4f}",
                 rs_max=f"{max(rs_s):.4f}", ratio=f"{ratio(median(spark_s), median(rs_s)):.0f}",
                 landed=f"{out['rows_landed']:,}", commits=out["journal_version"])
    print(text)
    if args.doc:
        write_doc_section(args.doc, "append", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
