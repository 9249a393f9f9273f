"""The docker-compose stack built, started and checked end to end, then removed.

``scripts/compose_smoke.sh`` does the work (docker/compose_e2e.py holds the checks): the base
images from Debian's packages when missing, the project image, ``up`` and a wait until every
service's healthcheck passes, a sign-in to Airflow's REST API in the stack, ingest -> partition
-> micro-batch through the DAGs on a small real-data workload (the Spark driver in the
scheduler's container, executors in the two worker containers), two more timestamps published
to the running follow service, ``knn_results`` read with ``spark-sql`` inside the stack while
follow runs, exports equal to ``dkm oracle`` at two timestamps, and ``down -v``.

Needs Debian's docker.io, docker-compose and debootstrap (``scripts/install_test_deps.sh``
installs them) and root. When no Docker daemon answers, this module starts ``dockerd`` itself
and stops it by PID afterwards. Containers talk only to each other on the compose project's
own network and publish their ports on 127.0.0.1 (free ports chosen here, so a running Airflow
of the other e2e tests does not collide).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import missing_prerequisite, require_real_data

from .conftest import REPO, free_port

pytestmark = pytest.mark.e2e

PROJECT = "dkmsks-suite"


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


def test_the_stack_builds_starts_runs_the_pipeline_and_equals_the_oracle(docker_daemon, tmp_path):
    source = require_real_data()
    env = dict(os.environ, COMPOSE_PROJECT_NAME=PROJECT, DKMSKS_INPUT=str(tmp_path / "input"),
               DKMSKS_AIRFLOW_PORT=str(free_port()), DKMSKS_SPARK_UI_PORT=str(free_port()),
               DKMSKS_SHARED_DATA=str(source.parent.parent),
               # The CAs this host trusts locally (a TLS-inspecting proxy), for the build stages that
               # download; the runtime image does not keep them (Dockerfile).
               DKMSKS_EXTRA_CA=" ".join(sorted(glob.glob("/usr/local/share/ca-certificates/*.crt"))))
    started = time.monotonic()
    done = subprocess.run(["scripts/compose_smoke.sh", "--source", str(source), "--out", str(tmp_path / "out")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=3600, check=False)
    print(done.stdout)
    print(f"compose stack end to end: {time.monotonic() - started:.0f} s")
    failure_log = tmp_path / "smoke-failure.log"  # the services' last log lines, written on failure
    assert done.returncode == 0, ((done.stdout + done.stderr)[-6000:]
                                  + (failure_log.read_text()[-6000:] if failure_log.exists() else ""))
    for line in ("stack up:", "signed in to Airflow's REST API", "dkmsks_ingest", "dkmsks_partition",
                 "committed by dkmsks_microbatch", "follow is following the plan", "processed by 'follow'",
                 "spark-sql in the stack: knn_results equals the oracle", "memory of the running stack:",
                 "export at t=3 equals the oracle",
                 "export at t=5 equals the oracle", "all checks passed", "stack down, its volumes removed"):
        assert line in done.stdout, line
    # Every service reported healthy before the checks began (the script waits for it).
    assert _leftovers("container") == [] and _leftovers("volume") == []
    assert Path(tmp_path / "out" / "export-t5.jsonl").stat().st_size > 0
