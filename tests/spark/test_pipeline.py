"""The Spark + Delta pipeline equals the brute-force oracle and the in-memory engine.

One small real-data workload is ingested once into a landing database; every configuration
then runs in a database of its own whose landing tables are Delta shallow clones of it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from conftest import real_objects
from dkmsks.core.config import PartitionConfig
from dkmsks.core.engine import build_engine
from dkmsks.core.model import Vocabulary, describe_difference, results_equal
from dkmsks.core.oracle import oracle_results
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.io.formats import read_events, read_objects
from dkmsks.io.writers import write_events, write_objects
from scan_metrics import rows_scanned

pytestmark = pytest.mark.spark

SPEC = WorkloadSpec(o_init=3000, subscriptions=300, timestamps=5, objects_per_ts=200,
                    inserts_per_ts=20, deletes_per_ts=20, k_max=6, seed=11)
T = SPEC.timestamps


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    source, vocab = real_objects(SPEC.objects_needed)
    objects, events = generate_workload(source, SPEC)
    folder = tmp_path_factory.mktemp("workload")
    write_objects(folder / "objects.tsv.gz", objects, vocab)
    write_events(folder / "events.tsv.gz", events, vocab)
    v = Vocabulary()  # read back through the validating readers, as every path does
    objs = read_objects(folder / "objects.tsv.gz", v).objects
    evs = read_events(folder / "events.tsv.gz", v).events
    oracle = {t: oracle_results(objs, evs, t) for t in range(T + 1)}
    return folder, objs, evs, oracle


@pytest.fixture(scope="module")
def landing(spark, spark_warehouse, workload):
    from dkmsks.spark.catalog import register
    from dkmsks.spark.ingest import ingest_events, ingest_objects

    folder = workload[0]
    warehouse = spark_warehouse.with_database("pipeline_landing")
    register(spark, warehouse)
    ingest_objects(spark, warehouse, folder / "objects.tsv.gz", run_id="test")
    ingest_events(spark, warehouse, folder / "events.tsv.gz", run_id="test")
    spark.catalog.setCurrentDatabase("default")
    return warehouse


@pytest.fixture
def pipeline_db(spark, spark_warehouse, landing, request):
    """A fresh database with shallow clones of the landing tables, selected as current; its
    :class:`~dkmsks.warehouse.Warehouse`."""
    from conftest import database_name
    from dkmsks.spark.catalog import register

    warehouse = spark_warehouse.with_database(database_name("p_", request))
    name = warehouse.database
    spark.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")  # test-made name, alphanumeric only
    spark.sql(f"CREATE DATABASE {name}")
    for table in ("objects", "subscription_events"):
        spark.sql(f"CREATE TABLE {name}.{table} SHALLOW CLONE {landing.database}.{table}")
    register(spark, warehouse)
    yield warehouse
    spark.catalog.setCurrentDatabase("default")
    spark.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")


def _partition(spark, warehouse, method, m):
    from dkmsks.jobs.partition import run_partition

    return run_partition(spark, warehouse, PartitionConfig(method=method, workers=m, gamma1=40, theta=4, grid=256),
                         run_id="test")


def _state_results(warehouse):
    from dkmsks.storage.export import results_as_of
    from dkmsks.storage.lake import Lake

    return results_as_of(Lake.of(warehouse))[1]


def _results_at(warehouse, t):
    from dkmsks.storage.export import results_as_of
    from dkmsks.storage.lake import Lake

    return results_as_of(Lake.of(warehouse), t)[1]


def _assert_equal(got, expected):
    assert results_equal(got, expected), describe_difference(got, expected)


def _assert_views_equal(spark, expected, *, sub_ids=None, plan_version=None):
    """``knn_results`` (every subscription, or a point query on ``sub_ids``) equals the oracle's
    results, rank by rank, and ``knn_current`` holds exactly its live subscriptions, each row of
    ``plan_version`` when given (the current plan's, after a repartition)."""
    where, wanted = "", expected
    if sub_ids is not None:
        where = " WHERE sub_id IN (" + ", ".join(str(int(s)) for s in sub_ids) + ")"
        wanted = {s: r for s, r in expected.items() if s in set(sub_ids)}
    rows = spark.sql(f"SELECT sub_id, rank, object_id, distance FROM knn_results{where}").collect()
    got: dict[int, list[tuple[int, int, float]]] = {}
    for r in rows:
        got.setdefault(r.sub_id, []).append((r.rank, r.object_id, r.distance))
    want = {s: list(zip(range(1, len(r.object_ids) + 1), r.object_ids.tolist(), r.distances.tolist(), strict=True))
            for s, r in wanted.items() if len(r.object_ids)}
    assert {s: sorted(v) for s, v in got.items()} == want
    # The object columns: each row's are its object's in the landing table (the view's join
    # with objects; the query above reads no object column, so Spark drops that join from it).
    located = spark.sql(f"SELECT object_id, object_x, object_y, object_keywords FROM knn_results{where}").collect()
    objects = {r.id: (r.x, r.y, list(r.keywords))
               for r in spark.sql("SELECT id, x, y, keywords FROM objects").collect()}
    assert len(located) == len(rows)
    assert all((r.object_x, r.object_y, list(r.object_keywords)) == objects[r.object_id] for r in located)
    current = spark.sql(f"SELECT sub_id, plan_version FROM knn_current{where}").collect()
    assert sorted(r.sub_id for r in current) == sorted(wanted)
    if plan_version is not None:
        assert {r.plan_version for r in current} == {plan_version}


def _reads_objects(spark, query: str) -> bool:
    """Whether ``query``'s optimized plan reads the ``objects`` table."""
    plan = spark.sql(query)._jdf.queryExecution().optimizedPlan().toString()
    return re.search(r"Relation \S*\bobjects\[", plan) is not None


def test_a_results_query_without_object_columns_does_not_read_objects(spark, pipeline_db):
    """A reader's point query of ``knn_results`` (or a count) that reads no object column never
    touches the landing table: the view's objects side is unique on ``id``, so Spark drops the
    join (docs/design.md §9), instead of shuffling every object for a handful of ids."""
    point = "FROM knn_results WHERE sub_id IN (1, 2, 3)"
    assert not _reads_objects(spark, f"SELECT sub_id, rank, object_id, distance {point}")
    assert not _reads_objects(spark, "SELECT count(*) FROM knn_results")
    assert _reads_objects(spark, f"SELECT * {point}")  # the object's location still comes from objects


@pytest.mark.parametrize("method", ["kop", "sop", "dkm"])
def test_all_timestamps_in_one_job_equal_the_oracle_engine_and_earlier_as_of(spark, pipeline_db, workload, method):
    from dkmsks.jobs.microbatch import run_microbatch

    _, objs, evs, oracle = workload
    _partition(spark, pipeline_db, method, 3)
    _assert_equal(_results_at(pipeline_db, 0), oracle[0])
    report = run_microbatch(spark, pipeline_db, run_id="one-job")
    assert report.timestamps == list(range(1, T + 1))
    _assert_equal(_state_results(pipeline_db), oracle[T])
    for t in (2, 4):  # inside the single run: time travel to its base + the change log
        _assert_equal(_results_at(pipeline_db, t), oracle[t])

    config = PartitionConfig(method=method, workers=3, gamma1=40, theta=4, grid=256)
    engine, _ = build_engine(config, objs, evs, threads=2)
    for _ in engine.run(objs, evs):
        pass
    _assert_equal(_state_results(pipeline_db), engine.results())


@pytest.mark.parametrize(("method", "m"), [(method, m) for m in (1, 20) for method in ("kop", "sop", "dkm", "ps2")]
                         + [("ps2", 7)])  # ps2 at m = 7 on Place too (the Twitter stand-in: below)
def test_worker_counts_one_and_twenty_equal_the_oracle(spark, pipeline_db, workload, m, method):
    from dkmsks.jobs.microbatch import run_microbatch

    oracle = workload[3]
    _partition(spark, pipeline_db, method, m)
    assert spark.table("knn_state").select("worker").distinct().count() == min(m, 300)
    run_microbatch(spark, pipeline_db, run_id="m")
    _assert_equal(_state_results(pipeline_db), oracle[T])


@pytest.fixture(scope="module")
def names_landing(spark, spark_warehouse, tmp_path_factory):
    """A small workload from the Twitter stand-in (POIs with name words), ingested once."""
    from conftest import NAMES_FILE
    from dkmsks.spark.catalog import register
    from dkmsks.spark.ingest import ingest_events, ingest_objects

    spec = WorkloadSpec(o_init=2000, subscriptions=300, timestamps=3, objects_per_ts=200, inserts_per_ts=20,
                        deletes_per_ts=20, k_max=6, seed=12)
    source, vocab = real_objects(spec.objects_needed, NAMES_FILE)
    objects, events = generate_workload(source, spec)
    folder = tmp_path_factory.mktemp("names")
    write_objects(folder / "objects.tsv.gz", objects, vocab)
    write_events(folder / "events.tsv.gz", events, vocab)
    v = Vocabulary()
    objs, evs = read_objects(folder / "objects.tsv.gz", v).objects, read_events(folder / "events.tsv.gz", v).events
    warehouse = spark_warehouse.with_database("names_landing")
    register(spark, warehouse)
    ingest_objects(spark, warehouse, folder / "objects.tsv.gz", run_id="test")
    ingest_events(spark, warehouse, folder / "events.tsv.gz", run_id="test")
    spark.catalog.setCurrentDatabase("default")
    return warehouse, spec, {t: oracle_results(objs, evs, t) for t in range(spec.timestamps + 1)}


@pytest.mark.parametrize("m", [1, 7, 20])
def test_ps2_on_the_twitter_stand_in_equals_the_oracle(spark, spark_warehouse, names_landing, request, m):
    """PS²Stream changes where work happens, never what is computed: with insertions and
    deletions, at every timestamp, on the data set with a large vocabulary (text splits)."""
    from conftest import database_name
    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.spark.catalog import register
    from dkmsks.storage.lake import Lake
    from dkmsks.storage.plans import current_plan

    landing, spec, oracle = names_landing
    warehouse = spark_warehouse.with_database(database_name("n_", request))
    spark.sql(f"CREATE DATABASE {warehouse.database}")
    for table in ("objects", "subscription_events"):
        spark.sql(f"CREATE TABLE {warehouse.database}.{table} SHALLOW CLONE {landing.database}.{table}")
    register(spark, warehouse)
    try:
        _partition(spark, warehouse, "ps2", m)
        info = current_plan(Lake.of(warehouse))
        assert info.method == "ps2" and info.workers == m
        _assert_equal(_results_at(warehouse, 0), oracle[0])
        for t in range(1, spec.timestamps + 1):
            assert run_microbatch(spark, warehouse, run_id=f"ts-{t}", max_timestamps=1).timestamps == [t]
            _assert_equal(_state_results(warehouse), oracle[t])
    finally:
        spark.catalog.setCurrentDatabase("default")
        spark.sql(f"DROP DATABASE IF EXISTS {warehouse.database} CASCADE")


def test_one_job_per_timestamp_equals_the_oracle_at_each_timestamp(spark, pipeline_db, workload):
    from dkmsks.jobs.microbatch import run_microbatch

    oracle = workload[3]
    _partition(spark, pipeline_db, "dkm", 3)
    for t in range(1, T + 1):
        report = run_microbatch(spark, pipeline_db, run_id=f"ts-{t}", max_timestamps=1)
        assert report.timestamps == [t]
        _assert_equal(_state_results(pipeline_db), oracle[t])
    for t in range(T + 1):
        _assert_equal(_results_at(pipeline_db, t), oracle[t])

    # The user-facing views agree with the oracle too.
    _assert_views_equal(spark, oracle[T])
    loads = spark.sql("SELECT sum(subscriptions) AS n FROM worker_loads").collect()[0].n
    assert loads == len(oracle[T])
    per_t = spark.sql("SELECT t, pairs_tested, pairs_in_ball FROM timestamp_metrics ORDER BY t").collect()
    assert [r.t for r in per_t] == list(range(1, T + 1))
    assert all(r.pairs_tested >= r.pairs_in_ball for r in per_t)
    stream = spark.sql("SELECT DISTINCT change FROM result_stream").collect()
    assert {r.change for r in stream} == {"insert", "update", "delete"}


def test_replaying_processed_timestamps_writes_no_new_version(spark, pipeline_db, workload, monkeypatch):
    from delta.tables import DeltaTable

    from dkmsks.jobs import microbatch as microbatch_job
    from dkmsks.jobs.microbatch import run_microbatch

    oracle = workload[3]
    _partition(spark, pipeline_db, "kop", 3)
    run_microbatch(spark, pipeline_db, run_id="first", until=3)
    watched = ("knn_state", "journal", "run_metrics")
    versions = {t: DeltaTable.forName(spark, t).history(1).collect()[0].version for t in watched}
    counts = {t: spark.table(t).count() for t in watched}

    # Pretend the ledger lost t=2..3: the run recomputes them, and its commit is a replay of a
    # committed transaction (txnAppId/txnVersion), which is skipped.
    monkeypatch.setattr(microbatch_job, "last_processed", lambda source: 1)
    report = run_microbatch(spark, pipeline_db, run_id="replay", until=3)
    assert report.replayed and report.timestamps == [2, 3]
    assert {t: DeltaTable.forName(spark, t).history(1).collect()[0].version for t in watched} == versions
    assert {t: spark.table(t).count() for t in watched} == counts
    monkeypatch.undo()
    _assert_equal(_state_results(pipeline_db), oracle[3])


def test_compaction_keeps_current_and_earlier_results_exact(spark, pipeline_db, workload):
    from delta.tables import DeltaTable

    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.spark.compaction import compact
    from dkmsks.storage.export import state_checkpoints
    from dkmsks.storage.lake import Lake

    oracle = workload[3]
    _partition(spark, pipeline_db, "dkm", 3)
    assert compact(spark, pipeline_db, force=True) is None  # nothing to merge yet
    run_microbatch(spark, pipeline_db, run_id="a", until=2, compaction="never")
    report = run_microbatch(spark, pipeline_db, run_id="b", until=4, compaction="always")
    assert report.compacted and report.timestamps == [3, 4]
    assert [through for through, _ in state_checkpoints(Lake.of(pipeline_db))] == [0, 4]
    # The snapshot alone (no journal tail) now holds the results at t=4.
    snapshot = {r.sub_id: list(r.object_ids) for r in spark.table("knn_state").collect()}
    assert snapshot == {s: r.object_ids.tolist() for s, r in oracle[4].items()}
    assert compact(spark, pipeline_db, force=True) is None  # idempotent: the tail is empty now
    history = DeltaTable.forName(spark, "knn_state").history().count()
    run_microbatch(spark, pipeline_db, run_id="c", compaction="never")
    assert DeltaTable.forName(spark, "knn_state").history().count() == history
    _assert_equal(_state_results(pipeline_db), oracle[T])
    for t in range(T + 1):
        _assert_equal(_results_at(pipeline_db, t), oracle[t])
    live = spark.sql("SELECT count(*) AS n FROM knn_current").collect()[0].n
    assert live == len(oracle[T])


def test_the_views_skip_journal_records_a_compaction_merged_and_stay_exact(spark, pipeline_db, workload, tmp_path):
    """``knn_current`` reads only the journal's final records after the snapshot's horizon, in a
    session (and in ``dkm spark-sql``) registered after the compaction; a session registered before
    it still answers exactly, reading every record. Without the bound the journal's final records
    grow without end under a running service while the snapshot stays the size of |S|."""
    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.spark.catalog import refresh_views

    oracle = workload[3]
    _partition(spark, pipeline_db, "dkm", 3)
    run_microbatch(spark, pipeline_db, run_id="a", until=2, compaction="never")
    run_microbatch(spark, pipeline_db, run_id="b", until=4, compaction="always")
    run_microbatch(spark, pipeline_db, run_id="c", compaction="never")
    finals = spark.sql("SELECT t FROM journal WHERE record = 'final'").collect()
    after = sum(1 for r in finals if r.t > 4)
    assert 0 < after < len(finals)
    query = "SELECT sub_id, object_ids FROM knn_current"

    # Registered before the partition job: the horizon of an empty snapshot, every record read.
    stale = spark.sql(query)
    stale_rows = {r.sub_id: list(r.object_ids) for r in stale.collect()}
    assert rows_scanned(stale, "journal") == len(finals)
    assert refresh_views(spark, pipeline_db) == 4  # the compaction merged every final up to t = 4
    fresh = spark.sql(query)
    fresh_rows = {r.sub_id: list(r.object_ids) for r in fresh.collect()}
    assert rows_scanned(fresh, "journal") == after
    want = {s: r.object_ids.tolist() for s, r in oracle[T].items()}
    assert stale_rows == fresh_rows == want
    _assert_views_equal(spark, oracle[T])
    _assert_views_equal(spark, oracle[T], sub_ids=sorted(oracle[T])[:3])

    # spark-sql gets the same bound through its init file, as the README runs it: no activated venv.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "SPARK_HOME")}
    done = subprocess.run([str(Path(sys.executable).parent / "dkm"), "spark-sql",
                           "--warehouse", str(pipeline_db.root), "--database", pipeline_db.database,
                           "-e", "SELECT sub_id, rank, object_id FROM knn_results"],
                          capture_output=True, text=True, env=env, timeout=600, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    got = {tuple(int(v) for v in line.split("\t")) for line in done.stdout.splitlines() if line.strip()}
    assert got == {(s, rank, o) for s, ids in want.items() for rank, o in enumerate(ids, start=1)}


def test_maintenance_packs_the_journal_in_time_ranges_so_the_views_still_skip_merged_records(
        spark, pipeline_db, workload, monkeypatch):
    """Maintenance packs the journal's small files sorted by t into files that each span a range
    of timestamps, and only what was appended since its last run: Delta's OPTIMIZE would pack every
    timestamp into one file per record kind, and ``knn_current`` would scan every final record of
    the journal's history on each query."""
    from dkmsks.jobs import maintain
    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.spark.catalog import refresh_views
    from dkmsks.storage import tables
    from dkmsks.storage.lake import Lake

    oracle, lake = workload[3], Lake.of(pipeline_db)
    monkeypatch.setattr(maintain, "TIME_ORDERED_FILE_ROWS", 150)  # several ranges from this small journal
    journal_rows = lambda: sorted(tuple(r) for r in spark.table("journal").collect())  # noqa: E731

    def final_files() -> list[tuple[str, int, int, int]]:
        """``(path, min t, max t, rows)`` of each live file of the journal's final records."""
        adds = pa.table(lake.table(tables.JOURNAL).get_add_actions(flatten=True)).to_pydict()
        return sorted(f for f, part in zip(zip(adds["path"], adds["min.t"], adds["max.t"], adds["num_records"],
                                               strict=True), adds["partition.record"], strict=True) if part == "final")

    def mark() -> str | None:
        return lake.table(tables.JOURNAL).metadata().configuration.get(maintain.TIME_MARK_PROPERTY)

    _partition(spark, pipeline_db, "dkm", 3)
    for until in (1, 2, 3):
        run_microbatch(spark, pipeline_db, run_id=f"to-{until}", until=until, compaction="never")
    assert len(final_files()) == 3  # one per run
    before = journal_rows()
    maintain.run_maintenance(spark, pipeline_db, run_id="m1", retention_hours=1)
    assert journal_rows() == before  # a rearrangement: the same rows
    packed = final_files()
    ranges = sorted((lo, hi) for _, lo, hi, _ in packed)
    assert len(ranges) > 1 and all(hi < lo for (_, hi), (lo, _) in zip(ranges, ranges[1:], strict=False)), ranges
    assert mark() == "3"
    assert lake.table(tables.JOURNAL).metadata().configuration["delta.appendOnly"] == "true"

    # The next run packs only what came after t = 3; the files packed before stay as they were.
    run_microbatch(spark, pipeline_db, run_id="to-4", until=4, compaction="always")
    run_microbatch(spark, pipeline_db, run_id="to-5", compaction="never")
    before = journal_rows()
    maintain.run_maintenance(spark, pipeline_db, run_id="m2", retention_hours=1)
    assert journal_rows() == before
    assert set(packed) <= set(final_files()) and mark() == str(T)
    with pytest.raises(Exception, match="DELTA_CANNOT_MODIFY_APPEND_ONLY"):  # append-only again
        spark.sql("DELETE FROM journal WHERE t = 1")

    # knn_current reads the final records of the files after the snapshot's horizon (t = 4) only.
    assert refresh_views(spark, pipeline_db) == 4
    finals = spark.sql("SELECT t FROM journal WHERE record = 'final'").count()
    recent = sum(rows for _, _, hi, rows in final_files() if hi > 4)
    assert 0 < recent < finals
    query = spark.sql("SELECT sub_id, object_ids FROM knn_current")
    assert {r.sub_id: list(r.object_ids) for r in query.collect()} == \
        {s: r.object_ids.tolist() for s, r in oracle[T].items()}
    assert rows_scanned(query, "journal") == recent
    _assert_views_equal(spark, oracle[T])
    _assert_equal(_state_results(pipeline_db), oracle[T])


def test_repartition_between_timestamps_keeps_results_exact(spark, pipeline_db, workload):
    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.jobs.partition import run_repartition
    from dkmsks.storage.lake import Lake
    from dkmsks.storage.plans import current_plan

    oracle = workload[3]
    _partition(spark, pipeline_db, "dkm", 3)
    run_microbatch(spark, pipeline_db, run_id="before", until=2)
    report = run_repartition(spark, pipeline_db, PartitionConfig(method="sop", workers=4, theta=4), run_id="re")
    assert report.plan_version == 1 and current_plan(Lake.of(pipeline_db)).workers == 4
    _assert_equal(_state_results(pipeline_db), oracle[2])
    # The old plan's final records stay in the journal; the views must read the new plan's rows.
    _assert_views_equal(spark, oracle[2], plan_version=1)
    loads = spark.table("worker_loads").collect()
    assert sorted(r.worker for r in loads) == [0, 1, 2, 3]
    run_microbatch(spark, pipeline_db, run_id="after", compaction="never")
    _assert_equal(_state_results(pipeline_db), oracle[T])
    _assert_views_equal(spark, oracle[T], plan_version=1)
    some = sorted(oracle[T])[::7] + sorted(set(oracle[2]) - set(oracle[T]))[:5]  # live ones and deleted ones
    _assert_views_equal(spark, oracle[T], sub_ids=some, plan_version=1)
    for t in (1, 2, 4):
        _assert_equal(_results_at(pipeline_db, t), oracle[t])


def test_a_crash_before_or_after_the_journal_commit_loses_and_duplicates_nothing(
        spark, pipeline_db, workload, monkeypatch):
    from dkmsks.jobs import microbatch as microbatch_job
    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.storage.export import processed_timestamps
    from dkmsks.storage.lake import Lake

    oracle = workload[3]
    _partition(spark, pipeline_db, "dkm", 3)

    def crash(*args, **kwargs):
        raise RuntimeError("driver killed")

    monkeypatch.setattr(microbatch_job, "commit", crash)  # dies just before its commit point
    with pytest.raises(RuntimeError, match="driver killed"):
        run_microbatch(spark, pipeline_db, run_id="crashing", until=3)
    monkeypatch.undo()
    assert processed_timestamps(Lake.of(pipeline_db)) == [0]

    monkeypatch.setattr(microbatch_job, "record_run_metrics", crash)  # dies just after it
    with pytest.raises(RuntimeError, match="driver killed"):
        run_microbatch(spark, pipeline_db, run_id="crashing-later", until=3)
    monkeypatch.undo()
    assert processed_timestamps(Lake.of(pipeline_db)) == [0, 1, 2, 3]

    report = run_microbatch(spark, pipeline_db, run_id="rest")
    assert report.timestamps == [4, 5] and not report.replayed
    assert processed_timestamps(Lake.of(pipeline_db)) == list(range(T + 1))
    _assert_equal(_state_results(pipeline_db), oracle[T])
    dup = spark.sql("SELECT t, sub_id, change, count(*) AS n FROM result_changes GROUP BY 1, 2, 3 HAVING n > 1")
    assert dup.count() == 0
    per_t = {r.t: r.n for r in spark.sql("SELECT t, count(*) AS n FROM worker_metrics GROUP BY t").collect()}
    assert per_t == {t: 3 for t in range(1, T + 1)}


def test_follow_mode_refuses_too_few_task_slots(spark, pipeline_db, tmp_path):
    from dkmsks.jobs.follow import FollowSession

    _partition(spark, pipeline_db, "dkm", 2)
    with pytest.raises(ValueError, match=r"keeps 2 worker tasks running .* at least 3 task slots, but Spark has 2"):
        FollowSession(spark, pipeline_db, run_id="f", processes=2).start()


def _last_commit(table: Path) -> str:
    """The newest commit file of a Delta table's log."""
    return max((table / "_delta_log").glob("*.json")).read_text()


def test_follow_mode_warm_workers_equal_the_oracle_and_stop_on_foreign_commits(spark, pipeline_db, workload, tmp_path):
    from dkmsks.jobs.follow import FollowSession, StateChanged
    from dkmsks.jobs.partition import run_repartition

    oracle = workload[3]
    # The test session has 2 task slots: one for the long-running worker task, which hosts
    # all three workers of the plan, one for the driver's reads and commits.
    _partition(spark, pipeline_db, "dkm", 3)
    with FollowSession(spark, pipeline_db, run_id="follow", processes=1) as session:
        for t in range(1, 4):
            report = session.step(max_timestamps=1)
            assert report.timestamps == [t]
            _assert_equal(_state_results(pipeline_db), oracle[t])
        assert session.step(until=3).timestamps == []
        run_repartition(spark, pipeline_db, PartitionConfig(method="sop", workers=1, theta=4), run_id="re")
        with pytest.raises(StateChanged):
            session.step()
    # The second session's round (two timestamps) has its changes written by its worker tasks
    # and every file committed at once (dkmsks.storage.journal_files), read back below by Spark.
    with FollowSession(spark, pipeline_db, run_id="follow-2", change_file_objects=0) as session:
        assert session.step().timestamps == [4, 5]
        written = session.stats.task_change_files
    adds = [json.loads(line)["add"] for line in _last_commit(pipeline_db.table_path("journal")).splitlines()
            if '"add"' in line]
    assert written >= 1
    # the tasks' files, and none of changes from the driver: its files are the other kinds
    assert sum(a["partitionValues"]["record"] == "change" for a in adds) == written
    _assert_equal(_state_results(pipeline_db), oracle[T])
    for t in range(T + 1):
        _assert_equal(_results_at(pipeline_db, t), oracle[t])
    assert list(pipeline_db.spool_dir.iterdir()) == []  # spools are removed


@pytest.mark.parametrize(("channel", "routing"), [("flight", True), ("spool", False)])
def test_follow_mode_over_flight_or_broadcast_equals_the_oracle(spark, pipeline_db, workload, channel, routing):
    """The same rounds handed over by Arrow Flight (the network channel of a cluster) with each
    task given only the objects routed to its workers, or through the spool to every task in
    full (the paper's broadcast): the oracle's results either way; routed, fewer objects."""
    from dkmsks.jobs.follow import FollowSession
    from dkmsks.jobs.follow.flight import FlightChannel

    oracle = workload[3]
    _partition(spark, pipeline_db, "dkm", 3)
    with FollowSession(spark, pipeline_db, run_id="follow", processes=1, channel=channel,
                       routing=routing) as session:
        assert isinstance(session.channel, FlightChannel) == (channel == "flight")
        assert session.step(max_timestamps=1).timestamps == [1]
        _assert_equal(_state_results(pipeline_db), oracle[1])
        assert session.step(max_timestamps=2).timestamps == [2, 3]  # deletions, registrations inside
        assert session.step().timestamps == [4, 5]
        stats = session.stats
    sent = sum(SPEC.objects_per_ts for _ in range(T))
    assert (stats.objects_out < sent) if routing else (stats.objects_out == sent)
    assert stats.bytes_out > 0
    for t in range(T + 1):
        _assert_equal(_results_at(pipeline_db, t), oracle[t])


def test_subscriptions_deleted_and_registered_again_elsewhere_at_one_timestamp_stay_live(
        spark, fresh_db, workload, tmp_path):
    """Deleted on one worker and registered again on another at t=2: both workers write a final
    record with t=2 for the id, in whatever order the tasks finish. The state read back by the
    next run, knn_current and the compaction must all take the registration (deletions apply
    first within a timestamp), so deleting the ids again at t=3 is accepted, not quarantined."""
    import gzip

    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.spark.ingest import ingest_events, ingest_objects

    folder = workload[0]
    with gzip.open(folder / "events.tsv.gz", "rt", encoding="utf-8") as fh:
        header, *rows = fh.read().splitlines()
    fields = [r.split("\t") for r in rows]
    initial = [f for f in fields if f[0] == "insert" and f[6] == "0"]
    ever_deleted = {f[1] for f in fields if f[0] == "delete"}
    moving = [f for f in initial if f[1] not in ever_deleted][:12]
    # Each moves to the place of an initial subscription far down the list (another region).
    far = sorted(initial, key=lambda f: float(f[2]))[-12:]
    extra = []
    for i, (f, g) in enumerate(zip(moving, far, strict=True)):
        extra += [f"delete\t{f[1]}\t\t\t\t\t2", "\t".join(["insert", f[1], g[2], g[3], f[4], f[5], "2"])]
        if i % 2 == 0:
            extra.append(f"delete\t{f[1]}\t\t\t\t\t3")
    events_path = tmp_path / "events.tsv"
    events_path.write_text("\n".join([header, *rows, *extra]) + "\n", encoding="utf-8")

    v = Vocabulary()
    objs = read_objects(folder / "objects.tsv.gz", v).objects
    load = read_events(events_path, v)
    assert load.rejections == []
    oracle = {t: oracle_results(objs, load.events, t) for t in range(T + 1)}

    ingest_objects(spark, fresh_db, folder / "objects.tsv.gz", run_id="test")
    assert ingest_events(spark, fresh_db, events_path, run_id="test").rejected == 0
    _partition(spark, fresh_db, "dkm", 20)
    run_microbatch(spark, fresh_db, run_id="to-2", until=2, compaction="never")
    live = spark.sql("SELECT count(*) AS n FROM knn_current").collect()[0].n
    assert live == len(oracle[2])
    moved = [int(f[1]) for f in moving]
    _assert_views_equal(spark, oracle[2])  # the tail holds a delete and an upsert at t=2 for each
    _assert_views_equal(spark, oracle[2], sub_ids=moved)
    run_microbatch(spark, fresh_db, run_id="to-3", until=3, compaction="always")
    assert spark.table("quarantine").count() == 0
    _assert_views_equal(spark, oracle[3], sub_ids=moved)  # compacted: half deleted again at t=3
    run_microbatch(spark, fresh_db, run_id="rest", compaction="never")
    for t in range(T + 1):
        _assert_equal(_results_at(fresh_db, t), oracle[t])
    assert spark.sql("SELECT count(*) AS n FROM knn_current").collect()[0].n == len(oracle[T])


def test_later_jobs_load_the_oinit_statistics_the_partition_job_kept(spark, pipeline_db, workload, monkeypatch,
                                                                      capfd):
    import numpy as np

    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.storage import driver_data

    oracle = workload[3]
    _partition(spark, pipeline_db, "dkm", 3)
    path = pipeline_db.cache_dir / "oinit-stats-t0_0.npz"
    assert path.is_file()
    with np.load(path, allow_pickle=False) as saved:
        assert int(saved["n_objects"]) == SPEC.o_init

    reads = []
    real_read = driver_data.read_objects_between

    def watched(lake, vocab, *, after, upto):
        reads.append((after, upto))
        return real_read(lake, vocab, after=after, upto=upto)

    monkeypatch.setattr(driver_data, "read_objects_between", watched)
    run_microbatch(spark, pipeline_db, run_id="cached", until=2)
    assert reads == [(0, 2)]  # the pending objects only: O_init came from the file
    _assert_equal(_state_results(pipeline_db), oracle[2])

    # A damaged file is rebuilt (never trusted), and the results stay exact.
    path.write_bytes(b"not an npz file")
    reads.clear()
    run_microbatch(spark, pipeline_db, run_id="damaged", until=3)
    assert (None, 0) in reads
    assert "plan cache: ignoring" in capfd.readouterr().err
    _assert_equal(_state_results(pipeline_db), oracle[3])
    with np.load(path, allow_pickle=False) as saved:  # written again, whole
        assert int(saved["n_objects"]) == SPEC.o_init


def test_a_workload_in_projected_metres_equals_the_oracle(spark, fresh_db, tmp_path):
    """docs/design.md §1: coordinates are any finite numbers. A real-data workload moved to EPSG:3857
    metres (issue 15: once refused row by row) is ingested without a rejection, partitioned and
    processed on Spark, and equals the oracle at every timestamp."""
    from conftest import projected_workload
    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.spark.ingest import ingest_files

    spec = WorkloadSpec(o_init=2000, subscriptions=200, timestamps=3, objects_per_ts=100, inserts_per_ts=10,
                        deletes_per_ts=10, k_max=5, seed=15)
    objects_file, events_file = projected_workload(tmp_path / "metres", spec)
    v = Vocabulary()
    objs, evs = read_objects(objects_file, v).objects, read_events(events_file, v).events
    assert float(np.abs(objs.x).max()) > 1e6  # metres

    reports = ingest_files(spark, fresh_db, objects=objects_file, events=events_file, run_id="metres")
    assert [(r.accepted, r.rejected) for r in reports] == [(2300, 0), (260, 0)]
    _partition(spark, fresh_db, "dkm", 3)
    run_microbatch(spark, fresh_db, run_id="metres")
    for t in range(spec.timestamps + 1):
        _assert_equal(_results_at(fresh_db, t), oracle_results(objs, evs, t))
