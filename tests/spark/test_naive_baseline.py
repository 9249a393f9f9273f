"""The naive Spark baseline of ``dkm bench pipeline`` computes exactly the oracle's results.

The benchmark compares the pipeline with this baseline; the comparison is fair only if both
compute the same thing (docs/design.md §1), so the baseline is checked here at every timestamp.
"""

from __future__ import annotations

import pytest

from conftest import real_objects
from dkmsks.bench import naive_spark
from dkmsks.core.model import Vocabulary, describe_difference, results_equal
from dkmsks.core.oracle import oracle_results
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.io.formats import read_events, read_objects
from dkmsks.io.writers import write_events, write_objects

pytestmark = pytest.mark.spark

SPEC = WorkloadSpec(o_init=3000, subscriptions=300, timestamps=2, objects_per_ts=200,
                    inserts_per_ts=30, deletes_per_ts=30, k_max=6, seed=5)


def test_naive_spark_equals_the_oracle_at_every_timestamp(spark, fresh_db, tmp_path):
    from dkmsks.spark.ingest import ingest_events, ingest_objects

    source, vocab = real_objects(SPEC.objects_needed)
    objects, events = generate_workload(source, SPEC)
    write_objects(tmp_path / "objects.tsv.gz", objects, vocab)
    write_events(tmp_path / "events.tsv.gz", events, vocab)
    v = Vocabulary()
    objs = read_objects(tmp_path / "objects.tsv.gz", v).objects
    evs = read_events(tmp_path / "events.tsv.gz", v).events

    ingest_objects(spark, fresh_db, tmp_path / "objects.tsv.gz", run_id="test")
    ingest_events(spark, fresh_db, tmp_path / "events.tsv.gz", run_id="test")

    naive_spark.naive_initial(spark)
    got, expected = naive_spark.naive_results(spark), oracle_results(objs, evs, 0)
    assert results_equal(got, expected), describe_difference(got, expected)
    for t in range(1, SPEC.timestamps + 1):
        step = naive_spark.naive_step(spark, t)
        assert step.objects == SPEC.objects_per_ts and step.candidate_pairs > 0
        got, expected = naive_spark.naive_results(spark), oracle_results(objs, evs, t)
        assert results_equal(got, expected), f"t={t}: " + describe_difference(got, expected)
