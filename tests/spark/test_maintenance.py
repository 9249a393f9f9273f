"""Delta maintenance on a small live pipeline: small files are compacted, old ones vacuumed, and
every ``--as-of`` within the horizon still equals the oracle; one beyond it is refused clearly.

The landing tables are filled in three publishes, and the pipeline runs three micro-batches
with compactions after t = 2 and 4, so every table has small files and ``knn_state`` has three
contents (exact at 0, 2 and 4) for ``--as-of`` to choose from.
"""

from __future__ import annotations

import json

import pytest

from conftest import real_objects
from dkmsks.core.config import PartitionConfig
from dkmsks.core.model import Vocabulary, describe_difference, results_equal
from dkmsks.core.oracle import oracle_results
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.io.formats import read_events, read_objects
from dkmsks.io.writers import write_events, write_objects

pytestmark = pytest.mark.spark

SPEC = WorkloadSpec(o_init=2000, subscriptions=200, timestamps=5, objects_per_ts=150,
                    inserts_per_ts=15, deletes_per_ts=15, k_max=5, seed=15)
T = SPEC.timestamps


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    source, vocab = real_objects(SPEC.objects_needed)
    objects, events = generate_workload(source, SPEC)
    folder = tmp_path_factory.mktemp("maintenance")
    write_objects(folder / "objects.tsv.gz", objects, vocab)
    write_events(folder / "events.tsv.gz", events, vocab)
    v = Vocabulary()
    objs = read_objects(folder / "objects.tsv.gz", v).objects
    evs = read_events(folder / "events.tsv.gz", v).events
    return folder, {t: oracle_results(objs, evs, t) for t in range(T + 1)}


def _assert_exact(warehouse, t, expected):
    from dkmsks.storage.export import results_as_of
    from dkmsks.storage.lake import Lake

    got = results_as_of(Lake.of(warehouse), t)[1]
    assert results_equal(got, expected), describe_difference(got, expected)


def _versions(lake):
    from dkmsks.storage import tables

    return {name: lake.version(name) for name in tables.ALL_TABLES}


def test_maintenance_compacts_vacuums_and_keeps_every_promised_as_of_exact(spark, fresh_db, workload):
    from dkmsks.jobs.maintain import run_maintenance
    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.jobs.partition import run_partition
    from dkmsks.spark.ingest import ingest_events, ingest_objects
    from dkmsks.storage import tables
    from dkmsks.storage.export import results_as_of, state_checkpoints
    from dkmsks.storage.lake import Lake, where

    folder, oracle = workload
    for after, upto in [(None, 0), (0, 2), (2, T)]:
        ingest_objects(spark, fresh_db, folder / "objects.tsv.gz", run_id=f"publish-{upto}", after=after, upto=upto)
        ingest_events(spark, fresh_db, folder / "events.tsv.gz", run_id=f"publish-{upto}", after=after, upto=upto)
    run_partition(spark, fresh_db, PartitionConfig(method="dkm", workers=3, gamma1=40, theta=4, grid=256),
                  run_id="test")
    for until, compaction in [(2, "always"), (4, "always"), (T, "never")]:
        run_microbatch(spark, fresh_db, run_id=f"to-{until}", until=until, compaction=compaction)
    lake = Lake.of(fresh_db)
    assert sorted({through for through, _ in state_checkpoints(lake)}) == [0, 2, 4]

    # A horizon of one hour: every timestamp of this test was processed within it.
    first = run_maintenance(spark, fresh_db, run_id="m_1h", retention_hours=1)
    report = {r.table: r for r in first.tables}
    print("\n".join(first.lines()))
    small = (tables.OBJECTS, tables.EVENTS, tables.STATE, tables.JOURNAL, tables.RUN_METRICS)
    for name in small:
        assert report[name].after.live < report[name].before.live, report[name]
    assert sum(r.vacuumed_files for r in first.tables) == 0  # nothing was removed an hour ago
    for name in tables.ALL_TABLES:
        config = lake.table(name).metadata().configuration
        assert config["delta.logRetentionDuration"] == config["delta.deletedFileRetentionDuration"] \
            == "interval 1 hours", name
    for t in range(T + 1):
        _assert_exact(fresh_db, t, oracle[t])
    metrics = lake.read(tables.RUN_METRICS, columns=["phase"], predicate=where(job__eq="maintain", run_id__eq="m_1h"))
    assert {f"{name}: optimize" for name in small} <= set(metrics.column("phase").to_pylist())
    recorded = json.loads(lake.table(tables.RUN_METRICS).history(1)[0]["userMetadata"])
    assert recorded["retention_hours"] == 1 and len(recorded["tables"]) == len(tables.ALL_TABLES)

    # A horizon of zero: VACUUM keeps only what the current versions reference. The results at
    # t >= 4 are rebuilt from the current knn_state; earlier ones needed vacuumed versions.
    second = run_maintenance(spark, fresh_db, run_id="m_0h", retention_hours=0)
    print("\n".join(second.lines()))
    assert second.warnings and "below Delta's default safety of 168 h" in second.warnings[0]
    assert sum(r.vacuumed_bytes for r in second.tables) > 0
    for r in second.tables:
        assert r.after.on_disk == r.after.live, r
    for t in (4, 5):
        _assert_exact(fresh_db, t, oracle[t])
    for t in range(4):
        with pytest.raises(ValueError, match=rf"^t={t} is beyond the as-of horizon: .* were removed by VACUUM\. "
                                             r"knn_state keeps removed files 'interval 0 hours', log 'interval 0 "
                                             r"hours'; the oldest timestamp still available is t=4\. "):
            results_as_of(lake, t)

    # Nothing left to do: a third run commits nothing to the tables it maintains (run_metrics
    # excepted: each run appends its record there, the next one compacts it).
    versions = _versions(lake)
    third = run_maintenance(spark, fresh_db, run_id="m_again", retention_hours=0)
    assert [r.table for r in third.tables if r.vacuumed] == [tables.RUN_METRICS]
    assert {k: v for k, v in _versions(lake).items() if k != tables.RUN_METRICS} == \
        {k: v for k, v in versions.items() if k != tables.RUN_METRICS}

    # Delta's log cleanup (at a checkpoint) drops the entries of the vacuumed versions; the
    # maintenance commits still name the timestamp of the current content.
    state = lake.table(tables.STATE)
    state.create_checkpoint()
    state.cleanup_metadata()
    assert min(c["version"] for c in lake.table(tables.STATE).history()) == lake.version(tables.STATE)
    _assert_exact(fresh_db, 5, oracle[5])
    with pytest.raises(ValueError, match=r"^t=2 is beyond the as-of horizon: no knn_state version exact at or "
                                         r"before t=2 is left in its Delta log .* oldest timestamp still available "
                                         r"is t=4\. To reach further back, raise the horizon"):
        results_as_of(lake, 2)


def test_maintenance_of_a_warehouse_without_tables_creates_nothing(spark, tmp_path):
    """The maintenance DAG's scheduled run on its default warehouse before anything was
    published there: a note, and the folder stays empty (no run_metrics, no lock file)."""
    from dkmsks.jobs.maintain import run_maintenance
    from dkmsks.warehouse import Warehouse

    warehouse = Warehouse.at(tmp_path / "empty")
    report = run_maintenance(spark, warehouse, run_id="m_empty", retention_hours=1)
    assert report.tables == []
    assert report.warnings[-1] == f"{warehouse.tables_dir} holds no table yet: nothing to maintain"
    assert not (tmp_path / "empty").exists()


def test_vacuum_lists_a_table_in_a_few_tasks_not_ten_thousand(spark, tmp_path):
    """Delta's VACUUM lists the table's folder in ``parallelPartitionDiscovery.parallelism``
    tasks whatever the folder holds; at Spark's default of 10,000 a VACUUM of a three-file
    table took 56 s on two cores (each maintenance run vacuums every table). The session's
    setting keeps it to a handful of tasks."""
    from delta.tables import DeltaTable

    path = str(tmp_path / "small")
    for _ in range(3):
        spark.range(10).write.format("delta").mode("append").save(path)
    tracker, group = spark.sparkContext.statusTracker(), "vacuum-task-count"
    spark.sparkContext.setJobGroup(group, "the vacuum whose tasks are counted")
    try:
        DeltaTable.forPath(spark, path).vacuum()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    stages = [s for job in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(job).stageIds]
    tasks = [info.numTasks for info in map(tracker.getStageInfo, stages) if info is not None]
    # At the default the listing stage alone has 10,000 tasks; the other stages read the log.
    assert tasks and max(tasks) <= 16 and sum(tasks) < 1000, f"VACUUM ran stages of {sorted(tasks)} tasks"
