"""The bad-input catalogue end to end: files through ``dkm run``/``dkm publish``/the ingest
job, batches that conflict with what is landed or processed, and whole inputs that are
unusable. Each bad row lands in ``quarantine`` with its reason, ``dkm status`` counts it,
every good row is processed: ``dkm export`` equals ``dkm oracle`` on the good rows only.

Expectations come from the hand-written catalogue in ``tests/bad_inputs.py`` and from the
rows this test adds, never from the readers under test.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

import bad_inputs as cat
from conftest import require_real_data

from . import rel_harness as h
from .conftest import PARTITION_ARGS, inspect, oracle_exports

pytestmark = pytest.mark.realdata

ID_SHIFT = 1_000_000  # workload subscription ids move clear of the catalogue's (100..114, 999)
T = 5  # the workload has t = 1..4; the catalogue adds events at t = 5


def _lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return fh.read().splitlines()


def _shift_event(line: str) -> str:
    f = line.split("\t")
    f[1] = str(int(f[1]) + ID_SHIFT)
    return "\t".join(f)


def _write(path: Path, rows: list[str | bytes]) -> Path:
    path.write_bytes(b"".join((r if isinstance(r, bytes) else r.encode()) + b"\n" for r in rows))
    return path


# --------------------------------------------------------------------------- numpy readers (no JVM)


@pytest.mark.unit
def test_whole_inputs_fail_clearly_or_load_in_the_numpy_readers(tmp_path):
    from dkmsks.core.model import Vocabulary
    from dkmsks.io.formats import read_objects
    from dkmsks.io.rejections import InputError

    for name, (path, outcome) in cat.write_whole_object_files(tmp_path).items():
        if outcome.startswith("error: "):
            with pytest.raises(InputError, match=re.escape(outcome[7:])):
                read_objects(path, Vocabulary())
        else:
            load = read_objects(path, Vocabulary())
            assert (len(load.objects), load.rejections) == (int(outcome[6:]), []), name


@pytest.mark.unit
def test_the_catalogue_covers_at_least_fifteen_kinds():
    assert len(cat.KINDS) >= 15
    assert {where for _, _, where in cat.KINDS} == {"file", "batch", "whole", "bounds"}


# --------------------------------------------------------------------------- end to end


@pytest.mark.reliability
def test_bad_rows_are_quarantined_with_reasons_and_good_rows_equal_the_oracle(tmp_path):
    source = require_real_data()
    gen = tmp_path / "generated"
    h.run(h.dkm_cmd("generate", "--source", str(source), "--out", str(gen), "--o-init", "2000",
                    "--subscriptions", "200", "--timestamps", "4", "--objects-per-ts", "100",
                    "--inserts-per-ts", "10", "--deletes-per-ts", "10", "--k-max", "5", "--seed", "23"))
    obj_lines, ev_lines = _lines(gen / "objects.tsv.gz"), _lines(gen / "events.tsv.gz")
    obj_rows, ev_rows = obj_lines[1:], [_shift_event(r) for r in ev_lines[1:]]

    # The dirty files users deliver: the workload, then the catalogue's good and bad rows. Rows
    # outside WGS84 (longitude -200, EPSG:3857 metres) are good: no --bounds is given.
    dirty, clean = tmp_path / "dirty", tmp_path / "clean"
    dirty.mkdir()
    clean.mkdir()
    good_objects = [*cat.GOOD_OBJECTS, *[r for r, _ in cat.OUTSIDE_WGS84_OBJECTS]]
    good_events = [r for r, _ in cat.OUTSIDE_WGS84_EVENTS]
    _write(dirty / "objects.tsv", [cat.OBJECTS_HEADER, *obj_rows, *good_objects, *[r for r, _ in cat.BAD_OBJECTS]])
    _write(dirty / "events.tsv", [cat.EVENTS_HEADER, *ev_rows, *[r for r, _ in cat.EVENT_ROWS], *good_events])
    expected_bad = {("objects", "objects.tsv", 2 + len(obj_rows) + len(good_objects) + i): reason
                    for i, (_, reason) in enumerate(cat.BAD_OBJECTS)}
    expected_bad.update({("subscription_events", "events.tsv", 2 + len(ev_rows) + i): reason
                         for i, (_, reason) in enumerate(cat.EVENT_ROWS) if reason})

    # A later batch that conflicts with what is landed and processed (t <= 2 by then).
    landed_obj = obj_rows[0].split("\t")  # an O_init object
    moved = "\t".join([landed_obj[0], "-99.0", "41.0", landed_obj[3], "4"])
    new_obj = "\t".join(["900002", landed_obj[1], landed_obj[2], landed_obj[3], "4"])
    inserted = {r.split("\t")[1] for r in ev_rows if r.startswith("insert") and r.endswith("\t0")}
    deleted = {r.split("\t")[1] for r in ev_rows if r.startswith("delete")}
    never_deleted = sorted(inserted - deleted, key=int)
    live_a, live_b = never_deleted[0], never_deleted[1]
    sub_template = next(r for r in ev_rows if r.split("\t")[1] == live_a).split("\t")
    batch_objects = [
        "\t".join(["900001", landed_obj[1], landed_obj[2], landed_obj[3], "1"]),  # late
        moved,  # an id landed earlier with other values
        obj_rows[1],  # an exact replay of another landed row: accepted, changes nothing
        new_obj,  # good
    ]
    batch_events = [
        "\t".join(["insert", "900100", *sub_template[2:6], "2"]),  # late
        "\t".join(["insert", live_b, *sub_template[2:6], "4"]),  # insert of a subscription live since t=0
        f"delete\t{live_a}\t\t\t\t\t4",  # good: deletes a subscription an earlier file registered
    ]
    _write(dirty / "batch-objects.tsv", [cat.OBJECTS_HEADER, *batch_objects])
    _write(dirty / "batch-events.tsv", [cat.EVENTS_HEADER, *batch_events])
    expected_bad.update({
        ("objects", "batch-objects.tsv", 2): "t=1 is already processed",
        ("objects", "batch-objects.tsv", 3): f"duplicate object id {landed_obj[0]} (already ingested from objects.tsv",
        ("subscription_events", "batch-events.tsv", 2): "t=2 is already processed",
        ("subscription_events", "batch-events.tsv", 3): f"insert of subscription {live_b}, which is already live",
    })

    # The good rows only, for the oracle: the workload, the catalogue's good rows, the batch's.
    _write(clean / "objects.tsv", [cat.OBJECTS_HEADER, *obj_rows, *good_objects, new_obj])
    _write(clean / "events.tsv", [cat.EVENTS_HEADER, *ev_rows, *[r for r, why in cat.EVENT_ROWS if why is None],
                                  *good_events, batch_events[2]])
    oracle = oracle_exports(clean / "objects.tsv", clean / "events.tsv", range(T + 1), tmp_path / "oracle")
    from dkmsks.core.model import Vocabulary
    from dkmsks.io.formats import read_events, read_objects

    assert read_objects(clean / "objects.tsv", Vocabulary()).rejections == []  # the clean files are clean
    assert read_events(clean / "events.tsv", Vocabulary()).rejections == []

    wh = tmp_path / "warehouse"
    whole = cat.write_whole_object_files(dirty)
    # A file whose every row is rejected fails, but its rows are quarantined for inspection.
    expected_bad.update({("objects", "all-rejected.tsv", line): reason
                         for line, reason in cat.ALL_REJECTED_LINES.items()})
    ingest = lambda *a: ("spark_apps/ingest.py", ["--warehouse", str(wh), "--run-id", "bad", *a])  # noqa: E731
    dkm = lambda *a: ("dkm", [a[0], "--warehouse", str(wh), *a[1:]])  # noqa: E731
    steps = [
        dkm("run", "--objects", str(dirty / "objects.tsv"), "--events", str(dirty / "events.tsv"),
            *PARTITION_ARGS, "--until", "2"),
        dkm("publish", "--objects", str(dirty / "objects.tsv"), "--events", str(dirty / "events.tsv"),
            "--timestamps", "3"),
        ingest("--objects", str(dirty / "batch-objects.tsv"), "--events", str(dirty / "batch-events.tsv")),
        ("spark_apps/microbatch.py", ["--warehouse", str(wh), "--run-id", "bad"]),
        *[ingest("--objects", str(path)) for path, _ in whole.values()],
        dkm("run", "--objects", str(whole["truncated.tsv.gz"][0]), "--events", str(dirty / "events.tsv"),
            *PARTITION_ARGS),
        dkm("status"),
    ]
    rec = h.run(h.entry_points_cmd(steps, each=True), wh, timeout=1800, log=tmp_path / "steps.log")
    outcomes = h.steps_of(rec.output)
    assert len(outcomes) == len(steps), rec.tail()
    for step in outcomes[:4] + outcomes[-1:]:
        assert step["rc"] == 0, f"{step['target']} {step['argv'][:2]} failed: {step['error']}\n{rec.tail()}"

    # Whole inputs: one line naming the file and the problem, and the exit status that tells
    # the DAG not to retry; or a load with nothing quarantined.
    for (name, (path, outcome)), step in zip(whole.items(), outcomes[4:-2], strict=True):
        if outcome.startswith("error: "):
            assert (step["rc"], step["error"]) == (2, None), (name, step)
            line = f"dkmsks-ingest: error: {path}: "
            said = [text for text in rec.output.splitlines() if text.startswith(line)]
            assert len(said) == 1 and outcome[7:] in said[0], (name, said)
        else:
            assert step["rc"] == 0, (name, step)
            assert f"objects: {int(outcome[6:]):,} accepted, 0 quarantined" in rec.output, name
    # dkm run on a truncated file: one line (no JVM stack trace), exit 2, nothing loaded.
    assert (outcomes[-2]["rc"], outcomes[-2]["error"]) == (2, None), outcomes[-2]
    truncated = whole["truncated.tsv.gz"][0]
    assert (f"dkm run: error: {truncated}: the gzip data ends early, the file is truncated (an interrupted copy "
            "or download?); nothing was loaded: copy or compress the file again") in rec.output.splitlines()
    assert "EOFException" not in rec.output

    summary = inspect(wh, tmp_path / "inspect", range(T + 1))
    got = {(r[0], r[1], int(r[2])): r[3] for r in summary["quarantine_rows"]}
    missing = {k: v for k, v in expected_bad.items() if k not in got}
    assert not missing, f"bad rows without a quarantine row: {missing}"
    wrong = {k: (v, got[k]) for k, v in expected_bad.items() if v not in got[k]}
    assert not wrong, f"quarantined with another reason: {wrong}"
    extra = {k: v for k, v in got.items() if k not in expected_bad}
    assert not extra, f"good rows quarantined: {extra}"

    # dkm status shows the count and every kind of reason (numbers masked as N).
    status = rec.output[rec.output.rfind("quarantined input rows"):]
    assert status.startswith(f"quarantined input rows: {len(expected_bad)} "), status[:200]
    for kind, reason, where in cat.KINDS:
        if where in ("file", "batch"):
            shown = re.sub(r"[0-9]+", "N", reason)
            assert shown in status, f"dkm status does not show {kind!r} ({shown!r}):\n{status}"

    # Every good row processed: the results at every timestamp equal the oracle on good rows.
    assert summary["ledger"] == [[t, 1] for t in range(T + 1)], summary["ledger"]
    bad_t = [t for t in range(T + 1)
             if (tmp_path / "inspect" / f"export-{t}.jsonl").read_bytes() != oracle[t].read_bytes()]
    assert not bad_t, f"dkm export differs from dkm oracle on the good rows at t={bad_t}"
