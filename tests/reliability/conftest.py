"""Shared fixtures of the reliability tests: one small real-data workload, its oracle at every
timestamp, and one warehouse prepared once (ingested and partitioned by the real entry points)
that tests restore to the same path before they use it (see :mod:`rel_harness`)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import require_real_data

from . import rel_harness as h

#: The crash workload: tiny, real data (docs/design.md §5 protocol at reduced rates).
O_INIT, SUBSCRIPTIONS, TIMESTAMPS = 5000, 1000, 12
OBJECTS_PER_TS, INSERTS_PER_TS, DELETES_PER_TS, K_MAX, SEED = 100, 10, 10, 5, 17
WORKERS = 3
PARTITION_ARGS = ["--method", "dkm", "--workers", str(WORKERS), "--gamma1", "40", "--theta", "4",
                  "--grid", "256"]


@dataclass
class Prepared:
    workload: Path
    objects: Path
    events: Path
    warehouse: Path  # the one path every test restores the snapshot to
    snapshot: Path
    oracle: dict[int, Path]  # t -> oracle export (dkm oracle)
    timestamps: int
    workers: int
    prep_seconds: float

    def restore(self) -> Path:
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


@pytest.fixture(scope="session")
def prepared(tmp_path_factory) -> Prepared:
    source = require_real_data()
    reuse = os.environ.get("DKMSKS_RELIABILITY_PREPARED")
    if reuse and (Path(reuse) / "prepared.json").exists():
        # Its snapshot restores to one fixed path (Prepared.warehouse), so two xdist workers
        # (scripts/test.sh runs two) would restore over each other.
        if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
            raise pytest.UsageError("DKMSKS_RELIABILITY_PREPARED needs one test process: add -n 0")
        # A folder an earlier session prepared (same workload constants): skips ingest + partition.
        root = Path(reuse)
        objects, events = root / "workload" / "objects.tsv.gz", root / "workload" / "events.tsv.gz"
        oracle = {t: root / "oracle" / f"oracle-{t}.jsonl" for t in range(TIMESTAMPS + 1)}
        assert all(p.exists() for p in oracle.values()), f"{reuse} lacks oracle exports"
        prep = json.loads((root / "prepared.json").read_text())["prep_seconds"]
        return Prepared(root / "workload", objects, events, root / "warehouse", root / "snapshot", oracle,
                        TIMESTAMPS, WORKERS, prep)
    root = tmp_path_factory.mktemp("reliability")
    workload = root / "workload"
    h.run(h.dkm_cmd("generate", "--source", str(source), "--out", str(workload), "--o-init", str(O_INIT),
                    "--subscriptions", str(SUBSCRIPTIONS), "--timestamps", str(TIMESTAMPS),
                    "--objects-per-ts", str(OBJECTS_PER_TS), "--inserts-per-ts", str(INSERTS_PER_TS),
                    "--deletes-per-ts", str(DELETES_PER_TS), "--k-max", str(K_MAX), "--seed", str(SEED)))
    objects, events = workload / "objects.tsv.gz", workload / "events.tsv.gz"
    warehouse = root / "warehouse"
    started = time.perf_counter()
    h.run(h.entry_points_cmd([
        ("spark_apps/ingest.py", ["--warehouse", str(warehouse), "--objects", str(objects),
                                  "--events", str(events), "--run-id", "prep"]),
        ("spark_apps/partition.py", ["--warehouse", str(warehouse), *PARTITION_ARGS, "--run-id", "prep"]),
    ]), warehouse, timeout=1200)
    prep_seconds = time.perf_counter() - started
    snap = root / "snapshot"
    h.snapshot(warehouse, snap)
    oracle = oracle_exports(objects, events, range(TIMESTAMPS + 1), root / "oracle")
    (root / "prepared.json").write_text(json.dumps({"prep_seconds": prep_seconds}))
    return Prepared(workload, objects, events, warehouse, snap, oracle, TIMESTAMPS, WORKERS, prep_seconds)


def inspect(warehouse: Path, out: Path, timestamps: range) -> dict:
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
