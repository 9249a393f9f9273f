"""dkm serve as its users run it: ``dkm token create`` then ``dkm serve`` in a process of its own on
127.0.0.1 (a free port), stopped by PID; over HTTPS with a certificate; and through
``scripts/serve.sh start|status|stop``. Requests, an event stream ended by SIGTERM, a log with
request lines and no token in it."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from live_pipeline import live_pipeline, workload
from service_harness import read_events

from .conftest import REPO, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.realdata]
DKM = [sys.executable, "-m", "dkmsks.cli"]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    made = live_pipeline(tmp_path_factory.mktemp("serve") / "wh", workload())
    token(made, "ops", "admin")  # every test here finds a tokens file, whichever runs first
    return made


def token(pipeline, name: str, scope: str) -> str:
    done = subprocess.run([*DKM, "token", "create", "--name", name, "--scope", scope, "--warehouse",
                           str(pipeline.warehouse.root)], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()[0]


def wait_up(url: str, proc: subprocess.Popen, **client) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "dkm serve exited at start"
        try:
            if httpx.get(url + "/healthz", timeout=2, **client).json()["events"]:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("dkm serve did not come up")


def serve(pipeline, log: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([*DKM, "serve", "--warehouse", str(pipeline.warehouse.root), "--port", str(port),
                             "--poll", "0.1", *extra], stdout=log.open("w"), stderr=subprocess.STDOUT)
    return proc, port


def stop(proc: subprocess.Popen) -> bool:
    """SIGTERM by PID; whether it stopped as uvicorn does on a signal (shut down, then end by
    the signal again so that its parent sees it: status -15), within 30 s."""
    os.kill(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=30) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)


def test_dkm_serve_in_its_own_process_serves_streams_and_stops_on_sigterm(pipeline, tmp_path):
    from dkmsks.client import Client

    work = pipeline.work
    admin, alice = token(pipeline, "root", "admin"), token(pipeline, "alice", "subscribe,publish")
    tokens_file = pipeline.warehouse.run_dir / "tokens.json"
    assert stat.S_IMODE(tokens_file.stat().st_mode) == 0o600
    listing = subprocess.run([*DKM, "token", "list", "--warehouse", str(pipeline.warehouse.root)],
                             capture_output=True, text=True, timeout=60).stdout
    assert "root" in listing and "alice" in listing and admin not in listing and alice not in listing
    log = tmp_path / "serve.log"
    proc, port = serve(pipeline, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(url, proc)
        h = {"Authorization": f"Bearer {alice}"}
        o = work.objects_at(1)[0]
        sid = httpx.post(url + "/v1/subscriptions", headers=h, json={"x": o["x"], "y": o["y"],
                                                                      "keywords": o["keywords"], "k": 2}).json()["id"]
        got: list = []
        ended = threading.Event()

        def listen():
            with httpx.stream("GET", url + "/v1/events", params={"sub": sid}, headers=h, timeout=60) as r:
                got.extend(read_events(r.iter_lines()))
            ended.set()

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        time.sleep(0.5)
        assert httpx.post(url + "/v1/objects", headers=h, json=work.objects_at(1)).status_code == 202
        Client(pipeline.warehouse).publish(events=work.events_at(1))
        assert pipeline.round() == [1]
        deadline = time.monotonic() + 30
        while not any(e.event == "processed" for e in got) and time.monotonic() < deadline:
            time.sleep(0.05)
        expected = pipeline.oracle(1)[sid]
        assert [e.data["object_ids"] for e in got if e.event == "change"][-1] == expected.object_ids.tolist()
        assert httpx.get(url + "/v1/status", headers={"Authorization": "Bearer dkm_deadbeef_" + "x" * 43}) \
            .status_code == 401
        assert stop(proc)  # SIGTERM ends the open stream and the process
        assert ended.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "Finished server process" in text
    assert "GET /v1/events" in text and "POST /v1/objects" in text
    assert admin not in text and alice not in text and "Bearer" not in text
    assert "dkm_deadbeef" not in text


def test_https_with_a_certificate(pipeline, tmp_path):
    import shutil

    from conftest import missing_prerequisite

    if shutil.which("openssl") is None:
        missing_prerequisite("openssl (Debian's openssl package) makes the test's certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                    str(cert)], check=True, capture_output=True, timeout=60)
    admin = token(pipeline, "tls-root", "admin")
    proc, port = serve(pipeline, tmp_path / "serve.log", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key))
    try:
        wait_up(f"https://127.0.0.1:{port}", proc, verify=str(cert))
        r = httpx.get(f"https://127.0.0.1:{port}/v1/status", headers={"Authorization": f"Bearer {admin}"},
                      verify=str(cert))
        assert r.status_code == 200 and r.json()["last_processed"] >= 0
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)  # plain HTTP is not served
    finally:
        assert stop(proc)


def test_serve_sh_starts_reports_and_stops_it(pipeline, tmp_path):
    script = REPO / "scripts" / "serve.sh"
    wh = ["--warehouse", str(pipeline.warehouse.root)]
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO / "lib")}
    started = subprocess.run([str(script), "start", *wh, "--port", str(port)], capture_output=True, text=True,
                             timeout=120, env=env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"http://127.0.0.1:{port}" in started.stdout
        pid = int((pipeline.warehouse.run_dir / "serve-default.pid").read_text())
        status = subprocess.run([str(script), "status", *wh], capture_output=True, text=True, timeout=60, env=env)
        assert status.returncode == 0 and f"running (pid {pid})" in status.stdout
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()["ok"]
    finally:
        stopped = subprocess.run([str(script), "stop", *wh], capture_output=True, text=True, timeout=60, env=env)
    assert stopped.returncode == 0 and "serve: stopped" in stopped.stdout
    status = subprocess.run([str(script), "status", *wh], capture_output=True, text=True, timeout=60, env=env)
    assert status.returncode != 0 and "not running" in status.stdout


def test_a_tokens_file_others_can_read_is_refused(pipeline, tmp_path):
    loose = tmp_path / "tokens.json"
    loose.write_text((pipeline.warehouse.run_dir / "tokens.json").read_text())
    loose.chmod(0o644)
    done = subprocess.run([*DKM, "serve", "--warehouse", str(pipeline.warehouse.root), "--tokens", str(loose),
                           "--port", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "readable by others" in done.stderr
