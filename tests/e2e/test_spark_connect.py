"""SQL for remote clients: scripts/spark_connect.sh starts a Spark Connect server over a warehouse
(its tables and views registered before it serves), bound to 127.0.0.1 and requiring its token;
``dkm sql --remote`` queries ``knn_results`` through it without a JVM of its own (no java on
its PATH) and gets the oracle's results; a round committed while it runs is seen by the next
query; a wrong or missing token is refused; the script stops it by its PID."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from dkmsks.client import Client
from live_pipeline import live_pipeline, workload

pytestmark = [pytest.mark.e2e, pytest.mark.realdata]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "scripts" / "spark_connect.sh")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def remote_sql(url: str, statement: str, *, env: dict[str, str], warehouse: Path | None = None,
               token_file: Path | None = None) -> subprocess.CompletedProcess:
    """``dkm sql --remote`` with no java anywhere on its PATH: a JVM could not start."""
    cmd = [sys.executable, "-m", "dkmsks.cli", "sql", "--remote", url, "--json", statement]
    if warehouse is not None:
        cmd += ["--warehouse", str(warehouse)]
    if token_file is not None:
        cmd += ["--token-file", str(token_file)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def test_dkm_sql_remote_through_spark_connect_equals_the_oracle(tmp_path):
    work = workload()
    pipeline = live_pipeline(tmp_path / "wh", work)
    client = Client(pipeline.warehouse)
    for t in (1, 2):
        client.publish(work.objects_at(t), work.events_at(t))
        assert pipeline.round() == [t]
    warehouse, port = pipeline.warehouse.root, free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO / "lib")}
    env.pop("SPARK_CONNECT_AUTHENTICATE_TOKEN", None)
    no_java = {**env, "PATH": str(Path(sys.executable).parent), "JAVA_HOME": "/nonexistent",
               "SPARK_HOME": "/nonexistent"}
    started = subprocess.run([SCRIPT, "start", "--warehouse", str(warehouse), "--port", str(port)], env=env,
                             capture_output=True, text=True, timeout=900)
    run = warehouse / "run"
    pid = int((run / "spark-connect-default.pid").read_text()) if (run / "spark-connect-default.pid").exists() else None
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        token_file = run / "spark-connect-default.token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        # Listening on loopback only (the JVM is a child of the dkm process).
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        listening = {c.laddr for p in tree for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        assert {a.port for a in listening} >= {port}
        assert {a.ip for a in listening if a.port == port} <= {"127.0.0.1", "::ffff:127.0.0.1"}

        # knn_results through the server, no JVM here, against the oracle.
        url = f"sc://localhost:{port}"
        done = remote_sql(url, "SELECT sub_id, rank, object_id, distance FROM knn_results ORDER BY sub_id, rank",
                          env=no_java, warehouse=warehouse)
        assert done.returncode == 0, done.stderr[-3000:]
        rows = [json.loads(line) for line in done.stdout.splitlines()]
        got: dict[int, list] = {}
        for r in rows:
            got.setdefault(r["sub_id"], []).append((r["rank"], r["object_id"], r["distance"]))
        oracle = pipeline.oracle(2)
        live = {s: r for s, r in oracle.items() if len(r.object_ids)}
        assert sorted(got) == sorted(live)
        for sid, result in live.items():
            assert [r[0] for r in got[sid]] == list(range(1, len(result.object_ids) + 1))
            assert [r[1] for r in got[sid]] == result.object_ids.tolist(), sid
            assert [r[2] for r in got[sid]] == pytest.approx([math.sqrt(d) for d in result.d2.tolist()], abs=1e-12)

        # A round committed while the server runs: the next query sees it (127.0.0.1 works too).
        client.publish(work.objects_at(3), work.events_at(3))
        assert pipeline.round() == [3]
        done = remote_sql(f"sc://127.0.0.1:{port}", "SELECT max(t) AS t FROM ledger", env=no_java,
                          token_file=token_file)
        assert done.returncode == 0 and json.loads(done.stdout) == {"t": 3}, done.stderr[-2000:]

        # Who may call: the token, nobody else.
        elsewhere = tmp_path / "no-token-here"
        done = remote_sql(url, "SELECT 1", env=no_java, warehouse=elsewhere)
        assert done.returncode == 2 and "UNAUTHENTICATED" in done.stderr and "Traceback" not in done.stderr
        wrong = {**no_java, "SPARK_CONNECT_AUTHENTICATE_TOKEN": "x" * 43}
        done = remote_sql(url, "SELECT 1", env=wrong, warehouse=elsewhere)
        assert done.returncode == 2 and "Invalid authentication token" in done.stderr
        done = remote_sql(url, "SELECT nonsense FROM ledger", env=no_java, warehouse=warehouse)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "nonsense" in done.stderr
        status = subprocess.run([SCRIPT, "status", "--warehouse", str(warehouse)], env=env, capture_output=True,
                                text=True, timeout=60)
        assert status.returncode == 0 and "running" in status.stdout
        assert token not in (run / "spark-connect-default.log").read_text()
    finally:
        stopped = subprocess.run([SCRIPT, "stop", "--warehouse", str(warehouse)], env=env, capture_output=True,
                                 text=True, timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert pid is not None
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    done = remote_sql(f"sc://localhost:{port}", "SELECT 1", env=no_java, warehouse=warehouse)
    assert done.returncode == 2 and "UNAVAILABLE" in done.stderr
