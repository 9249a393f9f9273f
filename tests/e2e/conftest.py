"""One real Airflow for the whole e2e session, shared by the REST and the browser tests.

Starting Airflow 3 (``scripts/airflow.sh start``: db migrate, api-server, scheduler,
dag-processor) costs about half a minute of the two cores, so the tests that need it share one
instance in a fresh ``AIRFLOW_HOME`` and stop it by PID at the end of the session.

``tests/e2e`` is a package (``__init__.py``) so that this file does not replace the root
``conftest`` module that the test files import helpers from.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    """A small client of Airflow's REST API (``/api/v2``) with a bearer token."""

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

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        """Task id -> state of one run."""
        status, body = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances")
        assert status == 200, body
        return {ti["task_id"]: ti["state"] for ti in body["task_instances"]}

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """The log of one task try as text, one line per log event."""
        status, body = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/"
                                        f"{task_id}/logs/{try_number}?full_content=true")
        assert status == 200, body
        return "\n".join(str(line.get("event", line)) for line in body["content"])

    def asset_events(self, source_dag_id: str) -> list[dict]:
        """The asset events that the tasks of one DAG emitted, oldest first."""
        status, body = self.call("GET", f"/api/v2/assets/events?source_dag_id={source_dag_id}&order_by=timestamp")
        assert status == 200, body
        return body["asset_events"]

    def wait_run(self, dag_id: str, run_id: str | None = None, *, run_type: str | None = None,
                 after: str | None = None, timeout: float = 600) -> dict:
        """Wait for a run (by id, or the newest of a type, optionally queued after an ISO time)
        to finish; fail on anything but success."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, runs = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after")
            for run in runs.get("dag_runs", []):
                if (run_id is None or run["dag_run_id"] == run_id) and run_type in (None, run["run_type"]) \
                        and (after is None or run["queued_at"] > after):
                    if run["state"] == "success":
                        return run
                    if run["state"] == "failed":
                        raise AssertionError(f"{dag_id} run {run['dag_run_id']} failed")
                    break
            time.sleep(3)
        raise AssertionError(f"{dag_id} did not finish within {timeout:.0f} s")


@dataclass(frozen=True)
class Airflow:
    """A running Airflow: its home, port and the default Delta warehouse of the DAGs."""

    home: Path
    port: int
    warehouse: Path
    map_port: int  # where the "Live map" entry looks for dkm serve (DKMSKS_MAP_URL)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def password(self) -> str:
        """The generated password of ``admin`` (SimpleAuthManager); never printed."""
        return json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]

    def api(self) -> Api:
        """A REST client holding a fresh token, once the DAGs are registered."""
        req = urllib.request.Request(self.url + "/auth/token", method="POST",
                                     data=json.dumps({"username": "admin", "password": self.password()}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            api = Api(self.url, json.loads(r.read())["access_token"])
        deadline = time.monotonic() + 120
        while api.call("GET", "/api/v2/dags/dkmsks_repartition")[0] != 200:
            assert time.monotonic() < deadline, "the dag-processor did not register the DAGs"
            time.sleep(2)
        return api


@pytest.fixture(scope="package")
def airflow(tmp_path_factory, objectstore):
    """Airflow with the test session's object store in its environment (``AWS_*``, as a
    deployment whose warehouses are on S3 gives its workers), so a run's warehouse Param may be
    an ``s3://`` URI; the jobs' local home (``DKMSKS_LOCAL_DIR``) is a folder of the fixture's."""
    from conftest import OBJECTSTORE_VARIABLES

    root = tmp_path_factory.mktemp("airflow")
    home, warehouse, port, map_port = root / "home", root / "warehouse", free_port(), free_port()
    env = dict(os.environ, AIRFLOW_HOME=str(home), DKMSKS_AIRFLOW_PORT=str(port), DKMSKS_WAREHOUSE=str(warehouse),
               **{key: objectstore[key] for key in OBJECTSTORE_VARIABLES}, DKMSKS_LOCAL_DIR=str(root / "local"),
               DKMSKS_MAP_URL=f"http://127.0.0.1:{map_port}/map",
               # With catchup=False a DAG's first scheduled run is its latest past cron point.
               # 29 February: none between start_date and now, so no micro-batch competes with
               # the tests for the writers' pool. Repartitioning runs once at start: its
               # Spark-free check must skip it (test_airflow_repartition.py).
               AIRFLOW_VAR_DKMSKS_MICROBATCH_SCHEDULE="0 0 29 2 *",
               AIRFLOW_VAR_DKMSKS_REPARTITION_SCHEDULE="0 0 1 1 *",
               AIRFLOW_VAR_DKMSKS_MAINTENANCE_SCHEDULE="0 0 29 2 *",
               # Spark's launcher logs the driver JVM's command line (its -Xmx) in the task log.
               SPARK_PRINT_LAUNCH_COMMAND="1")
    script = str(REPO / "scripts" / "airflow.sh")
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=300)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        running = Airflow(home, port, warehouse, map_port)
        # Airflow 3's api-server commits its audit-log row (every POST/PATCH/DELETE) with a
        # synchronous SQLite session inside its event loop. If a task is reporting to the same
        # process then, the task's request holds SQLite's write lock until its session is closed,
        # which needs the blocked event loop: both wait until the 60 s lock timeout (one CI run:
        # the first trigger timed out while the start-up repartition run's task was heartbeating).
        # So no test triggers anything before that run, made when Airflow starts, has finished.
        running.api().wait_run("dkmsks_repartition", run_type="scheduled", timeout=300)
        yield running
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=300)
        pids = home / "pids"
        assert not pids.exists() or not list(pids.iterdir()), "a process was left running"
