"""A live warehouse: follow mode runs while publishers land timestamps and readers query.

Real processes on one warehouse, as a user runs them (issue 13): ``dkm follow`` as a service
(``scripts/follow.sh``), ``dkm publish`` from another process for each new timestamp, ``dkm sql``
and ``dkm status`` from a third while follow runs. Then ``kill -9`` of follow between two
publishes and a restart: every timestamp is applied exactly once and ``dkm export --as-of T``
equals the brute-force oracle at every ``T``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import require_real_data

from . import rel_harness as h
from .conftest import oracle_exports

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

O_INIT, SUBSCRIPTIONS, TIMESTAMPS, WORKERS = 3000, 400, 8, 3
FOLLOW_SCRIPT = h.REPO / "scripts" / "follow.sh"


def _follow(action: str, warehouse: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(FOLLOW_SCRIPT), action, "--warehouse", str(warehouse), *extra],
                          capture_output=True, text=True, env=h.job_env(), timeout=180)


def _status(warehouse: Path) -> dict:
    path = warehouse / "run" / "follow-default.status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _wait_processed(warehouse: Path, t: int, timeout: float = 300) -> None:
    """Until the follow process reports timestamp ``t`` committed (its status file)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = _status(warehouse).get("last_t")
        if last is not None and last >= t:
            return
        time.sleep(0.5)
    log = (warehouse / "run" / "follow-default.log").read_text()[-3000:]
    raise AssertionError(f"follow did not process t={t} within {timeout:.0f} s; status {_status(warehouse)}\n{log}")


def _journal(warehouse: Path, record: str) -> list[dict]:
    from deltalake import DeltaTable

    table = DeltaTable(str(warehouse / "tables" / "journal"))
    return table.to_pyarrow_table(filters=[("record", "=", record)]).to_pylist()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    source = require_real_data()
    root = tmp_path_factory.mktemp("live")
    # O_init only, partitioned: the stream is published live below.
    objects, events, warehouse = h.partitioned_at_t0(source, root, o_init=O_INIT, subscriptions=SUBSCRIPTIONS,
                                                     timestamps=TIMESTAMPS, workers=WORKERS, seed=23)
    oracle = oracle_exports(objects, events, range(TIMESTAMPS + 1), root / "oracle")
    yield root, objects, events, warehouse, oracle
    _follow("stop", warehouse)


def _publish(warehouse: Path, objects: Path, events: Path) -> float:
    started = time.monotonic()
    h.run(h.dkm_cmd("publish", "--objects", str(objects), "--events", str(events), "--warehouse", str(warehouse),
                    "--timestamps", "1"), timeout=300)
    return time.monotonic() - started


def _export_equals_oracle(warehouse: Path, oracle: dict[int, Path], t: int, out: Path) -> None:
    path = out / f"export-{t}.jsonl"
    h.run(h.dkm_cmd("export", "--warehouse", str(warehouse), "--as-of", str(t), "--out", str(path)))
    assert path.read_bytes() == oracle[t].read_bytes(), f"dkm export --as-of {t} differs from the oracle"


def test_follow_publishers_and_readers_share_one_warehouse_and_survive_kill_9(live):
    root, objects, events, warehouse, oracle = live
    out = root / "exports"
    out.mkdir(exist_ok=True)
    started = _follow("start", warehouse, "--slots", str(WORKERS + 3), "--poll", "0.2")
    assert started.returncode == 0, started.stdout + started.stderr
    _wait_processed(warehouse, 0)

    # A reader starts its own Spark application while follow holds its own: both at once.
    reader = subprocess.Popen(h.dkm_cmd("sql", "--warehouse", str(warehouse),
                                        "SELECT max(t) AS last FROM ledger"), env=h.job_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for t in range(1, 6):
        _publish(warehouse, objects, events)
        _wait_processed(warehouse, t)
        status = subprocess.run(h.dkm_cmd("status", "--warehouse", str(warehouse)), capture_output=True,
                                text=True, env=h.job_env(), timeout=120)
        assert status.returncode == 0 and f"last processed timestamp: {t}" in status.stdout, status.stdout
    stdout, stderr = reader.communicate(timeout=600)
    assert reader.returncode == 0, stderr[-3000:]
    seen = int(stdout.split("|")[-2].strip()) if "|" in stdout else None
    assert seen is not None and 0 <= seen <= 5, stdout  # a committed timestamp, whichever it was
    assert _follow("status", warehouse).returncode == 0

    # kill -9 of the service between two publishes: the driver, its JVM and its workers at once.
    pid = int((warehouse / "run" / "follow-default.pid").read_text())
    assert os.getpgid(pid) == pid  # scripts/follow.sh starts it in a session of its own
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30  # until the group is gone and reaped
    while _follow("status", warehouse).returncode == 0 and time.monotonic() < deadline:
        time.sleep(1)
    assert _follow("status", warehouse).returncode != 0  # reported as not running
    for _t in (6, 7):
        _publish(warehouse, objects, events)  # t=6 and 7 land while nothing processes
    # Restarted with rounds of one timestamp: the backlog of two is taken in two rounds.
    assert _follow("start", warehouse, "--slots", str(WORKERS + 3), "--poll", "0.2",
                   "--max-timestamps", "1").returncode == 0
    _publish(warehouse, objects, events)  # t=8 while it runs
    _wait_processed(warehouse, TIMESTAMPS)

    for t in range(TIMESTAMPS + 1):
        _export_equals_oracle(warehouse, oracle, t, out)
    ledger = sorted(r["t"] for r in _journal(warehouse, "ledger"))
    assert ledger == list(range(TIMESTAMPS + 1)), ledger  # each timestamp committed exactly once
    runs = {r["t"]: (r["run_from_t"], r["run_through_t"]) for r in _journal(warehouse, "ledger")}
    assert [runs[t] for t in (6, 7, 8)] == [(5, 6), (6, 7), (7, 8)], runs  # one timestamp per round
    changes = [(r["t"], r["sub_id"], r["change"]) for r in _journal(warehouse, "change")]
    assert len(changes) == len(set(changes)), "a result change was journaled twice"
    assert _follow("stop", warehouse).returncode == 0
    assert _status(warehouse)["state"] == "stopped"  # SIGTERM: the round in flight ended cleanly
