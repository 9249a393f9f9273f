"""Airflow for real: the DAGs drive ingestion -> partitioning -> micro-batches, exactly.

Uses the session's Airflow 3 (``airflow`` fixture in ``conftest.py``: ``scripts/airflow.sh``
starts api-server, scheduler and dag-processor on 127.0.0.1 with authentication on, in a fresh
``AIRFLOW_HOME``, and stops every process by PID at the end) and talks to its REST API with a
token.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import real_objects
from dkmsks.core.model import Vocabulary
from dkmsks.core.oracle import oracle_results
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.io.formats import read_events, read_objects, read_results, write_events, write_objects, write_results

from .conftest import Api

pytestmark = pytest.mark.e2e

SPEC = WorkloadSpec(o_init=2000, subscriptions=150, timestamps=4, objects_per_ts=150,
                    inserts_per_ts=10, deletes_per_ts=10, k_max=5, seed=9)


def test_dags_ingest_partition_and_two_microbatches_equal_the_oracle(airflow, tmp_path):
    warehouse = airflow.warehouse
    source, vocab = real_objects(SPEC.objects_needed)
    objects, events = generate_workload(source, SPEC)
    objects_file, events_file = tmp_path / "objects.tsv.gz", tmp_path / "events.tsv.gz"
    write_objects(objects_file, objects, vocab)
    write_events(events_file, events, vocab)
    # Publishers first deliver O_init, the initial subscriptions and two timestamps.
    first = tmp_path / "first"
    first.mkdir()
    keep = objects.t <= 2
    write_objects(first / "objects.tsv.gz", objects.take(keep.nonzero()[0]), vocab)
    write_events(first / "events.tsv.gz", events.take((events.t <= 2).nonzero()[0]), vocab)

    assert Api(airflow.url).call("GET", "/api/v2/dags")[0] == 401  # authentication stays on
    api = airflow.api()

    status, run = api.call("POST", "/api/v2/dags/dkmsks_ingest/dagRuns", {
        "logical_date": None,
        "conf": {"objects": str(first / "objects.tsv.gz"), "events": str(first / "events.tsv.gz"),
                 "warehouse": str(warehouse)},
    })
    assert status == 200, run
    api.wait_run("dkmsks_ingest", run["dag_run_id"])
    # The landing asset triggers partitioning (default params), whose plan asset triggers a
    # micro-batch that processes t = 1, 2.
    api.wait_run("dkmsks_partition", run_type="asset_triggered")
    api.wait_run("dkmsks_microbatch", run_type="asset_triggered")

    # Publish the next timestamps, then a second micro-batch run processes them.
    dkm = str(Path(sys.executable).with_name("dkm"))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run([dkm, "publish", "--objects", str(objects_file), "--events", str(events_file),
                           "--warehouse", str(warehouse), "--timestamps", "2"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    status, run = api.call("POST", "/api/v2/dags/dkmsks_microbatch/dagRuns",
                           {"logical_date": None, "conf": {"warehouse": str(warehouse)}})
    assert status == 200, run
    api.wait_run("dkmsks_microbatch", run["dag_run_id"])

    for t in (2, SPEC.timestamps):
        out = tmp_path / f"airflow-{t}.jsonl"
        done = subprocess.run([dkm, "export", "--warehouse", str(warehouse), "--as-of", str(t), "--out", str(out)],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        v = Vocabulary()
        expected = oracle_results(read_objects(objects_file, v).objects, read_events(events_file, v).events, t)
        write_results(tmp_path / f"oracle-{t}.jsonl", expected, t)
        assert read_results(out) == read_results(tmp_path / f"oracle-{t}.jsonl")
