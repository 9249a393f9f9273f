"""How many timestamps a follow round takes: ``--max-timestamps`` and its default.

A round holds its timestamps' payload and records until it commits, so follow mode caps a
round by default (:data:`dkmsks.jobs.follow.ROUND_TIMESTAMPS`); the rounds themselves are
tested with real follow processes in tests/reliability/test_live.py.
"""

from __future__ import annotations

import inspect

import pytest

pytestmark = pytest.mark.unit


def test_an_absent_flag_is_the_default_cap_and_zero_is_no_cap():
    from dkmsks.jobs.follow import ROUND_TIMESTAMPS, follow_forever, round_cap

    assert round_cap(None) == ROUND_TIMESTAMPS
    assert round_cap(0) is None
    assert round_cap(7) == 7
    # Python callers get the same cap as the command line.
    assert inspect.signature(follow_forever).parameters["max_timestamps"].default == ROUND_TIMESTAMPS


def test_dkm_follow_parses_the_flag_and_refuses_a_negative_one(capsys):
    from dkmsks.cli import build_parser
    from dkmsks.jobs.follow import ROUND_TIMESTAMPS

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["follow", "--help"])
    assert f"(default {ROUND_TIMESTAMPS}, which bounds" in " ".join(capsys.readouterr().out.split())
    assert parser.parse_args(["follow"]).max_timestamps is None
    assert parser.parse_args(["follow", "--max-timestamps", "0"]).max_timestamps == 0
    assert parser.parse_args(["follow", "--max-timestamps", "25"]).max_timestamps == 25
    with pytest.raises(SystemExit):
        parser.parse_args(["follow", "--max-timestamps", "-1"])
    assert "must be at least 0, got -1" in capsys.readouterr().err


def test_the_spark_app_tells_an_absent_flag_from_zero_in_follow_mode():
    import importlib.util
    from pathlib import Path

    from dkmsks.jobs.follow import ROUND_TIMESTAMPS, round_cap

    path = Path(__file__).resolve().parents[2] / "spark_apps" / "microbatch.py"
    spec = importlib.util.spec_from_file_location("microbatch_app", path)
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    absent = app.parse_args(["--warehouse", "w", "--follow"])
    zero = app.parse_args(["--warehouse", "w", "--follow", "--max-timestamps", "0"])
    assert (absent.max_timestamps, zero.max_timestamps) == (None, None)  # batch runs: all pending either way
    assert round_cap(absent.follow_max_timestamps) == ROUND_TIMESTAMPS
    assert round_cap(zero.follow_max_timestamps) is None
