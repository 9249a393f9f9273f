"""The Python client and dkm subscribe / unsubscribe / results / watch without Spark:
validation with clear errors (exit 2 and one line from the CLI), the next open timestamp,
publishing rows from memory, results and result changes read from a journal written here
the way a run writes it, and no JVM anywhere. Against the oracle: tests/spark/test_live.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pytest

from dkmsks.cli import main
from dkmsks.client import Change, Client
from dkmsks.core.model import Vocabulary
from dkmsks.storage import tables
from dkmsks.storage.journal import commit
from dkmsks.storage.lake import Lake
from dkmsks.storage.landing import RefusedRows, take_pending
from lake_tables import partitioned_warehouse

O_INIT = [(1, 0.0, 0.0, ["cafe"], 0), (2, 3.0, 4.0, ["cafe"], 0)]
LIVE = [(100, 0.0, 0.0, ["cafe"], 2), (101, 1.0, 1.0, ["bar"], 1)]


@pytest.fixture
def warehouse(tmp_path):
    return partitioned_warehouse(tmp_path / "wh", objects=O_INIT, subscriptions=LIVE)


@pytest.fixture
def client(warehouse):
    return Client(warehouse)


def landed_events(warehouse):
    rows = Lake.of(warehouse).read(tables.EVENTS).to_pylist()
    return sorted((r["t"], r["op"], r["id"], r["k"]) for r in rows)


def versions(warehouse):
    lake = Lake.of(warehouse)
    return {name: lake.version(name) for name in (tables.OBJECTS, tables.EVENTS, tables.QUARANTINE)}


# --------------------------------------------------------------------------- subscribe / unsubscribe


@pytest.mark.unit
def test_subscribe_and_unsubscribe_land_at_the_next_open_timestamp(warehouse, client):
    assert client.next_open_timestamp() == 1
    assert client.subscribe(102, 0.5, 0.5, ["cafe", "bar"], 3) == 1
    assert client.unsubscribe(101) == 1
    assert client.subscribe(103, "0.25", "0.75", "bar", "2", t=4) == 4  # text is read as a file's fields
    assert client.unsubscribe(102, t=2) == 2  # registered at t=1, landed, not processed yet
    assert landed_events(warehouse) == [(1, "delete", 101, None), (1, "insert", 102, 3), (2, "delete", 102, None),
                                        (4, "insert", 103, 2)]
    # The pipeline takes t = 1..4: they are closed, and the next open timestamp moves on.
    take_pending(warehouse, Lake.of(warehouse), Vocabulary(), after=0)
    assert client.next_open_timestamp() == 5
    assert client.subscribe(104, 0, 0, "cafe", 1) == 5


@pytest.mark.unit
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"k": 0}, "k is 0, it must be at least 1"),
    ({"k": 1001}, "k is 1001, more than the limit of 1000"),
    ({"k": 2.5}, "k '2.5' is not an integer"),
    ({"x": math.nan}, "x 'nan' is not finite: coordinates must be finite numbers"),
    ({"y": "abc"}, "y 'abc' is not a number"),
    ({"keywords": []}, "keywords are empty"),
    ({"keywords": ""}, "keywords are empty"),
    ({"keywords": "Cafe"}, "keyword 'Cafe' is not normalised (lower-case [a-z0-9] words joined by '_')"),
    ({"keywords": ["cafe bar"]}, "keyword 'cafe bar' is not normalised (lower-case [a-z0-9] words joined by '_')"),
    ({"keywords": "cafe  bar"}, "keywords 'cafe  bar' contain an empty token (use single spaces)"),
    ({"keywords": "a" * 300}, "keyword '" + "a" * 60 + "...' has 300 characters, more than the limit of 256"),
    ({"id": 2**63}, "id '9223372036854775808' is outside the int64 range"),
    ({"id": 5.0}, "id '5.0' is not an integer"),
    ({"t": "soon"}, "t 'soon' is not an integer"),
])
def test_a_bad_field_is_a_value_error_naming_it_and_nothing_lands(warehouse, client, kwargs, message):
    before = versions(warehouse)
    fields = {"id": 7, "x": 0.5, "y": 0.5, "keywords": ["cafe"], "k": 3, **kwargs}
    with pytest.raises(ValueError) as err:
        client.subscribe(**fields)
    assert str(err.value) == message
    assert versions(warehouse) == before


@pytest.mark.unit
def test_bounds_of_the_client_refuse_coordinates_outside(warehouse):
    with pytest.raises(ValueError, match=r"x '500.0' is outside the --bounds range \[-180.0, 180.0\]"):
        Client(warehouse, bounds="wgs84").subscribe(7, 500.0, 0.0, "cafe", 1)


@pytest.mark.unit
def test_liveness_and_closed_timestamps_are_refused_with_the_reason(warehouse, client):
    before = versions(warehouse)
    with pytest.raises(RefusedRows, match="^insert of subscription 100, which is already live$"):
        client.subscribe(100, 0, 0, "cafe", 1)
    with pytest.raises(RefusedRows, match="^delete of subscription 999, which is not live at t=1$"):
        client.unsubscribe(999)
    client.unsubscribe(100)
    with pytest.raises(RefusedRows, match="^delete of subscription 100, which is not live at t=2$"):
        client.unsubscribe(100, t=2)  # the pending deletion counts
    take_pending(warehouse, Lake.of(warehouse), Vocabulary(), after=0)
    with pytest.raises(RefusedRows, match="^timestamp 1 is closed: the pipeline has taken every timestamp up to 1; "
                                          "publish at t > 1$"):
        client.subscribe(105, 0, 0, "cafe", 1, t=1)
    assert versions(warehouse)[tables.QUARANTINE] == before[tables.QUARANTINE]  # refusals are errors, not records


SUBSCRIBE = ["--id", "7", "--x", "0.5", "--y", "0.5", "--keywords", "cafe", "--k", "3"]


def _with(flag, value):
    args = list(SUBSCRIBE)
    args[args.index(flag) + 1] = value
    return args


@pytest.mark.unit
@pytest.mark.parametrize(("argv", "message"), [
    (["subscribe", *_with("--k", "0")], "k is 0, it must be at least 1"),
    (["subscribe", *_with("--k", "1001")], "k is 1001, more than the limit of 1000"),
    (["subscribe", *_with("--x", "NaN")], "x 'NaN' is not finite: coordinates must be finite numbers"),
    (["subscribe", *_with("--keywords", "")], "keywords are empty"),
    (["subscribe", *_with("--keywords", "Caf\u00e9")], "keyword 'Caf\u00e9' is not normalised "
                                                      "(lower-case [a-z0-9] words joined by '_')"),
    (["subscribe", *_with("--id", "9223372036854775808")], "id '9223372036854775808' is outside the int64 range"),
    (["subscribe", *_with("--id", "100")], "insert of subscription 100, which is already live"),
    (["unsubscribe", "--id", "999"], "delete of subscription 999, which is not live at t=1"),
    (["subscribe", *SUBSCRIBE, "--t", "0"], "timestamp 0 is closed: the pipeline has taken every timestamp up to 0; "
                                            "publish at t > 0"),
    (["unsubscribe", "--id", "100", "--t", "-3"], "timestamp -3 is closed: the pipeline has taken every timestamp "
                                                  "up to 0; publish at t > 0"),
    (["results", "--sub", "abc"], "id 'abc' is not an integer"),
    (["results", "--sub", "100", "--as-of", "5"], "timestamp 5 has not been processed; processed timestamps run "
                                                  "from 0 to 0"),
])
def test_bad_input_through_the_cli_is_exit_2_and_one_clear_line(warehouse, capsys, argv, message):
    before = versions(warehouse)
    assert main([*argv, "--warehouse", str(warehouse.root)]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"dkm {argv[0]}: error: {message}\n")
    assert versions(warehouse) == before


@pytest.mark.unit
def test_the_cli_subscribes_and_unsubscribes(warehouse, capsys):
    assert main(["subscribe", *SUBSCRIBE, "--x=-0.5", "--warehouse", str(warehouse.root)]) == 0
    assert capsys.readouterr().out == ("subscribed 7 at t=1; its result is exact once t=1 is processed "
                                       "(dkm results --sub 7, dkm watch --sub 7 --from 0)\n")
    assert main(["unsubscribe", "--id", "7", "--t", "3", "--warehouse", str(warehouse.root)]) == 0
    assert capsys.readouterr().out == "unsubscribed 7 at t=3\n"
    assert landed_events(warehouse) == [(1, "insert", 7, 3), (3, "delete", 7, None)]
    x = Lake.of(warehouse).read(tables.EVENTS, columns=["x"]).column("x").to_pylist()
    assert sorted(x, key=lambda v: (v is None, v)) == [-0.5, None]


# --------------------------------------------------------------------------- publish


@pytest.mark.unit
def test_publish_takes_dicts_and_tuples_quarantines_bad_rows_and_replays_to_nothing(warehouse, client):
    objects = [{"id": 10, "x": 0.5, "y": 0.5, "keywords": ["cafe"]},  # no t: the next open timestamp
               (11, 0.6, 0.6, "cafe bar", 2),
               {"id": 12, "x": "abc", "y": 0.5, "keywords": "cafe", "t": 1},
               (13, 0.1, 0.1, "cafe")]  # a short tuple
    events = [{"op": "insert", "id": 300, "x": 0.5, "y": 0.5, "keywords": "cafe", "k": 2},
              ("delete", 101, None, None, None, None, 2),
              {"op": "delete", "id": 999}]
    report = client.publish(objects, events)
    assert (report.objects, report.events, report.first_t, report.last_t) == (2, 2, 1, 2)
    refused = {(target, r.line): r.reason for target, r in report.refused}
    assert refused == {("objects", 3): "x 'abc' is not a number",
                       ("objects", 4): "wrong column count: expected 5, got 4",
                       ("subscription_events", 3): "delete of subscription 999, which is not live at t=1"}
    sources = {r.source for _, r in report.refused}
    assert len(sources) == 1 and sources.pop().startswith("client#")
    assert report.quarantined == 3
    before = versions(warehouse)
    again = client.publish(objects, events)
    assert (again.objects, again.events, again.replayed, again.quarantined) == (0, 0, 4, 0)
    assert versions(warehouse) == before
    with pytest.raises(ValueError, match=r"row 1 has unknown field\(s\) \['lat'\]; the fields are id, x, y"):
        client.publish([{"id": 1, "lat": 2}])


# --------------------------------------------------------------------------- results and watch


def commit_run(warehouse, t, changes):
    """A run's journal commit (DESIGN §8) as far as readers look: the ledger record of ``t``
    and its change records ``(sub_id, change, object_ids, d2)``."""
    n = len(changes)
    commit(Lake.of(warehouse), pa.table({
        "record": ["ledger"] + ["change"] * n, "t": [t] * (n + 1), "plan_version": [0] * (n + 1),
        "run_id": ["test"] * (n + 1), "sub_id": pa.array([None] + [c[0] for c in changes], pa.int64()),
        "change": pa.array([None] + [c[1] for c in changes], pa.string()),
        "object_ids": pa.array([None] + [c[2] for c in changes], pa.list_(pa.int64())),
        "d2": pa.array([None] + [c[3] for c in changes], pa.list_(pa.float64())),
    }), t)


@pytest.fixture
def processed(warehouse):
    """t=1: 100 gets objects 1 and 2; 101 is deleted; 102 registers with no result yet.
    t=2: 102 gets object 2."""
    commit_run(warehouse, 1, [(102, "insert", [], []), (100, "update", [1, 2], [0.0, 25.0]),
                              (101, "delete", None, None)])
    commit_run(warehouse, 2, [(102, "update", [2], [4.0])])
    return warehouse


@pytest.mark.unit
def test_results_are_exact_at_each_processed_timestamp_or_a_clear_error(processed, client):
    r = client.results(100)
    assert (r.sub_id, r.t, r.object_ids, r.distances) == (100, 2, [1, 2], [0.0, 5.0])
    assert client.results(102, as_of=1).object_ids == []
    assert client.results(101, as_of=0).t == 0
    with pytest.raises(ValueError, match="^subscription 101 is not live at t=2: it was never registered, or it "
                                         "was deleted"):
        client.results(101)
    client.subscribe(103, 0, 0, "cafe", 1)
    with pytest.raises(ValueError, match="^subscription 103 is not live at t=2: its registration at t=3 is "
                                         "landed but not processed yet"):
        client.results(103)


@pytest.mark.unit
def test_watch_yields_each_change_in_apply_order_and_resumes_after_a_timestamp(processed, client):
    everything = list(client.watch(from_t=0, follow=False))
    assert everything == [Change(1, 101, "delete", (), ()), Change(1, 102, "insert", (), ()),
                          Change(1, 100, "update", (1, 2), (0.0, 5.0)), Change(2, 102, "update", (2,), (2.0,))]
    assert list(client.watch([102], from_t=1, follow=False)) == everything[3:]
    assert list(client.watch(100, from_t=0, follow=False)) == everything[2:3]
    assert list(client.watch(follow=False)) == []  # default: from the last processed timestamp on
    assert list(client.watch(from_t=0, until=1)) == everything[:3]


@pytest.mark.unit
def test_watch_follows_new_commits_until_a_timestamp(processed, client):
    later = threading.Timer(0.5, commit_run, (processed, 3, [(100, "update", [5], [1.0])]))
    later.start()
    started = time.monotonic()
    got = list(client.watch([100], poll=0.1, until=3))
    later.join()
    assert got == [Change(3, 100, "update", (5,), (1.0,))] and time.monotonic() - started >= 0.4


@pytest.mark.unit
def test_dkm_watch_and_results_print_one_line_each(processed, capsys):
    wh = ["--warehouse", str(processed.root)]
    assert main(["watch", "--from", "0", "--no-follow", *wh]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "t=1 sub=101 delete", "t=1 sub=102 insert: no result yet", "t=1 sub=100 update: 1 (0), 2 (5)",
        "t=2 sub=102 update: 2 (2)"]
    assert main(["watch", "--from", "1", "--until", "2", "--sub", "102", "--json", *wh]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        {"t": 2, "sub_id": 102, "change": "update", "object_ids": [2], "distances": [2.0]}]
    assert main(["results", "--sub", "100", *wh]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "subscription 100 at t=2: 2 object(s)", "    1                     1  0.0", "    2                     2  5.0"]


NO_JVM = """
import sys
from dkmsks.client import Client
c = Client(sys.argv[1])
c.subscribe(500, 0.5, 0.5, ["cafe"], 2)
c.publish(objects=[(600, 0.5, 0.5, "cafe", None)])
c.unsubscribe(100, t=c.next_open_timestamp() + 1)
c.results(100)
list(c.watch(from_t=0, follow=False))
print(sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j", "delta")))
"""


@pytest.mark.slow  # fresh interpreters running the dkm script: seconds
def test_the_client_never_loads_spark(processed):
    done = subprocess.run([sys.executable, "-c", NO_JVM, str(processed.root)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _imported_and_output(argv, out_file):
    """Run ``argv`` under ``-X importtime``: the modules it imported (a refused import is listed
    too, but none of its submodules), and what it printed and wrote to ``out_file``."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    written = out_file.read_text() if out_file.exists() else None
    out_file.unlink(missing_ok=True)
    return imported, done.stdout, written


@pytest.mark.slow  # fresh interpreters running the dkm script: seconds
@pytest.mark.parametrize("command, plain_loads_pandas", [
    (["status"], True), (["results", "--sub", "100"], True),
    (["watch", "--from", "0", "--no-follow"], False),  # on this warehouse it converts nothing by pa.array
    (["export", "--out", "OUT"], True)])
def test_the_dkm_script_keeps_pandas_out_of_the_arrow_only_readers(processed, tmp_path, command, plain_loads_pandas):
    from dkmsks.cli import ARROW_ONLY_COMMANDS

    assert command[0] in ARROW_ONLY_COMMANDS
    out = tmp_path / "export.jsonl"
    argv = [str(out) if a == "OUT" else a for a in command] + ["--warehouse", str(processed.root)]
    script, printed, written = _imported_and_output(["-m", "dkmsks.cli", *argv], out)
    assert "pyarrow" in script and not any(m.startswith("pandas.") for m in script)
    # The same command through main() in a process that may import pandas: the same answer
    # (and pyarrow imports it there, so the script's finder is what kept it out).
    in_process = "import sys; from dkmsks.cli import main; sys.exit(main(sys.argv[1:]))"
    plain, printed_plain, written_plain = _imported_and_output(["-c", in_process, *argv], out)
    assert ("pandas.core.frame" in plain) == plain_loads_pandas
    assert (printed, written) == (printed_plain, written_plain) and printed.strip()
    if command[0] == "export":
        assert written and len(written.splitlines()) == 2  # subscriptions 100 and 102


@pytest.mark.slow  # fresh interpreters running the dkm script: seconds
def test_ctrl_c_ends_dkm_watch_cleanly(processed):
    import os
    import signal
    from pathlib import Path

    dkm = Path(sys.executable).with_name("dkm")
    proc = subprocess.Popen([str(dkm), "watch", "--from", "0", "--poll", "0.1", "--warehouse", str(processed.root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        printed = [proc.stdout.readline().rstrip("\n") for _ in range(4)]
        time.sleep(0.5)  # following: waiting for the next commit
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert printed[-1] == "t=2 sub=102 update: 2 (2)"
    assert proc.returncode == 0 and "Traceback" not in err, err


@pytest.mark.unit
def test_values_become_the_text_a_file_would_hold():
    """Built-in numbers take a fast path; subclasses and numpy scalars the general one: all
    are written exactly, nothing coerced (a bool or a float id is left for the rules to refuse)."""
    import enum

    import numpy as np

    from dkmsks.client import _text

    class Level(enum.IntEnum):
        HIGH = 3

    values = [None, "café", 7, -12, 5.0, 0.1, -0.0, 1e300, float("nan"), True, Level.HIGH, np.int64(9),
              np.float32(0.5), np.float64(2.5)]
    assert [_text(v) for v in values] == ["", "café", "7", "-12", "5.0", "0.1", "-0.0", "1e+300", "nan", "True",
                                         "3", "9", "0.5", "2.5"]
