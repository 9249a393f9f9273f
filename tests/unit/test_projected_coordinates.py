"""A workload in projected metres (EPSG:3857) through ``dkm oracle`` and ``dkm simulate``.

docs/design.md §1: coordinates are any finite numbers. Issue 15 found such a workload refused row by
row, and ``dkm oracle`` exiting 0 with 0 results. Now every row loads, the in-memory engine
equals the oracle, and ``--bounds wgs84`` (a check the user asks for) refuses every row with a
non-zero exit and one line naming the commonest reason.
"""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import projected_workload
from dkmsks.cli import main as dkm
from dkmsks.core.workload import WorkloadSpec

pytestmark = [pytest.mark.unit, pytest.mark.realdata]

SPEC = WorkloadSpec(o_init=2000, subscriptions=200, timestamps=3, objects_per_ts=100, inserts_per_ts=10,
                    deletes_per_ts=10, k_max=5, seed=15)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return projected_workload(tmp_path_factory.mktemp("metres"), SPEC)


def _results(path) -> dict[int, dict]:
    return {row["sub_id"]: row for row in map(json.loads, path.read_text().splitlines())}


def test_the_oracle_and_the_engine_agree_on_a_workload_in_metres(files, tmp_path, capsys):
    objects, events = files
    with gzip.open(objects, "rt") as fh:
        first_row = fh.read().splitlines()[1].split("\t")
    assert abs(float(first_row[1])) > 180  # metres, far outside any longitude

    oracle, engine = tmp_path / "oracle.jsonl", tmp_path / "engine.jsonl"
    assert dkm(["oracle", "--objects", str(objects), "--events", str(events), "--out", str(oracle)]) == 0
    assert dkm(["simulate", "--objects", str(objects), "--events", str(events), "--method", "dkm", "--workers", "4",
                "--grid", "256", "--export", str(engine), "--quiet"]) == 0
    assert "rejected" not in capsys.readouterr().err  # every row loaded
    assert engine.read_bytes() == oracle.read_bytes()

    # 200 initial subscriptions, 3 timestamps of 10 insertions and 10 deletions: 200 live.
    results = _results(oracle)
    assert len(results) == 200
    assert sum(1 for r in results.values() if r["object_ids"]) >= 190  # nearly every one has neighbours
    assert max(d for r in results.values() for d in r["distances"]) > 1000  # distances are in metres

    # A box that holds every point changes nothing.
    boxed = tmp_path / "boxed.jsonl"
    world = "--bounds=-20037508.35,-20037508.35,20037508.35,20037508.35"
    assert dkm(["oracle", "--objects", str(objects), "--events", str(events), "--out", str(boxed), world]) == 0
    assert boxed.read_bytes() == oracle.read_bytes()


@pytest.mark.parametrize("command", ["oracle", "simulate"])
def test_wgs84_bounds_refuse_every_row_with_exit_2_and_the_commonest_reason(files, tmp_path, capsys, command):
    objects, events = files
    extra = ["--out", str(tmp_path / "r.jsonl")] if command == "oracle" else ["--method", "kop", "--workers", "2"]
    assert dkm([command, "--objects", str(objects), "--events", str(events), "--bounds", "wgs84", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # one line, no traceback
    rows = SPEC.o_init + SPEC.timestamps * SPEC.objects_per_ts
    assert err[0].startswith(f"dkm {command}: error: {objects}: all {rows:,} row(s) were rejected, nothing was "
                             f"loaded; commonest reasons: {rows:,} like line 2: x '")
    assert err[0].endswith("' is outside the --bounds range [-180.0, 180.0]")
    assert not (tmp_path / "r.jsonl").exists()
