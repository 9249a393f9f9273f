"""The whole pipeline on a warehouse on object storage, as a user runs it, against the oracle.

Real processes on ``s3://dkmsks/<test>`` of the session's object store (the store's endpoint and
credentials in their environment only, each host's files in a local home of the test's own):

1. ``dkm run --until 3``: the Spark ingestion of the first timestamps' files, the initial
   partitioning and the micro-batch of t = 1..3;
2. ``dkm follow`` in the background, while ``dkm publish`` lands t = 4 and 5 from the workload's
   files, ``dkm subscribe`` a new subscription at t = 6 and ``dkm unsubscribe`` an initial one
   at t = 7 (the workload's later timestamps are moved to 8.. to make room for them); follow
   processes each as it lands and stops at t = 7;
3. in one more process (one JVM): ``dkm repartition`` (a SOP plan), ``dkm publish`` of
   t = 8..10, ``spark_apps/microbatch.py`` over them, ``dkm maintain``, and ``dkm export
   --as-of T`` at every timestamp.

Each export equals ``dkm oracle --as-of T`` on the workload plus the two interactive events,
byte for byte; the ledger holds each timestamp once; the local home holds this host's process
files only (no table, no lock, no seal): the warehouse is on the store.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from pathlib import Path

import pytest

from conftest import require_real_data
from dkmsks.storage import tables
from dkmsks.storage.lake import Lake
from dkmsks.warehouse import Warehouse

from . import rel_harness as h
from .conftest import oracle_exports

pytestmark = [pytest.mark.reliability, pytest.mark.realdata]

O_INIT, SUBSCRIPTIONS, WORKLOAD_TIMESTAMPS, WORKERS = 3000, 400, 8, 3
#: The workload's timestamps after this one move up by two, for the interactive events.
SHIFT_AFTER, SUBSCRIBE_T, UNSUBSCRIBE_T = 5, 6, 7
T = WORKLOAD_TIMESTAMPS + 2
NEW_ID = 9_000_001


def _rows(path: Path) -> tuple[str, list[list[str]]]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        header, *lines = f.read().splitlines()
    return header, [line.split("\t") for line in lines if line]


def _write(path: Path, header: str, rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8", newline="") as f:
        f.write("\n".join([header, *("\t".join(r) for r in rows)]) + "\n")
    return path


def _shifted(rows: list[list[str]]) -> list[list[str]]:
    """Rows with their timestamp (the last column) moved past the interactive ones."""
    return [[*r[:-1], str(int(r[-1]) + 2 if int(r[-1]) > SHIFT_AFTER else int(r[-1]))] for r in rows]


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    """The workload files (all timestamps, and the first three alone), the two interactive
    events, and ``dkm oracle`` at every timestamp of them all."""
    source = require_real_data()
    root = tmp_path_factory.mktemp("s3-pipeline")
    gen = root / "generated"
    h.run(h.dkm_cmd("generate", "--source", str(source), "--out", str(gen), "--o-init", str(O_INIT),
                    "--subscriptions", str(SUBSCRIPTIONS), "--timestamps", str(WORKLOAD_TIMESTAMPS),
                    "--objects-per-ts", "100", "--inserts-per-ts", "10", "--deletes-per-ts", "10", "--k-max", "5",
                    "--seed", "29"))
    o_head, objects = _rows(gen / "objects.tsv.gz")
    e_head, events = _rows(gen / "events.tsv.gz")
    objects, events = _shifted(objects), _shifted(events)
    first = [r for r in objects if int(r[-1]) <= 3], [r for r in events if int(r[-1]) <= 3]
    files = {"objects": _write(root / "all" / "objects.tsv.gz", o_head, objects),
             "events": _write(root / "all" / "events.tsv.gz", e_head, events),
             "first_objects": _write(root / "first" / "objects.tsv.gz", o_head, first[0]),
             "first_events": _write(root / "first" / "events.tsv.gz", e_head, first[1])}
    # The new subscription: where an object of t = 8 is, with its first keyword.
    first_later = next(r for r in objects if int(r[-1]) == SHIFT_AFTER + 3)
    subscribe = {"x": first_later[1], "y": first_later[2], "keyword": first_later[3].split(" ")[0], "k": 3}
    # An initial subscription that stays live through the workload, deleted by hand.
    deleted = {int(r[1]) for r in events if r[0] == "delete"}
    unsubscribe = next(int(r[1]) for r in events if r[0] == "insert" and int(r[-1]) == 0 and int(r[1]) not in deleted)
    with_them = [*events,
                 ["insert", str(NEW_ID), subscribe["x"], subscribe["y"], subscribe["keyword"], "3", str(SUBSCRIBE_T)],
                 ["delete", str(unsubscribe), "", "", "", "", str(UNSUBSCRIBE_T)]]
    oracle_events = _write(root / "oracle" / "events.tsv.gz", e_head, sorted(with_them, key=lambda r: int(r[-1])))
    oracle = oracle_exports(files["objects"], oracle_events, range(T + 1), root / "oracle")
    return root, files, subscribe, unsubscribe, oracle


def _wait_processed(home: Path, t: int, follow: h.Monitored, timeout: float = 300) -> None:
    """Until the follow process reports timestamp ``t`` committed (its status file in the local home)."""
    status = home / "run" / "follow-default.status.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = json.loads(status.read_text()).get("last_t") if status.exists() else None
        if last is not None and last >= t:
            return
        assert follow.proc.poll() is None, f"follow ended before t={t}:\n{''.join(follow._out_lines)[-3000:]}"
        time.sleep(0.3)
    raise AssertionError(f"follow did not process t={t} within {timeout:.0f} s:\n{''.join(follow._out_lines)[-3000:]}")


def test_run_follow_publish_subscribe_repartition_and_maintain_on_object_storage(workload, s3_warehouse, tmp_path):
    root, files, subscribe, unsubscribe, oracle = workload
    uri = s3_warehouse
    home = Warehouse(uri).root
    assert home == tmp_path / "local"  # the s3_warehouse fixture's DKMSKS_LOCAL_DIR
    timings: dict[str, float] = {}

    def timed(name: str, *args, **kwargs) -> h.RunRecord:
        started = time.monotonic()
        rec = h.run(*args, **kwargs)
        timings[name] = round(time.monotonic() - started, 1)
        return rec

    # 1. The first timestamps through Spark: ingestion, partitioning, micro-batch.
    timed("dkm run --until 3", h.dkm_cmd("run", "--objects", str(files["first_objects"]),
                                         "--events", str(files["first_events"]), "--warehouse", uri,
                                         "--workers", str(WORKERS), "--gamma1", "40", "--grid", "256",
                                         "--until", "3"), timeout=900)

    # 2. Follow mode while publishers and subscribers land the next timestamps.
    started = time.monotonic()
    follow = h.Monitored(h.dkm_cmd("follow", "--warehouse", uri, "--until", str(UNSUBSCRIBE_T), "--idle-exit", "300",
                                   "--slots", str(WORKERS + 2), "--poll", "0.2", "--nice", "0"), None)
    try:
        for t in (4, 5):
            h.run(h.dkm_cmd("publish", "--objects", str(files["objects"]), "--events", str(files["events"]),
                            "--warehouse", uri, "--after", str(t - 1), "--timestamps", "1"), timeout=300)
            _wait_processed(home, t, follow)
        h.run(h.dkm_cmd("subscribe", "--warehouse", uri, "--id", str(NEW_ID), "--x", subscribe["x"],
                        "--y", subscribe["y"], "--keywords", subscribe["keyword"], "--k", str(subscribe["k"]),
                        "--t", str(SUBSCRIBE_T)), timeout=300)
        _wait_processed(home, SUBSCRIBE_T, follow)
        h.run(h.dkm_cmd("unsubscribe", "--warehouse", uri, "--id", str(unsubscribe), "--t", str(UNSUBSCRIBE_T)),
              timeout=300)
        rec = follow.wait(300)  # --until 7: it stops once t = 7 is committed
    finally:
        follow.kill()
    timings["follow (t = 4..7)"] = round(time.monotonic() - started, 1)
    assert rec.returncode == 0, rec.tail()

    # 3. A new plan, the last timestamps, maintenance and the exports: one JVM.
    out = tmp_path / "exports"
    steps = [("dkm", ["repartition", "--warehouse", uri, "--method", "sop", "--workers", str(WORKERS),
                      "--theta", "4", "--run-id", "re"]),
             ("dkm", ["publish", "--objects", str(files["objects"]), "--events", str(files["events"]),
                      "--warehouse", uri, "--after", str(UNSUBSCRIBE_T), "--timestamps", str(T - UNSUBSCRIBE_T)]),
             ("spark_apps/microbatch.py", ["--warehouse", uri, "--run-id", "rest"]),
             ("dkm", ["maintain", "--warehouse", uri]),
             *[("dkm", ["export", "--warehouse", uri, "--as-of", str(t), "--out", str(out / f"export-{t}.jsonl")])
               for t in range(T + 1)]]
    last = timed("repartition, publish, micro-batch, maintain, exports", h.entry_points_cmd(steps), timeout=1200)
    print(json.dumps(timings))

    differ = [t for t in range(T + 1) if (out / f"export-{t}.jsonl").read_bytes() != oracle[t].read_bytes()]
    assert not differ, f"dkm export differs from dkm oracle at t={differ}"
    assert "plan 1: sop" in last.output, last.tail()
    # dkm maintain went over the tables on the store (its report: a line per table).
    assert f"warehouse {uri}" in last.output and re.search(r"\n  journal +live files", last.output), last.tail()
    ledger = sorted(r["t"] for r in Lake.of(Warehouse(uri)).read(tables.JOURNAL, columns=["record", "t"]).to_pylist()
                    if r["record"] == "ledger")
    assert ledger == list(range(T + 1)), ledger
    # The warehouse is on the store; the local home holds this host's process files only.
    kept = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
    assert not [p for p in kept if p.split("/")[0] in ("tables", "locks")
                or p.endswith((".parquet", ".lock", ".sealed")) or "_delta_log" in p], kept
    assert (home / "run" / "follow-default.status.json").exists(), kept
