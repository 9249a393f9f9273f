"""Spark + Delta: readers agree with the numpy readers; ingestion MERGEs idempotently; SQL works."""

from __future__ import annotations

import pytest

from bad_inputs import expected_event_outcomes, expected_object_rejections, write_events_file, write_objects_file
from conftest import PLACE_FILE, require_real_data
from dkmsks.core.model import Vocabulary
from dkmsks.io.formats import read_objects
from dkmsks.spark.ingest import ensure_landing_tables, ingest_events, ingest_objects
from dkmsks.spark.readers import read_events_df, read_objects_df
from dkmsks.spark.sql_files import run_sql

pytestmark = pytest.mark.spark


def test_spark_object_reader_rejects_the_same_rows_for_the_same_reasons(spark, tmp_path):
    accepted, rejected = read_objects_df(spark, write_objects_file(tmp_path))
    assert sorted(r.id for r in accepted.collect()) == [1, 2, 3, 4]
    got = {r.line: r.reason for r in rejected.collect()}
    expected = expected_object_rejections()
    assert sorted(got) == sorted(expected)
    for line, reason in expected.items():
        assert reason in got[line], (line, got[line])


def test_spark_event_reader_replays_liveness_like_the_numpy_reader(spark, tmp_path):
    accepted, rejected = read_events_df(spark, write_events_file(tmp_path))
    outcomes = expected_event_outcomes()
    got = {r.line: r.reason for r in rejected.collect()}
    assert sorted(got) == sorted(line for line, reason in outcomes.items() if reason)
    for line, reason in outcomes.items():
        if reason:
            assert reason in got[line], (line, got[line])
    assert sorted(r.line for r in accepted.collect()) == sorted(
        line for line, reason in outcomes.items() if reason is None
    )


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
    assert [sorted(vocab.id_of(w) for w in r.keywords) for r in rows] == ref.keywords.to_lists()


def test_ingest_merges_into_delta_idempotently_and_sql_reads_it(spark, tmp_path, fresh_db):
    from delta.tables import DeltaTable

    ensure_landing_tables(spark)
    ensure_landing_tables(spark)  # idempotent
    objects_file = write_objects_file(tmp_path)
    events_file = write_events_file(tmp_path)
    first = ingest_objects(spark, objects_file, run_id="r1")
    ingest_events(spark, events_file, run_id="r1")
    assert (first.accepted, first.rejected) == (4, len(expected_object_rejections()))
    versions = {t: DeltaTable.forName(spark, t).history(1).collect()[0].version
                for t in ("objects", "subscription_events", "quarantine")}
    counts = {t: spark.table(t).count() for t in versions}

    ingest_objects(spark, objects_file, run_id="r2")  # a replay of the same files
    ingest_events(spark, events_file, run_id="r2")
    assert {t: spark.table(t).count() for t in versions} == counts
    # An insert-only MERGE that matches everything writes no data files.
    for t in versions:
        last = DeltaTable.forName(spark, t).history(1).collect()[0]
        if last.version != versions[t]:
            assert int(last.operationMetrics.get("numTargetRowsInserted", "0")) == 0

    top = run_sql(spark, "queries/keyword_summary.sql", table="objects", as_of=10, top=2).collect()
    assert [(r.keyword, r.objects) for r in top] == [("cafe", 3), ("bar", 2)]
    assert run_sql(spark, "checks/objects_unique_ids.sql", table="objects").count() == 0
    reasons = spark.sql("SELECT reason FROM quarantine WHERE target = 'subscription_events'").collect()
    assert any("delete of subscription 999" in r.reason for r in reasons)


def test_unique_ids_check_finds_corruption(spark, fresh_db):
    ensure_landing_tables(spark)
    spark.sql("INSERT INTO objects VALUES (1, 0.0, 0.0, array('a'), 0, 's', 2), (1, 1.0, 1.0, array('b'), 0, 's', 3)")
    assert [r.id for r in run_sql(spark, "checks/objects_unique_ids.sql", table="objects").collect()] == [1]
