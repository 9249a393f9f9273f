"""Maintenance without a JVM: which knn_state versions name their timestamp, the horizon's
setting, conflict retries, and ``dkm maintain --dry-run`` on a warehouse written by delta-rs."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from dkmsks.jobs.maintain import with_conflict_retries
from dkmsks.storage.export import checkpoints_of
from dkmsks.storage.retention import DEFAULT_HOURS, ENV, horizon_hours, retention_properties

pytestmark = pytest.mark.unit


def _commit(version, operation, through=None):
    commit = {"version": version, "operation": operation}
    if through is not None:
        commit["userMetadata"] = json.dumps({"job": "x", "through_t": through})
    return commit


def test_versions_that_change_no_row_are_exact_where_their_predecessor_was():
    history = [
        _commit(0, "CREATE TABLE"),
        _commit(1, "WRITE", through=0),  # partition
        _commit(2, "OPTIMIZE"),  # a user's own OPTIMIZE: same rows
        _commit(3, "MERGE", through=4),  # compaction
        _commit(4, "VACUUM START"),
        _commit(5, "VACUUM END"),
        _commit(6, "DELETE"),  # someone else's change: exact at no known timestamp
        _commit(7, "SET TBLPROPERTIES"),
    ]
    assert checkpoints_of(reversed(history)) == [(0, 1), (0, 2), (4, 3), (4, 4), (4, 5)]


def test_a_version_whose_predecessors_expired_from_the_log_names_no_timestamp():
    # Log cleanup kept versions 5.. only: the OPTIMIZE's predecessor is unknown, the tagged
    # maintenance commit after it is exact again.
    history = [_commit(5, "OPTIMIZE"), _commit(6, "SET TBLPROPERTIES", through=4),
               {"version": 7, "operation": "OPTIMIZE", "userMetadata": "free text from a user"}]
    assert checkpoints_of(history) == [(4, 6), (4, 7)]


def test_the_horizon_comes_from_the_flag_the_environment_or_the_default(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert horizon_hours() == DEFAULT_HOURS == 168
    monkeypatch.setenv(ENV, "36")
    assert horizon_hours() == 36 and horizon_hours(2) == 2
    monkeypatch.setenv(ENV, "a week")
    with pytest.raises(ValueError, match=f"{ENV}='a week': give a whole number of hours"):
        horizon_hours()
    with pytest.raises(ValueError, match="at least 0 hours"):
        horizon_hours(-1)
    assert retention_properties(36) == {"delta.logRetentionDuration": "interval 36 hours",
                                        "delta.deletedFileRetentionDuration": "interval 36 hours"}


class Conflict(Exception):
    pass


def test_a_conflicting_commit_is_retried_then_skipped_with_the_reason():
    calls = []

    def twice_then_ok():
        calls.append(1)
        if len(calls) < 3:
            raise Conflict("a concurrent OPTIMIZE removed the files\nstack ...")
        return "done"

    assert with_conflict_retries(twice_then_ok, (Conflict,), pause=0) == ("done", "")

    def always():
        raise Conflict("a concurrent OPTIMIZE removed the files")

    result, note = with_conflict_retries(always, (Conflict,), attempts=2, pause=0)
    assert result is None
    assert note == ("skipped after 2 commit conflicts with concurrent writers "
                    "(a concurrent OPTIMIZE removed the files)")

    def broken():
        raise KeyError("not a conflict")

    with pytest.raises(KeyError):
        with_conflict_retries(broken, (Conflict,), pause=0)


def test_dry_run_reports_without_spark_and_changes_nothing(tmp_path, capsys):
    from deltalake import DeltaTable, write_deltalake

    from dkmsks.cli import main

    objects = tmp_path / "tables" / "objects"
    for t in range(3):  # three publishes: three small files
        write_deltalake(str(objects), pa.table({"id": [t], "t": [t]}), mode="append")
    write_deltalake(str(objects), pa.table({"id": [9], "t": [9]}), mode="overwrite")  # 3 files unreferenced
    version = DeltaTable(str(objects)).version()

    assert main(["maintain", "--warehouse", str(tmp_path), "--retention-hours", "0", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run: as-of horizon 0 h (delta.logRetentionDuration = 'interval 0 hours', " \
           "delta.deletedFileRetentionDuration = 'interval 0 hours')" in out
    assert "warning: a horizon of 0 h is below Delta's default safety of 168 h" in out
    line = " ".join(next(ln for ln in out.splitlines() if ln.split()[:1] == ["objects"]).split())
    assert "live files 1, 0 to compact, 0 with deletion vectors; on disk 4" in line
    assert "up to 3 older than the horizon to vacuum" in line
    assert "would set delta.logRetentionDuration, delta.deletedFileRetentionDuration" in line
    assert "knn_state" in out and "not created yet" in out
    assert DeltaTable(str(objects)).version() == version  # nothing written
