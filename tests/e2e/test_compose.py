"""docker-compose.yml is valid for a compose client and wires the services the way the DAGs expect.

Runs ``docker compose config`` (the plugin) or ``docker-compose config`` (Debian's v1 package),
whichever exists; no container engine is needed. Skipped, naming what is missing, without one.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from .conftest import REPO

pytestmark = pytest.mark.e2e


def compose_client() -> list[str] | None:
    if shutil.which("docker"):
        if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.fixture(scope="module")
def compose() -> dict:
    client = compose_client()
    if client is None:
        pytest.skip("no compose client: neither the `docker compose` plugin nor `docker-compose` is installed "
                    "(Debian: apt-get install docker-compose)")
    done = subprocess.run([*client, "-f", str(REPO / "docker-compose.yml"), "config"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def mounts(service: dict) -> set[tuple[str, str]]:
    """(source, target) of each volume, from v1's "src:dst:mode" strings or v2's mappings."""
    out = set()
    for v in service.get("volumes", []):
        if isinstance(v, str):
            src, dst = v.split(":")[:2]
        else:
            src, dst = v.get("source", ""), v["target"]
        out.add((src, dst))
    return out


def test_compose_config_is_valid_and_complete(compose):
    services = compose["services"]
    assert set(services) == {"postgres", "airflow-init", "airflow-api-server", "airflow-scheduler",
                             "airflow-dag-processor", "spark-master", "spark-worker-1", "spark-worker-2"}
    for name, service in services.items():
        for port in service.get("ports", []):
            published = port if isinstance(port, str) else f"{port.get('host_ip')}:{port['published']}"
            assert published.startswith("127.0.0.1:"), (name, port)  # loopback only


def test_airflow_services_match_the_dags(compose):
    services = compose["services"]
    airflow = [s for n, s in services.items() if n.startswith("airflow-")]
    for service in airflow:
        env = service["environment"]
        # the DAGs' connection id (dags/dkmsks_common.py: SPARK_CONN_ID) and a Spark master
        assert "spark://spark-master" in env["AIRFLOW_CONN_DKMSKS_SPARK"]
        # one secret for every component, read from the shared volume, never written here
        assert env["AIRFLOW__API_AUTH__JWT_SECRET_CMD"].startswith("cat /opt/airflow/")
        assert "AIRFLOW__API_AUTH__JWT_SECRET" not in env and "AIRFLOW__API__SECRET_KEY" not in env
        assert env["DKMSKS_PYTHON"] == "/usr/local/bin/python"  # the image has no .venv
        assert "/opt/airflow" in {dst for _, dst in mounts(service)}  # secrets and password file shared
    init = " ".join(services["airflow-init"]["command"])
    assert "airflow db migrate" in init and "airflow pools set dkmsks_writers 1" in init
    # the Spark driver (spark-submit in the scheduler) binds 127.0.0.1: executors must share its network
    for name in ("airflow-scheduler", "spark-worker-1", "spark-worker-2"):
        assert services[name]["network_mode"] == "service:spark-master", name
    for name in ("airflow-scheduler", "spark-master", "spark-worker-1", "spark-worker-2"):
        assert "/data/warehouse" in {dst for _, dst in mounts(services[name])}, name  # one Delta warehouse
