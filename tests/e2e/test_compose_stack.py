"""The docker-compose stack built, started and checked end to end, then removed.

``scripts/compose_smoke.sh`` does the work in three steps. ``up``, once for the module (the
:func:`compose_stack` fixture, which other tests of the stack can share): the base images from
Debian's packages and the object store's image when missing, the project image, ``up`` and a
wait until every service's healthcheck passes. ``check`` (docker/compose_e2e.py): a sign-in to
Airflow's REST API in the stack, ingest -> partition -> micro-batch through the DAGs on a small
real-data workload (the Spark driver in the scheduler's container, executors in the two worker
containers), two more timestamps published to the running follow service, ``knn_results`` read
with ``spark-sql`` inside the stack while follow runs, exports equal to ``dkm oracle`` at two
timestamps — all on the stack's object store, the warehouse no container mounts (checked with
``docker inspect``). ``down``: ``down -v``, and nothing of the project is left.

Needs Debian's docker.io, docker-compose and debootstrap (``scripts/install_test_deps.sh``
installs them), root, and Go for the object store's image (``scripts/objectstore.sh install``;
not needed once the image exists). When no Docker daemon answers, this module starts
``dockerd`` itself and stops it by PID afterwards. Containers talk only to each other on the
compose project's own network and publish their ports on 127.0.0.1 (free ports chosen here, so
a running Airflow of the other e2e tests does not collide); the object store publishes none.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import missing_prerequisite, require_real_data

from .conftest import REPO, free_port

pytestmark = pytest.mark.e2e

PROJECT = "dkmsks-suite"
OBJECTSTORE_IMAGE = "dkmsks-objectstore:v1.8.0"  # docker-compose.yml's objectstore service


def _docker_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60, check=False).returncode == 0


def _containerd_answers(socket: Path) -> bool:
    return subprocess.run(["ctr", "--address", str(socket), "version"], capture_output=True, timeout=60,
                          check=False).returncode == 0


def _start(command: list[str], log: Path, answers, what: str) -> subprocess.Popen:
    """Start a daemon and wait until ``answers()``; its log ends the failure message if it does not."""
    with open(log, "wb") as out:
        daemon = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while not answers():
        if daemon.poll() is not None or time.monotonic() > deadline:
            daemon.kill()
            pytest.fail(f"{what} did not start: {log.read_text()[-2000:]}")
        time.sleep(1)
    return daemon


def _stop(daemon: subprocess.Popen) -> None:
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=120)
    except subprocess.TimeoutExpired:
        daemon.kill()


@pytest.fixture(scope="module")
def docker_daemon(tmp_path_factory):
    """A Docker daemon: the running one, or one started here (and stopped by PID afterwards).

    containerd is started first, on its own, and dockerd pointed at it: a dockerd that starts its
    own containerd gives it a fixed 15 s, which a loaded 2-core machine exceeded in a CI run
    ("failed to start containerd: timeout waiting for containerd to start"). Here both get 180 s.
    """
    if shutil.which("docker") is None or shutil.which("docker-compose") is None:
        missing_prerequisite("the docker client or docker-compose is not installed (Debian: apt-get install "
                             "docker.io docker-compose; scripts/install_test_deps.sh does it)")
    if _docker_answers():
        yield None
        return
    found = {name: shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
             for name in ("dockerd", "containerd", "ctr")}
    if None in found.values():
        missing_prerequisite(f"no Docker daemon answers and {[n for n, f in found.items() if f is None]} is not "
                             "installed (Debian: docker.io, which brings containerd)")
    if os.geteuid() != 0:
        missing_prerequisite("no Docker daemon answers and starting dockerd needs root")
    logs = tmp_path_factory.mktemp("dockerd")
    socket = Path("/run/containerd/containerd.sock")  # containerd's default, as Debian's service runs it
    containerd = None
    if not _containerd_answers(socket):
        containerd = _start([found["containerd"]], logs / "containerd.log", lambda: _containerd_answers(socket),
                            "containerd")
    try:
        dockerd = _start([found["dockerd"], "--storage-driver", "overlay2", "--containerd", str(socket)],
                         logs / "dockerd.log", _docker_answers, "dockerd")
        try:
            yield dockerd.pid
        finally:
            _stop(dockerd)
    finally:
        if containerd is not None:
            _stop(containerd)


def _leftovers(kind: str) -> list[str]:
    """The project's containers (running or not) or volumes still present."""
    command = ["docker", "ps", "-aq"] if kind == "container" else ["docker", "volume", "ls", "-q"]
    listed = subprocess.run([*command, "--filter", f"label=com.docker.compose.project={PROJECT}"],
                            capture_output=True, text=True, timeout=60, check=True)
    return listed.stdout.split()


def _smoke(step: str, env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["scripts/compose_smoke.sh", step, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _failure(done: subprocess.CompletedProcess, folder: Path) -> str:
    """The step's output and, when it wrote them, the services' last log lines."""
    failure_log = folder / "smoke-failure.log"
    return (done.stdout + done.stderr)[-6000:] + (failure_log.read_text()[-6000:] if failure_log.exists() else "")


@dataclass
class Stack:
    """A started stack: the environment its docker-compose commands need (project, ports,
    input folder) and what its start printed."""

    env: dict[str, str]
    folder: Path
    started: str


@pytest.fixture(scope="module")
def compose_stack(docker_daemon, tmp_path_factory):
    """The stack built and started once (``scripts/compose_smoke.sh up``: base images when missing,
    the project image, every service healthy), shared by the tests of this module; taken down
    with its volumes afterwards (``down``), and nothing of its project left."""
    source = require_real_data()
    if shutil.which("go") is None and subprocess.run(
            ["docker", "image", "inspect", OBJECTSTORE_IMAGE], capture_output=True, timeout=60,
            check=False).returncode != 0:
        missing_prerequisite(f"Go is needed to build the object store's image {OBJECTSTORE_IMAGE} "
                             "(docker/build-base.sh: scripts/objectstore.sh install)")
    folder = tmp_path_factory.mktemp("compose")
    env = dict(os.environ, COMPOSE_PROJECT_NAME=PROJECT, DKMSKS_INPUT=str(folder / "input"),
               DKMSKS_AIRFLOW_PORT=str(free_port()), DKMSKS_SPARK_UI_PORT=str(free_port()),
               DKMSKS_SHARED_DATA=str(source.parent.parent),
               # The CAs this host trusts locally (a TLS-inspecting proxy), for the build stages that
               # download; the runtime image does not keep them (Dockerfile).
               DKMSKS_EXTRA_CA=" ".join(sorted(glob.glob("/usr/local/share/ca-certificates/*.crt"))))
    started = time.monotonic()
    try:
        done = _smoke("up", env, timeout=3600)
        print(done.stdout)
        print(f"compose stack built and started: {time.monotonic() - started:.0f} s")
        assert done.returncode == 0, _failure(done, folder)
        assert "stack up:" in done.stdout
        yield Stack(env, folder, done.stdout)
    finally:
        down = _smoke("down", env, timeout=600)
        assert down.returncode == 0, down.stdout + down.stderr
        assert _leftovers("container") == [] and _leftovers("volume") == []


def test_the_stack_runs_the_pipeline_on_its_object_store_and_equals_the_oracle(compose_stack):
    source = require_real_data()
    out = compose_stack.folder / "out"
    started = time.monotonic()
    done = _smoke("check", compose_stack.env, "--source", str(source), "--out", str(out), timeout=3600)
    print(done.stdout)
    print(f"compose stack end to end: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, _failure(done, compose_stack.folder)
    # Every service reported healthy before the checks began (the start waits for it).
    for service in ("objectstore", "airflow-scheduler", "spark-worker-1", "spark-worker-2", "airflow-api-server"):
        assert service in compose_stack.started, service
    for line in ("signed in to Airflow's REST API", "dkmsks_ingest", "dkmsks_partition",
                 "committed by dkmsks_microbatch", "follow is following the plan", "processed by 'follow'",
                 "spark-sql in the stack: knn_results equals the oracle", "memory of the running stack:",
                 "export at t=3 equals the oracle", "export at t=5 equals the oracle",
                 "no container mounts a warehouse", "the object store's volume holds the warehouse",
                 "the secret in no environment and no log", "all checks passed"):
        assert line in done.stdout, line
    assert Path(out / "export-t5.jsonl").stat().st_size > 0
