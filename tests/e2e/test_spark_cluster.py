"""A real Spark standalone cluster (master + 2 workers on 127.0.0.1, from the pip package):
the micro-batch job submitted to it gives exact results, as in local mode."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
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
                    inserts_per_ts=15, deletes_per_ts=15, k_max=5, seed=21)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                SPARK_LOCAL_IP="127.0.0.1")


@pytest.fixture
def cluster(tmp_path):
    bin_dir = Path(sys.executable).parent
    port, ui = free_port(), free_port()
    logs = tmp_path / "cluster-logs"
    logs.mkdir()
    env = dict(_env(), SPARK_WORKER_DIR=str(tmp_path / "work"), SPARK_LOG_DIR=str(logs))
    procs = []

    def spawn(name: str, *args: str) -> None:
        out = open(logs / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen([str(bin_dir / "spark-class"), *args], env=env, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True))

    spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
          "--webui-port", str(ui))
    url = f"spark://127.0.0.1:{port}"
    for i in (1, 2):
        spawn(f"worker{i}", "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
              "--webui-port", str(free_port()), "--cores", "1", "--memory", "2g")
    try:
        deadline = time.monotonic() + 120
        while True:  # the master's JSON status lists alive workers
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                    if r.read().count(b'"state" : "ALIVE"') >= 2:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, (logs / "master.log").read_text()[-2000:]
            time.sleep(1)
        yield url, ui
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def submit(app: str, warehouse: Path, master: str | None, *args: str) -> str:
    from dkmsks.spark.session import spark_submit_conf_args
    from dkmsks.warehouse import Warehouse

    conf = spark_submit_conf_args(Warehouse(warehouse), master=master)
    cmd = [str(Path(sys.executable).with_name("spark-submit")), *conf, str(REPO / "spark_apps" / app),
           "--warehouse", str(warehouse), *args]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{app} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def test_microbatch_on_a_standalone_cluster_equals_the_oracle(cluster, tmp_path):
    url, ui = cluster
    source, vocab = real_objects(SPEC.objects_needed)
    objects, events = generate_workload(source, SPEC)
    write_objects(tmp_path / "objects.tsv.gz", objects, vocab)
    write_events(tmp_path / "events.tsv.gz", events, vocab)
    warehouse = tmp_path / "warehouse"
    submit("ingest.py", warehouse, None, "--objects", str(tmp_path / "objects.tsv.gz"),
           "--events", str(tmp_path / "events.tsv.gz"))
    submit("partition.py", warehouse, None, "--method", "dkm", "--workers", "4", "--gamma1", "20")
    submit("microbatch.py", warehouse, url)  # the worker tasks run on the cluster's executors
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=10) as r:
        status = r.read().decode()
    assert '"name" : "dkmsks-microbatch"' in status  # the master ran our application

    v = Vocabulary()
    expected = oracle_results(read_objects(tmp_path / "objects.tsv.gz", v).objects,
                              read_events(tmp_path / "events.tsv.gz", v).events, SPEC.timestamps)
    write_results(tmp_path / "oracle.jsonl", expected, SPEC.timestamps)
    dkm = str(Path(sys.executable).with_name("dkm"))
    done = subprocess.run([dkm, "export", "--warehouse", str(warehouse), "--out", str(tmp_path / "out.jsonl")],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # Local mode equals the oracle too (tests/spark/test_pipeline.py), so cluster == local.
    assert read_results(tmp_path / "out.jsonl") == read_results(tmp_path / "oracle.jsonl")
