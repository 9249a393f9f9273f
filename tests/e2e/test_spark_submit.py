"""The spark_apps run through spark-submit, as Airflow submits them, and give exact results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, real_objects
from dkmsks.core.model import Vocabulary
from dkmsks.core.oracle import oracle_results
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.io.formats import read_events, read_objects
from dkmsks.io.writers import read_results, write_events, write_objects, write_results

pytestmark = pytest.mark.e2e

SPEC = WorkloadSpec(o_init=2000, subscriptions=200, timestamps=3, objects_per_ts=150,
                    inserts_per_ts=15, deletes_per_ts=15, k_max=5, seed=5)


def submit(app: str, warehouse: Path, *args: str) -> str:
    from dkmsks.spark.session import spark_submit_conf_args
    from dkmsks.warehouse import Warehouse

    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    spark_submit = Path(sys.executable).with_name("spark-submit")
    cmd = [str(spark_submit), *spark_submit_conf_args(Warehouse(warehouse)), str(REPO / "spark_apps" / app),
           "--warehouse", str(warehouse), *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{app} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_ingest_partition_microbatch_through_spark_submit_equal_the_oracle(tmp_path):
    source, vocab = real_objects(SPEC.objects_needed)
    objects, events = generate_workload(source, SPEC)
    write_objects(tmp_path / "objects.tsv.gz", objects, vocab)
    write_events(tmp_path / "events.tsv.gz", events, vocab)
    warehouse = tmp_path / "warehouse"

    out = submit("ingest.py", warehouse, "--objects", str(tmp_path / "objects.tsv.gz"),
                 "--events", str(tmp_path / "events.tsv.gz"), "--run-id", "e2e")
    assert "objects: 2,450 accepted, 0 quarantined" in out
    out = submit("partition.py", warehouse, "--method", "sop", "--workers", "3", "--theta", "4", "--run-id", "e2e")
    assert "plan 0: sop, m=3" in out
    out = submit("microbatch.py", warehouse, "--run-id", "e2e")
    assert "processed t=1..3" in out

    # `dkm export` in a process of its own, as a user would run it (delta-rs: no JVM).
    dkm = Path(sys.executable).with_name("dkm")
    done = subprocess.run([str(dkm), "export", "--warehouse", str(warehouse), "--out", str(tmp_path / "spark.jsonl")],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    assert done.returncode == 0, done.stderr[-3000:]
    v = Vocabulary()
    expected = oracle_results(read_objects(tmp_path / "objects.tsv.gz", v).objects,
                              read_events(tmp_path / "events.tsv.gz", v).events, SPEC.timestamps)
    write_results(tmp_path / "oracle.jsonl", expected, SPEC.timestamps)
    assert read_results(tmp_path / "spark.jsonl") == read_results(tmp_path / "oracle.jsonl")
    assert (tmp_path / "spark.jsonl").read_bytes() == (tmp_path / "oracle.jsonl").read_bytes()
