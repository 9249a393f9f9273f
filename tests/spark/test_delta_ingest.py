"""Spark + Delta: readers agree with the numpy readers; ingestion MERGEs idempotently and
loads nothing from an unusable input; SQL works."""

from __future__ import annotations

import pytest

from bad_inputs import (
    ALL_REJECTED_LINES,
    expected_event_outcomes,
    expected_object_rejections,
    write_events_file,
    write_objects_file,
    write_whole_object_files,
)
from conftest import PLACE_FILE, require_real_data
from dkmsks.core.model import Vocabulary
from dkmsks.io.formats import WGS84, read_events, read_objects
from dkmsks.io.rejections import AllRowsRejected, InputError
from dkmsks.spark.ingest import ingest_events, ingest_files, ingest_objects
from dkmsks.spark.readers import read_events_df, read_objects_df
from dkmsks.spark.sql_files import run_sql

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("bounds", [None, WGS84], ids=["any-finite", "wgs84"])
def test_both_readers_quarantine_the_whole_catalogue_line_by_line(spark, tmp_path, bounds):
    """One rule set: for every line of the catalogue the numpy and the Spark reader give the
    same verdict with the same reason, and both give the reasons written in the catalogue."""
    wgs84 = bounds is not None
    cases = [
        (write_objects_file(tmp_path), read_objects, read_objects_df, expected_object_rejections(wgs84)),
        (write_events_file(tmp_path), read_events, read_events_df,
         {line: reason for line, reason in expected_event_outcomes(wgs84).items() if reason}),
    ]
    for path, read_locally, read_on_spark, expected in cases:
        local = read_locally(path, Vocabulary(), bounds=bounds)
        accepted, rejected = read_on_spark(spark, path, bounds=bounds)
        local_rows = [(r.line, r.reason) for r in local.rejections]
        spark_rows = sorted((r.line, r.reason) for r in rejected.collect())
        for local_row, spark_row in zip(local_rows, spark_rows, strict=False):
            assert local_row == spark_row, (path.name, local_row, spark_row)
        assert len(local_rows) == len(spark_rows), (path.name, local_rows[len(spark_rows):],
                                                    spark_rows[len(local_rows):])
        assert [line for line, _ in local_rows] == sorted(expected), path.name
        for line, reason in local_rows:
            assert expected[line] in reason, (path.name, line, reason)
        assert sorted(r.line for r in accepted.collect()) == sorted(local.lines.tolist()), path.name


def test_both_paths_treat_unusable_and_empty_files_alike(spark, tmp_path, fresh_db):
    """Every whole-file case through the numpy reader and the Spark ingestion: the same one-line
    error (the Spark one adds where the rejected rows went), or the same rows."""
    for name, (path, outcome) in write_whole_object_files(tmp_path).items():
        if outcome.startswith("error: "):
            with pytest.raises(InputError) as local:
                read_objects(path, Vocabulary())
            with pytest.raises(InputError) as on_spark:
                ingest_files(spark, fresh_db, objects=path, run_id="whole")
            assert str(local.value).startswith(f"{path}: ") and outcome[7:] in str(local.value), name
            assert str(on_spark.value).startswith(str(local.value)) and "\n" not in str(on_spark.value), name
        else:
            load = read_objects(path, Vocabulary())
            (report,) = ingest_files(spark, fresh_db, objects=path, run_id="whole")
            assert (report.accepted, report.rejected) == (len(load.objects), 0) == (int(outcome[6:]), 0), name


def test_an_unusable_file_loads_nothing_from_any_file_of_the_ingestion(spark, tmp_path, fresh_db):
    from delta.tables import DeltaTable

    whole = write_whole_object_files(tmp_path)
    events = write_events_file(tmp_path)
    landing = ("objects", "subscription_events", "quarantine")
    versions = {t: DeltaTable.forName(spark, t).history(1).collect()[0].version for t in landing}

    truncated = whole["truncated.tsv.gz"][0]
    with pytest.raises(InputError) as caught:
        ingest_files(spark, fresh_db, objects=truncated, events=events, run_id="r1")
    assert str(caught.value) == (f"{truncated}: the gzip data ends early, the file is truncated (an interrupted "
                                 "copy or download?); nothing was loaded: copy or compress the file again")
    assert {t: DeltaTable.forName(spark, t).history(1).collect()[0].version for t in landing} == versions

    # Every row rejected: the quarantine rows of both files are written, no accepted row of either.
    all_rejected = whole["all-rejected.tsv"][0]
    with pytest.raises(AllRowsRejected) as caught:
        ingest_files(spark, fresh_db, objects=all_rejected, events=events, run_id="r2")
    assert str(caught.value) == (
        f"{all_rejected}: all 3 row(s) were rejected, nothing was loaded; commonest reasons: 2 like line 2: "
        "x 'abc' is not a number; 1 like line 4: keywords are empty; the rejected rows are in the quarantine table")
    assert spark.table("objects").count() == spark.table("subscription_events").count() == 0
    quarantined = {(r.target, r.source, r.line): r.reason for r in spark.table("quarantine").collect()}
    assert {k[2]: v for k, v in quarantined.items() if k[1] == "all-rejected.tsv"} == ALL_REJECTED_LINES
    bad_events = {line for line, reason in expected_event_outcomes().items() if reason}
    assert {k[2] for k in quarantined if k[1] == "events.tsv"} == bad_events

    # Fixed input: the good rows load; lines judged before are not quarantined twice.
    reports = ingest_files(spark, fresh_db, objects=write_objects_file(tmp_path), events=events, run_id="r3")
    assert [(r.table, r.accepted) for r in reports] == [("objects", 6), ("subscription_events", 8)]
    assert reports[1].rejected == 0


def test_spark_reader_equals_numpy_reader_on_real_data(spark, tmp_path):
    require_real_data()
    import gzip
    import itertools

    sample = tmp_path / "sample.tsv.gz"
    with gzip.open(PLACE_FILE, "rt") as src, gzip.open(sample, "wt") as dst:
        dst.writelines(itertools.islice(src, 3001))
    vocab = Vocabulary()
    ref = read_objects(sample, vocab).objects
    accepted, rejected = read_objects_df(spark, sample)
    rows = sorted(accepted.collect(), key=lambda r: r.line)
    assert rejected.count() == 0
    assert [r.id for r in rows] == ref.ids.tolist()
    assert [r.x for r in rows] == ref.x.tolist() and [r.y for r in rows] == ref.y.tolist()
    assert [sorted(vocab.id_of(w) for w in r.keywords) for r in rows] == [ref.keywords.row(i).tolist()
                                                                           for i in range(len(ref))]


def test_ingest_merges_into_delta_idempotently_and_sql_reads_it(spark, tmp_path, fresh_db):
    from delta.tables import DeltaTable

    objects_file = write_objects_file(tmp_path)
    events_file = write_events_file(tmp_path)
    first = ingest_objects(spark, fresh_db, objects_file, run_id="r1")
    ingest_events(spark, fresh_db, events_file, run_id="r1")
    assert (first.accepted, first.rejected) == (6, len(expected_object_rejections()))
    versions = {t: DeltaTable.forName(spark, t).history(1).collect()[0].version
                for t in ("objects", "subscription_events", "quarantine")}
    counts = {t: spark.table(t).count() for t in versions}

    ingest_objects(spark, fresh_db, objects_file, run_id="r2")  # a replay of the same files
    ingest_events(spark, fresh_db, events_file, run_id="r2")
    assert {t: spark.table(t).count() for t in versions} == counts
    # An insert-only MERGE that matches everything writes no data files.
    for t in versions:
        last = DeltaTable.forName(spark, t).history(1).collect()[0]
        if last.version != versions[t]:
            assert int(last.operationMetrics.get("numTargetRowsInserted", "0")) == 0

    top = run_sql(spark, "queries/keyword_summary.sql", table="objects", as_of=10, top=2).collect()
    assert [(r.keyword, r.objects) for r in top] == [("cafe", 5), ("bar", 2)]
    assert run_sql(spark, "checks/objects_unique_ids.sql", table="objects").count() == 0
    reasons = spark.sql("SELECT reason FROM quarantine WHERE target = 'subscription_events'").collect()
    assert any("delete of subscription 999" in r.reason for r in reasons)


def test_unique_ids_check_finds_corruption(spark, fresh_db):
    spark.sql("INSERT INTO objects VALUES (1, 0.0, 0.0, array('a'), 0, 's', 2), (1, 1.0, 1.0, array('b'), 0, 's', 3)")
    assert [r.id for r in run_sql(spark, "checks/objects_unique_ids.sql", table="objects").collect()] == [1]
