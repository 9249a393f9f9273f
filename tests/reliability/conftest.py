"""Shared fixtures of the reliability tests: one small real-data workload, its oracle at every
timestamp, and one warehouse prepared once (ingested and partitioned by the real entry points)
that tests restore to the same path before they use it (see :mod:`rel_harness`) — in a folder
(``prepared``), and on the test session's object store (``prepared_s3``; ``prepared_on`` is
each in turn)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import OBJECTSTORE_VARIABLES, require_real_data

from . import rel_harness as h

#: The crash workload: tiny, real data (docs/design.md §5 protocol at reduced rates).
O_INIT, SUBSCRIPTIONS, TIMESTAMPS = 5000, 1000, 12
OBJECTS_PER_TS, INSERTS_PER_TS, DELETES_PER_TS, K_MAX, SEED = 100, 10, 10, 5, 17
WORKERS = 3
PARTITION_ARGS = ["--method", "dkm", "--workers", str(WORKERS), "--gamma1", "40", "--theta", "4",
                  "--grid", "256"]
#: The environment of the jobs on the object store: a writer lease of 5 s (instead of 15 s), so
#: that the run after a killed holder takes the lock over within seconds.
S3_JOB_ENV = {"DKMSKS_LEASE_SECONDS": "5"}


@dataclass
class Workload:
    """The crash workload's files and ``dkm oracle`` at every timestamp (made once per test
    process, shared by the prepared warehouses of every storage kind)."""

    folder: Path
    objects: Path
    events: Path
    oracle: dict[int, Path]  # t -> oracle export (dkm oracle)


@dataclass
class Prepared:
    workload: Path
    objects: Path
    events: Path
    warehouse: h.Place  # the one place every test restores the snapshot to
    snapshot: Path
    oracle: dict[int, Path]  # t -> oracle export (dkm oracle)
    timestamps: int
    workers: int
    prep_seconds: float

    def restore(self) -> h.Place:
        h.restore(self.snapshot, self.warehouse)
        return self.warehouse


def oracle_exports(objects: Path, events: Path, ts: range, out: Path) -> dict[int, Path]:
    """``dkm oracle --as-of T`` for every ``T`` (the command line's code, in this process)."""
    from dkmsks.cli import main as dkm

    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for t in ts:
        paths[t] = out / f"oracle-{t}.jsonl"
        assert dkm(["oracle", "--objects", str(objects), "--events", str(events), "--as-of", str(t),
                    "--out", str(paths[t])]) == 0
    return paths


def _reused() -> Path | None:
    """``$DKMSKS_RELIABILITY_PREPARED``: a folder an earlier session prepared (same workload
    constants), which skips ingest and partition."""
    reuse = os.environ.get("DKMSKS_RELIABILITY_PREPARED")
    if not reuse or not (Path(reuse) / "prepared.json").exists():
        return None
    # Its snapshot restores to one fixed path (Prepared.warehouse), so two xdist workers
    # (scripts/test.sh runs two) would restore over each other.
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        raise pytest.UsageError("DKMSKS_RELIABILITY_PREPARED needs one test process: add -n 0")
    return Path(reuse)


@pytest.fixture(scope="session")
def crash_workload(tmp_path_factory) -> Workload:
    source = require_real_data()
    reuse = _reused()
    if reuse is not None:
        workload = reuse / "workload"
        oracle = {t: reuse / "oracle" / f"oracle-{t}.jsonl" for t in range(TIMESTAMPS + 1)}
        assert all(p.exists() for p in oracle.values()), f"{reuse} lacks oracle exports"
        return Workload(workload, workload / "objects.tsv.gz", workload / "events.tsv.gz", oracle)
    root = tmp_path_factory.mktemp("reliability")
    workload = root / "workload"
    h.run(h.dkm_cmd("generate", "--source", str(source), "--out", str(workload), "--o-init", str(O_INIT),
                    "--subscriptions", str(SUBSCRIPTIONS), "--timestamps", str(TIMESTAMPS),
                    "--objects-per-ts", str(OBJECTS_PER_TS), "--inserts-per-ts", str(INSERTS_PER_TS),
                    "--deletes-per-ts", str(DELETES_PER_TS), "--k-max", str(K_MAX), "--seed", str(SEED)))
    objects, events = workload / "objects.tsv.gz", workload / "events.tsv.gz"
    return Workload(workload, objects, events, oracle_exports(objects, events, range(TIMESTAMPS + 1), root / "oracle"))


def _prepare(workload: Workload, warehouse: h.Place, snap: Path) -> Prepared:
    """Ingest and partition ``workload`` on ``warehouse`` (the real entry points, one JVM) and
    snapshot it to ``snap``."""
    started = time.perf_counter()
    h.run(h.entry_points_cmd([
        ("spark_apps/ingest.py", ["--warehouse", warehouse.arg, "--objects", str(workload.objects),
                                  "--events", str(workload.events), "--run-id", "prep"]),
        ("spark_apps/partition.py", ["--warehouse", warehouse.arg, *PARTITION_ARGS, "--run-id", "prep"]),
    ]), warehouse, timeout=1200)
    prep_seconds = time.perf_counter() - started
    h.snapshot(warehouse, snap)
    return Prepared(workload.folder, workload.objects, workload.events, warehouse, snap, workload.oracle,
                    TIMESTAMPS, WORKERS, prep_seconds)


@pytest.fixture(scope="session")
def prepared(crash_workload) -> Prepared:
    """The crash workload ingested and partitioned in a warehouse folder."""
    reuse = _reused()
    if reuse is not None:
        prep = json.loads((reuse / "prepared.json").read_text())["prep_seconds"]
        return Prepared(crash_workload.folder, crash_workload.objects, crash_workload.events,
                        h.Place.local(reuse / "warehouse"), reuse / "snapshot", crash_workload.oracle,
                        TIMESTAMPS, WORKERS, prep)
    root = crash_workload.folder.parent  # the layout $DKMSKS_RELIABILITY_PREPARED reuses
    done = _prepare(crash_workload, h.Place.local(root / "warehouse"), root / "snapshot")
    (root / "prepared.json").write_text(json.dumps({"prep_seconds": done.prep_seconds}))
    return done


@pytest.fixture(scope="session")
def prepared_s3(crash_workload, objectstore, tmp_path_factory) -> Prepared:
    """The crash workload ingested and partitioned in a warehouse on the test session's object
    store (``s3://dkmsks/crash-<n>``); its snapshot is the store's backing folder of that prefix
    (:class:`rel_harness.Place`)."""
    import uuid

    root = tmp_path_factory.mktemp("reliability-s3")
    settings = {key: objectstore[key] for key in OBJECTSTORE_VARIABLES} | S3_JOB_ENV
    warehouse = h.Place.on_store(f"s3://dkmsks/crash-{uuid.uuid4().hex[:8]}",
                                 Path(objectstore["DKMSKS_OBJECTSTORE_DIR"]), root / "home", settings)
    return _prepare(crash_workload, warehouse, root / "snapshot")


@pytest.fixture(params=["folder", "s3"])
def prepared_on(request) -> Prepared:
    """The prepared warehouse of each storage kind: a folder, and the object store."""
    return request.getfixturevalue("prepared" if request.param == "folder" else "prepared_s3")


def inspect(warehouse: Path | h.Place, out: Path, timestamps: range) -> dict:
    """Exports at every timestamp plus the bookkeeping summary (one JVM, see inspect_warehouse)."""
    h.run([h.PYTHON, str(h.HERE / "inspect_warehouse.py"), str(warehouse), str(out), *map(str, timestamps)],
          warehouse, timeout=1800, log=out / "inspect.log")
    return json.loads((out / "summary.json").read_text())


def assert_bookkeeping(summary: dict, timestamps: int, workers: int) -> None:
    """Zero lost, zero duplicated timestamps, from the user-facing tables and views."""
    assert summary["ledger"] == [[t, 1] for t in range(timestamps + 1)], summary["ledger"]
    assert summary["timestamp_metrics"] == [[t, 1] for t in range(1, timestamps + 1)], summary["timestamp_metrics"]
    assert summary["worker_metrics"] == [[t, workers, workers] for t in range(1, timestamps + 1)], \
        summary["worker_metrics"]
    assert summary["result_change_duplicates"] == [], summary["result_change_duplicates"]


def assert_exports_equal(got: Path, expected: dict[int, Path], timestamps: range, label: str) -> None:
    bad = [t for t in timestamps if (got / f"export-{t}.jsonl").read_bytes() != expected[t].read_bytes()]
    assert not bad, f"{label}: dkm export differs from the reference at t={bad}"
