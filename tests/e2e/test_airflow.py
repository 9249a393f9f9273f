"""Airflow for real: the DAGs drive ingestion -> partitioning -> micro-batches, exactly.

Starts Airflow 3 with ``scripts/airflow.sh`` (api-server, scheduler, dag-processor on
127.0.0.1, authentication on) in a fresh ``AIRFLOW_HOME``, talks to its REST API with a
token, and stops every process by PID at the end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, real_objects
from dkmsks.core.model import Vocabulary
from dkmsks.core.oracle import oracle_results
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.io.formats import read_events, read_objects, read_results, write_events, write_objects, write_results

pytestmark = pytest.mark.e2e

SPEC = WorkloadSpec(o_init=2000, subscriptions=150, timestamps=4, objects_per_ts=150,
                    inserts_per_ts=10, deletes_per_ts=10, k_max=5, seed=9)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    def __init__(self, base: str, token: str | None = None) -> None:
        self.base, self.token = base, token

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        req = urllib.request.Request(self.base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, {}

    def wait_run(self, dag_id: str, run_id: str | None = None, *, run_type: str | None = None,
                 timeout: float = 600) -> dict:
        """Wait for a run (by id, or the newest of a type) to finish; fail on anything but success."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, runs = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after")
            for run in runs.get("dag_runs", []):
                if (run_id is None or run["dag_run_id"] == run_id) and run_type in (None, run["run_type"]):
                    if run["state"] == "success":
                        return run
                    if run["state"] == "failed":
                        raise AssertionError(f"{dag_id} run {run['dag_run_id']} failed")
            time.sleep(3)
        raise AssertionError(f"{dag_id} did not finish within {timeout:.0f} s")


@pytest.fixture
def airflow(tmp_path):
    home = tmp_path / "airflow"
    port = free_port()
    env = dict(os.environ, AIRFLOW_HOME=str(home), DKMSKS_AIRFLOW_PORT=str(port),
               DKMSKS_WAREHOUSE=str(tmp_path / "warehouse"),
               # the schedules would only add no-op runs during the test
               AIRFLOW_VAR_DKMSKS_MICROBATCH_SCHEDULE="0 0 1 1 *",
               AIRFLOW_VAR_DKMSKS_REPARTITION_SCHEDULE="0 0 1 1 *")
    script = str(REPO / "scripts" / "airflow.sh")
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=300)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield home, port, tmp_path / "warehouse"
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=300)
        pids = home / "pids"
        assert not pids.exists() or not list(pids.iterdir()), "a process was left running"


def test_dags_ingest_partition_and_two_microbatches_equal_the_oracle(airflow, tmp_path):
    home, port, warehouse = airflow
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

    api = Api(f"http://127.0.0.1:{port}")
    assert api.call("GET", "/api/v2/dags")[0] == 401  # authentication stays on
    password = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
    req = urllib.request.Request(f"http://127.0.0.1:{port}/auth/token", method="POST",
                                 data=json.dumps({"username": "admin", "password": password}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        api.token = json.loads(r.read())["access_token"]

    deadline = time.monotonic() + 120
    while api.call("GET", "/api/v2/dags/dkmsks_ingest")[0] != 200:
        assert time.monotonic() < deadline, "the dag-processor did not register the DAGs"
        time.sleep(2)

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
