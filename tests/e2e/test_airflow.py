"""Airflow for real: the DAGs drive ingestion -> partitioning -> micro-batches, exactly.

Uses the session's Airflow 3 (``airflow`` fixture in ``conftest.py``: ``scripts/airflow.sh``
starts api-server, scheduler and dag-processor on 127.0.0.1 with authentication on, in a fresh
``AIRFLOW_HOME``, and stops every process by PID at the end) and talks to its REST API with a
token: runs, task states and logs, asset events.
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
from dkmsks.io.formats import read_events, read_objects
from dkmsks.io.writers import read_results, write_events, write_objects, write_results

from .conftest import Api

pytestmark = pytest.mark.e2e

SPEC = WorkloadSpec(o_init=2000, subscriptions=150, timestamps=4, objects_per_ts=150,
                    inserts_per_ts=10, deletes_per_ts=10, k_max=5, seed=9)


@pytest.fixture(params=["folder", "s3"])
def pipeline_warehouse(request, tmp_path) -> str:
    """The warehouse a test's DAG runs work on: a folder, or a prefix of the session's object
    store (whose settings Airflow's processes have, the ``airflow`` fixture)."""
    return str(tmp_path / "warehouse") if request.param == "folder" else request.getfixturevalue("s3_warehouse")


def test_dags_ingest_partition_and_two_microbatches_equal_the_oracle(airflow, pipeline_warehouse, objectstore,
                                                                     tmp_path):
    """The pipeline's own warehouse (not the DAGs' default) travels with the asset events, a
    second ingestion does not re-partition, and the jobs' drivers get the 4g heap; on a folder
    and on object storage (there spark-submit gets the S3 jars, the jobs' JVMs the store's
    settings from Airflow's environment, and no task log shows its secret)."""
    warehouse = pipeline_warehouse
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

    ingest = trigger(api, "dkmsks_ingest", objects=str(first / "objects.tsv.gz"),
                     events=str(first / "events.tsv.gz"), warehouse=warehouse)
    api.wait_run("dkmsks_ingest", ingest["dag_run_id"])
    # The landing asset triggers partitioning (default params), whose plan asset triggers a
    # micro-batch that processes t = 1, 2: both on the warehouse named in the asset events.
    partition = api.wait_run("dkmsks_partition", run_type="asset_triggered", after=ingest["queued_at"])
    assert api.task_states("dkmsks_partition", partition["dag_run_id"]) == {"check_partition": "success",
                                                                           "partition": "success"}
    api.wait_run("dkmsks_microbatch", run_type="asset_triggered", after=partition["queued_at"])
    for dag_id in ("dkmsks_ingest", "dkmsks_partition", "dkmsks_microbatch"):
        assert {"warehouse": warehouse} in [e["extra"] for e in api.asset_events(dag_id)], dag_id
    assert not (airflow.warehouse / "tables").exists()  # the default warehouse was never touched
    # The driver's JVM got the heap the README states (Spark's default is 1 GiB).
    log = api.task_log("dkmsks_partition", partition["dag_run_id"], "partition")
    launch = [line for line in log.splitlines() if "Spark Command:" in line]
    assert launch and "-Xmx4g" in launch[0].split(), log[-3000:]

    # Publish the next timestamps through the ingest DAG (the whole files: landing is
    # insert-only). Its landing event triggers partitioning again, which the Spark-free check
    # skips: no Spark job, no dkmsks://plan event, no micro-batch.
    ingest = trigger(api, "dkmsks_ingest", objects=str(objects_file), events=str(events_file),
                     warehouse=warehouse)
    api.wait_run("dkmsks_ingest", ingest["dag_run_id"])
    again = api.wait_run("dkmsks_partition", run_type="asset_triggered", after=ingest["queued_at"])
    assert api.task_states("dkmsks_partition", again["dag_run_id"]) == {"check_partition": "success",
                                                                       "partition": "skipped"}
    assert "the initial partitioning of " + warehouse + " is done" in \
        api.task_log("dkmsks_partition", again["dag_run_id"], "check_partition")
    assert [e["extra"] for e in api.asset_events("dkmsks_partition")].count({"warehouse": warehouse}) == 1
    # A manual micro-batch on the pipeline's warehouse (the Param) processes t = 3, 4.
    run = trigger(api, "dkmsks_microbatch", warehouse=warehouse)
    api.wait_run("dkmsks_microbatch", run["dag_run_id"])

    dkm = str(Path(sys.executable).with_name("dkm"))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    for t in (2, SPEC.timestamps):
        out = tmp_path / f"airflow-{t}.jsonl"
        done = subprocess.run([dkm, "export", "--warehouse", warehouse, "--as-of", str(t), "--out", str(out)],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        v = Vocabulary()
        expected = oracle_results(read_objects(objects_file, v).objects, read_events(events_file, v).events, t)
        write_results(tmp_path / f"oracle-{t}.jsonl", expected, t)
        assert read_results(out) == read_results(tmp_path / f"oracle-{t}.jsonl")
    if warehouse.startswith("s3://"):
        # The jobs' S3 jars came from spark-submit's --jars; the store's secret reached no log.
        log = api.task_log("dkmsks_microbatch", run["dag_run_id"], "microbatch")
        assert "hadoop-aws" in log and "dkmsks-logstore" in log, log[-3000:]
        secret = objectstore["AWS_SECRET_ACCESS_KEY"]
        leaked = [str(p) for p in airflow.home.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
        assert not leaked, f"the object store's secret is in {leaked}"


def trigger(api: Api, dag_id: str, **conf) -> dict:
    """A manual run of ``dag_id`` with ``conf`` as its Params."""
    status, run = api.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
    assert status == 200, run
    return run


def test_schedules_are_the_environments(airflow):
    """The schedules are the AIRFLOW_VAR_DKMSKS_*_SCHEDULE environment variables of the
    processes (conftest.py sets both), as the README says."""
    api = airflow.api()
    for dag_id, cron in (("dkmsks_microbatch", "0 0 29 2 *"), ("dkmsks_repartition", "0 0 1 1 *")):
        status, dag = api.call("GET", f"/api/v2/dags/{dag_id}")
        assert status == 200, dag
        assert cron in dag["timetable_summary"], dag["timetable_summary"]
