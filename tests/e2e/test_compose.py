"""docker-compose.yml is valid for a compose client and wires the services the way the DAGs expect.

Runs ``docker compose config`` (the plugin) or ``docker-compose config`` (Debian's v1 package),
whichever exists; no container engine is needed and no image is built. Without a compose client
the tests are skipped, naming what is missing, except under ``CI=true``, where they fail: CI
must install one (Debian: ``apt-get install docker-compose``) rather than pass by skipping.

Starting the stack for real (images, the object store, Airflow, Spark, follow, results equal to
the oracle) is ``scripts/compose_smoke.sh`` (tests/e2e/test_compose_stack.py); docs/deployment.md
records a run.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from conftest import missing_prerequisite

from .conftest import REPO

pytestmark = pytest.mark.e2e


def compose_client() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True,
                                                  timeout=30, check=False).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.fixture(scope="module")
def compose() -> dict:
    client = compose_client()
    if client is None:
        missing = ("no compose client: neither the `docker compose` plugin nor `docker-compose` is installed "
                   "(Debian: apt-get install docker-compose)")
        missing_prerequisite(missing)
    done = subprocess.run([*client, "-f", str(REPO / "docker-compose.yml"), "config"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def mounts(service: dict) -> dict[str, tuple[str, bool]]:
    """Each volume's target -> (source, read-only), from v1's "src:dst:mode" strings or v2's mappings."""
    out = {}
    for v in service.get("volumes", []):
        if isinstance(v, str):
            src, dst, *mode = v.split(":")
            out[dst] = (src, "ro" in (mode[0].split(",") if mode else []))
        else:
            out[v["target"]] = (v.get("source", ""), bool(v.get("read_only")))
    return out


def seconds(duration: str | float) -> float:
    """A compose duration ("2m", "1m30s", "90s", or a number of seconds) in seconds."""
    if isinstance(duration, (int, float)):
        return float(duration)
    total, number = 0.0, ""
    for ch in str(duration):
        if ch.isdigit() or ch == ".":
            number += ch
        else:
            total += float(number) * {"h": 3600, "m": 60, "s": 1}[ch]
            number = ""
    return total + (float(number) if number else 0.0)


#: Services that run once and exit: the inits, and the client of one-off commands.
ONE_SHOT = {"airflow-init", "objectstore-init", "client"}
#: Services that read or write the warehouse's tables (docker-compose.yml's header).
WAREHOUSE_USERS = ("airflow-scheduler", "spark-worker-1", "spark-worker-2", "follow", "client")
CREDENTIALS = "/etc/dkmsks/objectstore"


def test_compose_config_is_valid_and_complete(compose):
    assert set(compose["services"]) == {
        "postgres", "objectstore", "objectstore-init", "airflow-init", "airflow-api-server", "airflow-scheduler",
        "airflow-dag-processor", "airflow-triggerer", "spark-master", "spark-worker-1", "spark-worker-2", "follow",
        "client"}
    # the client is for `docker-compose run` only: `up` never starts it
    assert compose["services"]["client"]["profiles"] == ["client"]


def test_every_long_running_service_has_a_healthcheck_and_restarts(compose):
    for name, service in compose["services"].items():
        if name in ONE_SHOT:
            assert service["restart"] == "no"
            continue
        assert service["restart"] == "unless-stopped", name
        assert service.get("healthcheck", {}).get("test"), name


def test_every_published_port_binds_loopback(compose):
    services = compose["services"]
    published = {}
    for name, service in services.items():
        # the host's network would publish every port the service opens, on every interface
        assert service.get("network_mode") != "host", name
        for port in service.get("ports", []):
            if isinstance(port, str):  # v1: "127.0.0.1:8080:8080/tcp"; "8080:8080" has no host address
                parts = port.split("/")[0].split(":")
                host_ip, host_port = (parts[0], parts[1]) if len(parts) == 3 else ("", parts[0])
            else:
                host_ip, host_port = port.get("host_ip", ""), str(port.get("published", ""))
            assert host_ip == "127.0.0.1", (name, port)  # loopback only
            published[name] = host_port
    # the UI/API and Spark's master UI; PostgreSQL is reached over the compose network only
    assert published == {"airflow-api-server": "8080", "spark-master": "8090"}


def test_every_image_is_built_here(compose):
    """No registry is needed: the project image comes from the Dockerfile, PostgreSQL from
    docker/build-base.sh (Debian's packages)."""
    for name, service in compose["services"].items():
        assert service["image"].startswith(("dkmsks:", "dkmsks-")), (name, service["image"])
        if service["image"].startswith("dkmsks:"):
            assert "build" in service, name


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
        assert env["DKMSKS_PYTHON"] == "/opt/dkmsks/.venv/bin/python"  # the image's venv (Dockerfile)
        # the asset-triggered chain runs without unpausing (as scripts/airflow.sh)
        assert env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"
        assert "/opt/airflow" in mounts(service)  # secrets and password file shared
    init = " ".join(services["airflow-init"]["command"])
    assert "airflow db migrate" in init and "airflow pools set dkmsks_writers 1" in init
    assert "SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" in init  # made before the api-server could print one
    assert "/opt/airflow" not in mounts(services["follow"])  # follow holds no Airflow secret
    # The Spark driver (spark-submit in the scheduler) and the executors live in containers of
    # their own: the driver listens on the compose network and is called by its service name,
    # each worker is called by its own (the master, the driver and other executors reach it).
    for name in ("airflow-scheduler", "spark-master", "spark-worker-1", "spark-worker-2"):
        assert "network_mode" not in services[name], name
    scheduler = services["airflow-scheduler"]["environment"]
    assert scheduler["DKMSKS_DRIVER_BIND_ADDRESS"] == "0.0.0.0"
    assert scheduler["DKMSKS_DRIVER_HOST"] == "airflow-scheduler"
    for name in ("spark-worker-1", "spark-worker-2"):
        command = services[name]["command"]
        assert command[command.index("--host") + 1] == services[name]["hostname"] == name


def test_the_warehouse_is_on_the_object_store_and_no_volume_shares_it(compose):
    """Every service that reads or writes tables names the same warehouse on the stack's object
    store and reaches it over the network; no service mounts a warehouse, and the store's data
    volume is the gateway's alone. Drivers (the scheduler) and executors (the workers) read the
    ingest DAG's input files at the same paths, read-only."""
    services = compose["services"]
    assert "warehouse" not in compose.get("volumes", {})
    assert {"objectstore-data", "objectstore-credentials"} <= set(compose["volumes"])
    for name, service in services.items():
        targets = mounts(service)
        assert "/data/warehouse" not in targets, name
        for target, (source, read_only) in targets.items():
            if source == "objectstore-data":
                assert name == "objectstore", name
            if source == "objectstore-credentials" and name != "objectstore":
                assert read_only and target == CREDENTIALS, name
            if target in ("/data/shared", "/data/input"):
                assert read_only, (name, target)
    for name in WAREHOUSE_USERS:
        env = services[name]["environment"]
        assert env["DKMSKS_WAREHOUSE"] == "s3://dkmsks/warehouse", name
        assert env["AWS_ENDPOINT_URL"] == "http://objectstore:7070", name
        assert env["AWS_SHARED_CREDENTIALS_FILE"] == f"{CREDENTIALS}/credentials" and env["AWS_PROFILE"], name
        assert mounts(services[name])[CREDENTIALS] == ("objectstore-credentials", True), name
        assert services[name]["depends_on"]["objectstore-init"]["condition"] == "service_completed_successfully"
        assert services[name].get("network_mode") is None, name  # on the compose network, to reach the store
    # Only what touches tables gets the store's credentials: not the master (it schedules
    # executors), PostgreSQL, or the Airflow components that run no task.
    for name in ("spark-master", "postgres", "airflow-api-server", "airflow-dag-processor", "airflow-triggerer",
                 "airflow-init"):
        assert CREDENTIALS not in mounts(services[name]), name
    # The DAGs' warehouse Param defaults to the store's (the dag-processor parses the DAG files).
    assert services["airflow-dag-processor"]["environment"]["DKMSKS_WAREHOUSE"] == "s3://dkmsks/warehouse"
    sources = {mounts(services[n])["/data/input"][0] for n in ("airflow-scheduler", "spark-worker-1", "spark-worker-2")}
    assert len(sources) == 1, sources


def test_the_object_store_service(compose):
    """The gateway on the compose network only, its data and credentials in volumes of its own,
    a one-shot init for the bucket; no key or secret written in the compose file."""
    services = compose["services"]
    store, init = services["objectstore"], services["objectstore-init"]
    assert store["image"] == init["image"] and store["image"].startswith("dkmsks-objectstore:")
    assert not store.get("ports")  # no published port: the stack's containers only
    assert mounts(store)["/var/lib/versitygw"] == ("objectstore-data", False)
    assert mounts(store)[CREDENTIALS] == ("objectstore-credentials", False)  # it makes them once
    assert store["healthcheck"]["test"][-1] == "check"
    assert init["command"] == ["init"] and init["depends_on"]["objectstore"]["condition"] == "service_healthy"
    for name, service in services.items():
        env = service.get("environment") or {}
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "ROOT_ACCESS_KEY_ID", "ROOT_SECRET_ACCESS_KEY"):
            assert key not in env, (name, key)


def test_follow_service(compose):
    follow = compose["services"]["follow"]
    command = follow["command"]
    assert command[:2] == ["dkm", "follow"]
    assert command[command.index("--warehouse") + 1] == "s3://dkmsks/warehouse"
    # local[--slots] in its own container: m + 1 long-running tasks never occupy the cluster
    assert "--master" not in command
    assert follow["restart"] == "unless-stopped"
    # SIGTERM ends the round in flight before the exit; the grace period leaves time for it
    assert seconds(follow["stop_grace_period"]) >= 60
    assert follow.get("stop_signal", "SIGTERM") == "SIGTERM"
    assert set(mounts(follow)) == {CREDENTIALS}  # the warehouse is reached over the network only
    # its status file (the healthcheck's) is in the container's local home (Dockerfile: DKMSKS_LOCAL_DIR)
    assert "/var/lib/dkmsks/local/run/follow-default.status.json" in follow["healthcheck"]["test"][-1]


def test_the_build_context_holds_everything_the_dockerfile_copies():
    """.dockerignore is an allowlist: a COPY of a path it does not let through fails the build
    ("stat conf/: file does not exist", seen when conf/ was added to the Dockerfile only)."""
    allowed = [line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.startswith("!")]
    copied = []
    for line in (REPO / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            copied += [w.rstrip("/") for w in words[1:-1] if not w.startswith("--")]
    assert copied  # the Dockerfile copies files from the context
    for source in copied:
        let_through = any(source == a or source.startswith(a + "/") for a in allowed)
        assert let_through, f"{source} is not in .dockerignore's allowlist"
        assert (REPO / source).exists(), source
