"""Follow mode's round exchange over the network (jobs/follow/flight.py, FlightChannel): the
driver's Flight server hands each task its round, collects every worker's records and change
files, ends the loop on stop; every call carries the session's token, and a caller without it
is refused before anything is read; the token is never shown.

Tasks here are threads (gRPC is not safe to fork) holding a copy of the channel as Spark ships
it (pickled), and one a separate interpreter fed that copy on its standard input."""

from __future__ import annotations

import pickle
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from dkmsks.jobs.follow import ChangeFiles, Round, SpoolChannel
from dkmsks.jobs.follow import flight as flight_module
from dkmsks.jobs.follow.flight import FlightChannel
from dkmsks.storage.journal_files import JournalFile
from follow_payloads import payload

pytestmark = pytest.mark.unit

TASKS, WORKERS = 2, 5


def _flight() -> FlightChannel:
    return FlightChannel(poll=0.005, build_slots=1, bind="127.0.0.1", host="127.0.0.1")


def _play_task(channel, task: int, seen: dict) -> None:
    """A worker loop without workers: each worker's records say which round and objects it saw."""
    for worker in range(task, WORKERS, TASKS):
        channel.say_ready(worker)
    n = 0
    while (round_ := channel.get_round(n, task)) is not None:
        for worker in range(task, WORKERS, TASKS):
            channel.put_records(n, worker, pa.table({"round": [n], "worker": [worker],
                                                     "objects": [int(round_.payload.obj_ids.sum())]}))
        if round_.change_files is not None:
            file = JournalFile(f"record=change/t{task}-{n}.parquet", 123, "change", 10, 1, "{}") if task else None
            channel.put_changes(n, task, file)
        n += 1
    seen[task] = n


@pytest.mark.parametrize("kind", ["flight", "spool"])
def test_each_task_gets_its_own_round_or_the_shared_one_and_every_workers_records_come_back(kind, tmp_path):
    channel = _flight() if kind == "flight" else SpoolChannel(tmp_path / "spool", poll=0.002, build_slots=1)
    channel.open()
    shipped = pickle.dumps(channel)
    seen: dict[int, int] = {}
    tasks = [threading.Thread(target=_play_task, args=(pickle.loads(shipped), t, seen)) for t in range(TASKS)]
    for thread in tasks:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while channel.ready_workers() < WORKERS:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        files = ChangeFiles("/nowhere", pa.schema([("t", pa.int64())]), 4, "run")
        rounds = [Round(payload(1, timestamps=2, objects=50, events=5)),
                  [Round(payload(10 + t, timestamps=1, objects=30, events=2)) for t in range(TASKS)],
                  [Round(payload(20 + t, timestamps=3, objects=20 * t, events=2), files) for t in range(TASKS)],
                  Round(payload(3, timestamps=1, objects=0, events=0))]
        for n, sent in enumerate(rounds):
            per_task = [sent] * TASKS if isinstance(sent, Round) else sent
            sizes = channel.put_round(n, sent)
            assert len(sizes) == (1 if isinstance(sent, Round) else TASKS) and min(sizes) > 0
            expected_files = TASKS if per_task[0].change_files is not None else 0
            out = channel.collect(n, workers=WORKERS, tasks=expected_files, alive=lambda: None)
            got = pa.concat_tables(out.records).sort_by("worker").to_pydict()
            assert got == {"round": [n] * WORKERS, "worker": list(range(WORKERS)),
                           "objects": [int(np.sum(per_task[w % TASKS].payload.obj_ids)) for w in range(WORKERS)]}
            assert [f.path for f in out.change_files] == ([f"record=change/t1-{n}.parquet"] if expected_files else [])
    finally:
        channel.stop()
        for thread in tasks:
            thread.join(30)
        channel.close()
    assert seen == {t: len(rounds) for t in range(TASKS)}


def test_a_caller_without_the_token_is_refused_and_the_token_is_never_shown(caplog):
    channel = _flight()
    channel.open()
    try:
        token = channel._token
        assert len(token) >= 40 and token not in repr(channel) and token not in str(channel)
        client = flight.FlightClient(channel.location)
        calls = [
            lambda options: list(client.do_action(flight.Action("ready", b'{"worker": 0}'), options=options)),
            lambda options: client.do_get(flight.Ticket(b'{"round": 0, "task": 0}'), options=options).read_all(),
            lambda options: _put(client, options),
            lambda options: list(client.list_actions(options=options)),
        ]
        for headers in ([], [(b"authorization", b"Bearer wrong")], [(b"authorization", token.encode())]):
            for call in calls:
                with pytest.raises(flight.FlightUnauthenticatedError):
                    call(flight.FlightCallOptions(timeout=10, headers=headers))
        assert channel.ready_workers() == 0 and not channel._srv.records  # nothing was read
        right = flight.FlightCallOptions(timeout=10, headers=[(b"authorization", f"Bearer {token}".encode())])
        list(client.do_action(flight.Action("ready", b'{"worker": 3}'), options=right))
        assert channel.ready_workers() == 1
        # bodies that are not what the driver reads are refused, and change nothing
        for action, body in (("ready", b"not json"), ("ready", b'{"worker": -1}'), ("ready", b"[1]"),
                             ("reboot", b"{}"), ("changes", b'{"n": 0, "task": 0, "file": 7}')):
            with pytest.raises(flight.FlightServerError):
                list(client.do_action(flight.Action(action, body), options=right))
        assert channel.ready_workers() == 1
        assert token not in caplog.text
    finally:
        channel.stop()
        channel.close()


def _put(client: flight.FlightClient, options: flight.FlightCallOptions) -> None:
    writer, _ = client.do_put(flight.FlightDescriptor.for_path("records", "0", "0"), pa.schema([("a", pa.int64())]),
                              options=options)
    writer.write_table(pa.table({"a": [1]}))
    writer.close()


def test_a_task_waits_across_long_polls_and_a_failed_task_ends_the_drivers_wait(monkeypatch):
    monkeypatch.setattr(flight_module, "LONG_POLL", 0.2)
    channel = _flight()
    channel.open()
    copy = pickle.loads(pickle.dumps(channel))
    got: list = []
    thread = threading.Thread(target=lambda: got.append(copy.get_round(0, 1)))
    thread.start()
    try:
        time.sleep(0.7)  # three long polls answered "wait"
        assert thread.is_alive()
        channel.put_round(0, Round(payload(4, timestamps=1, objects=10, events=1)))
        thread.join(10)
        assert got and got[0].payload.obj_ids.shape[0] == 10
        failing = threading.Timer(0.2, copy.fail, args=(1, "Traceback (most recent call last):\nMemoryError: worker 7"))
        failing.start()
        with pytest.raises(RuntimeError, match="worker task failed:\nTraceback .*\nMemoryError: worker 7"):
            channel.collect(0, workers=2, tasks=0, alive=lambda: None)
        failing.join()
        with pytest.raises(RuntimeError, match="MemoryError: worker 7"):
            channel.check()
    finally:
        channel.stop()
        channel.close()


def test_an_ended_stage_ends_the_drivers_wait():
    channel = _flight()
    channel.open()

    def ended() -> None:
        raise RuntimeError("the worker stage ended unexpectedly")

    try:
        with pytest.raises(RuntimeError, match="ended unexpectedly"):
            channel.collect(0, workers=1, tasks=0, alive=ended)
    finally:
        channel.stop()
        channel.close()


TASK_PROGRAM = """
import pickle, sys
import pyarrow as pa
channel = pickle.loads(sys.stdin.buffer.read())
channel.say_ready(0)
n = 0
while (round_ := channel.get_round(n, 0)) is not None:
    with channel.build_slot():
        pass
    channel.put_records(n, 0, pa.table({"n": [n], "objects": [round_.payload.obj_ids.shape[0]]}))
    n += 1
print(n)
"""


def test_a_task_in_another_interpreter_gets_its_rounds_through_the_shipped_channel(tmp_path: Path):
    channel = _flight()
    channel.open()
    env = {"PYTHONPATH": str(Path(flight_module.__file__).resolve().parents[3])}
    proc = subprocess.Popen([sys.executable, "-c", TASK_PROGRAM], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    try:
        assert proc.stdin is not None
        proc.stdin.write(pickle.dumps(channel))
        proc.stdin.close()
        deadline = time.monotonic() + 60
        while channel.ready_workers() < 1:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.02)
        for n, objects in enumerate((7, 0, 1_000)):
            channel.put_round(n, Round(payload(n, timestamps=1, objects=objects, events=1)))
            out = channel.collect(n, workers=1, tasks=0, alive=lambda: None)
            assert out.records[0].to_pydict() == {"n": [n], "objects": [objects]}
        channel.stop()
        assert proc.stdout is not None and proc.stderr is not None
        proc.wait(timeout=60)
        stdout, stderr = proc.stdout.read(), proc.stderr.read()
        assert proc.returncode == 0, stderr.decode()[-2000:]
        assert stdout.decode().strip() == "3"
        assert channel._token.encode() not in stdout + stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        channel.close()


def test_the_port_and_addresses_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("DKMSKS_DRIVER_BIND_ADDRESS", "127.0.0.1")
    monkeypatch.setenv("DKMSKS_DRIVER_HOST", "127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("DKMSKS_FOLLOW_PORT", str(port))
    channel = FlightChannel(poll=0.01, build_slots=1)
    channel.open()
    try:
        assert channel.location == f"grpc+tcp://127.0.0.1:{port}"
    finally:
        channel.close()
