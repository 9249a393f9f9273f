"""A follow round as bytes (jobs/follow/wire.py): Arrow IPC and JSON, never a pickle.

A round comes back exactly as it went (every array equal, with its dtype, writable as an
unpickled one was; empty rounds too; the change files' schema whole); bytes that are not a
round of this version are refused with an error that says so, and nothing in them is run;
no module of follow mode imports pickle or anything else that runs what it reads.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dkmsks.jobs.follow import ChangeFiles, Round
from dkmsks.jobs.follow.wire import MAGIC, RoundFormatError, decode_round, encode_round
from dkmsks.spark.bridge import BatchPayload, KeywordColumn
from follow_payloads import payload

pytestmark = pytest.mark.unit

FOLLOW = Path(__file__).resolve().parents[2] / "lib" / "dkmsks" / "jobs" / "follow"
CHANGES = ChangeFiles("/warehouse/tables/default/journal",
                      pa.schema([("t", pa.int64()), ("object_ids", pa.list_(pa.int64()))], metadata={b"k": b"v"}),
                      plan_version=3, run_id="follow-7")


def _assert_same(got: BatchPayload, sent: BatchPayload) -> None:
    for f in dataclasses.fields(BatchPayload):
        a, b = getattr(got, f.name), getattr(sent, f.name)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), f.name
            assert a.flags.writeable and a.flags.c_contiguous, f.name
        elif isinstance(b, KeywordColumn):
            for part in ("ptr", "ids"):
                x, y = getattr(a, part), getattr(b, part)
                assert x.dtype == y.dtype and np.array_equal(x, y), f"{f.name}.{part}"
                assert x.flags.writeable, f"{f.name}.{part}"
            assert a.words == b.words, f.name
        else:
            assert a == b and type(a) is type(b), f.name


@pytest.mark.parametrize("shape", [
    {"timestamps": 3, "objects": 200, "events": 20},
    {"timestamps": 1, "objects": 1_000, "events": 100},  # a one-timestamp round
    {"timestamps": 2, "objects": 0, "events": 0},  # timestamps with nothing in them
    {"timestamps": 0, "objects": 0, "events": 0},  # nothing at all
    {"timestamps": 2, "objects": 30, "events": 0},  # objects only
])
@pytest.mark.parametrize("files", [None, CHANGES])
def test_a_round_comes_back_exactly(shape: dict[str, int], files: ChangeFiles | None) -> None:
    sent = Round(payload(7, **shape), files)
    got = decode_round(encode_round(sent))
    _assert_same(got.payload, sent.payload)
    if files is None:
        assert got.change_files is None
    else:
        assert got.change_files is not None
        assert got.change_files == files and got.change_files.schema.equals(files.schema, check_metadata=True)


def test_unusual_values_and_dtypes_come_back_as_they_went() -> None:
    p = payload(3, timestamps=1, objects=5, events=3, words=["café", "ünïcode", "a b", "", "x" * 300, "z"])
    sent = dataclasses.replace(
        p, method="ps2", space=(-1e300, -0.0, 5e-324, 1e300), index_options={}, grid=1, probe_timestamps=1,
        obj_x=np.array([np.nextafter(0, 1), -0.0, np.pi, 1e308, -1e-308]),
        obj_ids=np.array([np.iinfo(np.int64).min, -1, 0, 1, np.iinfo(np.int64).max]),
        del_worker=p.del_worker.astype(np.int16), ins_k=p.ins_k.astype(np.int64), ins_y=p.ins_y.astype(np.float32),
    )
    got = decode_round(encode_round(Round(sent))).payload
    _assert_same(got, sent)
    assert np.signbit(got.obj_x[1]) and np.signbit(got.space[1])


def test_a_keyword_column_reads_as_strings_in_any_arrow_reader() -> None:
    sent = payload(5, timestamps=1, objects=4, events=2, words=["cafe", "bar", "park", "zoo", "museum"])
    data = encode_round(Round(sent))
    # the objects' part: after the magic, the header's length and the header (padded to 8 bytes)
    (n,) = struct.unpack_from("<Q", data, len(MAGIC))
    at = len(MAGIC) + 8 + n + (-n % 8)
    (m,) = struct.unpack_from("<Q", data, at)
    objects = pa.ipc.open_stream(pa.py_buffer(data[at + 8:at + 8 + m])).read_all()
    kw = sent.obj_keywords
    expected = [[kw.words[i] for i in kw.ids[kw.ptr[r]:kw.ptr[r + 1]]] for r in range(4)]
    assert objects.column("keywords").to_pylist() == expected
    assert objects.column("ids").to_pylist() == sent.obj_ids.tolist()


RAN: list[str] = []


def _mark() -> None:
    RAN.append("ran")


class _Runs:
    """An object whose unpickling runs code: it marks that it ran (:data:`RAN`)."""

    def __reduce__(self):  # noqa: ANN204
        return (_mark, ())


def _good() -> bytes:
    return encode_round(Round(payload(2, timestamps=2, objects=10, events=2), CHANGES))


def _with_header(change) -> bytes:  # noqa: ANN001
    data = _good()
    (n,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    header = json.loads(data[start:start + n])
    change(header)
    text = json.dumps(header).encode()
    rest = data[start + n + (-n % 8):]
    return MAGIC + struct.pack("<Q", len(text)) + text + bytes(-len(text) % 8) + rest


def _swap_part(index: int, part: bytes) -> bytes:
    """A good round with its ``index``-th part replaced."""
    data, at, parts = _good(), len(MAGIC), []
    while at < len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        parts.append(data[at + 8:at + 8 + n])
        at += 8 + n + (-n % 8)
    parts[index] = part
    return MAGIC + b"".join(struct.pack("<Q", len(p)) + p + bytes(-len(p) % 8) for p in parts)


@pytest.mark.parametrize(("data", "message"), [
    (pickle.dumps(_Runs()), "not a follow round: it does not start with"),
    (pickle.dumps((payload(1, timestamps=1, objects=3, events=1), None), protocol=5), "not a follow round"),
    (b"", "not a follow round"),
    (b"PAR1 a parquet file, say", "not a follow round"),
    (MAGIC, "has 0 parts, not 5"),
    (MAGIC + b"\x01\x02", "ends within a part's length"),
    (MAGIC + struct.pack("<Q", 1 << 40) + b"{}", "part claims 1099511627776 bytes; 2 remain"),
    (_swap_part(0, b"\xff\xfe"), "header is not JSON"),
    (_swap_part(0, b"[1, 2]"), "does not name the format"),
    (_good()[:-40], "follow round"),
    (_with_header(lambda h: h.update(version=2)), "of version 2; this dkmsks reads version 1"),
    (_with_header(lambda h: h.update(format="pickle")), "does not name the format"),
    (_with_header(lambda h: h.pop("grid")), "lacks or mistypes 'grid'"),
    (_with_header(lambda h: h.update(method=["__import__('os').system('true')"])), "lacks or mistypes"),
    (_with_header(lambda h: h.update(space=[0, 1, 2])), "space has 3 values, not 4"),
    (_with_header(lambda h: h.update(timestamps=["1"])), "lacks or mistypes"),
    (_with_header(lambda h: h.update(change_files={"root": "/x"})), "lacks or mistypes 'plan_version'"),
])
def test_what_is_not_a_round_is_refused_and_nothing_in_it_runs(data: bytes, message: str) -> None:
    with pytest.raises(RoundFormatError, match=message):
        decode_round(data)
    assert not RAN


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(("index", "part", "message"), [
    (1, b"\x00" * 64, "tables are not readable Arrow"),
    (2, _ipc(pa.table({"t": [1], "ids": [2]})), r"del_\* table holds 1 batches of columns \['t', 'ids'\]"),
    (2, _ipc(pa.table({"t": [1], "ids": [2], "worker": ["w"]})), "column is string"),
    (2, _ipc(pa.table({"t": [1], "ids": [None], "worker": [0]})), "with 1 nulls"),
    (1, _ipc(pa.table({"ids": [1], "x": [0.5], "y": [0.5], "t": [1], "keywords": [["a"]]})), "keyword column is"),
    (4, b"\x00" * 16, "tables are not readable Arrow"),
])
def test_a_round_with_foreign_tables_is_refused(index: int, part: bytes, message: str) -> None:
    with pytest.raises(RoundFormatError, match=message):
        decode_round(_swap_part(index, part))


@pytest.mark.parametrize(("good", "bad"), [
    (np.array([0, 3, 5], dtype=np.int64), np.array([0, 3, 1 << 40], dtype=np.int64)),  # the keyword offsets
    (np.array([7, 1, 2, 3, 4], dtype=np.int32), np.array([7, 1, 2, 3, 1 << 20], dtype=np.int32)),  # the words' ids
])
def test_offsets_and_indices_out_of_bounds_are_refused_before_numpy_reads_them(good: np.ndarray,
                                                                                bad: np.ndarray) -> None:
    words = pa.DictionaryArray.from_arrays(pa.array([7, 1, 2, 3, 4], type=pa.int32()),
                                           pa.array([f"w{i}" for i in range(8)]))
    keywords = pa.LargeListArray.from_arrays(pa.array([0, 3, 5], type=pa.int64()), words)
    table = pa.table({"ids": [1, 2], "x": [0.5, 0.5], "y": [0.5, 0.5], "t": [1, 1], "keywords": keywords})
    part = _ipc(table)
    assert part.count(good.tobytes()) == 1
    decode_round(_swap_part(1, part))  # as written, it reads
    with pytest.raises(RoundFormatError, match="tables are not readable Arrow"):
        decode_round(_swap_part(1, part.replace(good.tobytes(), bad.tobytes())))


def test_a_keyword_column_not_as_from_sets_makes_it_is_refused_when_written() -> None:
    p = payload(1, timestamps=1, objects=3, events=0)
    kw = p.obj_keywords
    shifted = KeywordColumn(kw.ptr + 1, np.concatenate([[0], kw.ids]).astype(np.int32), kw.words)
    with pytest.raises(ValueError, match="ptr must run from 0"):
        encode_round(Round(dataclasses.replace(p, obj_keywords=shifted)))


#: Modules that run what they read, and builtins that run code.
RUNS_CODE = {"pickle", "_pickle", "cloudpickle", "dill", "marshal", "shelve", "joblib", "jsonpickle", "copyreg"}
RUNS_TEXT = {"eval", "exec", "compile", "__import__"}


def test_no_module_of_follow_mode_imports_pickle_or_runs_what_it_reads() -> None:
    modules = sorted(FOLLOW.glob("*.py"))
    assert {m.name for m in modules} >= {"__init__.py", "channel.py", "spool.py", "wire.py", "worker_loop.py"}
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text(), filename=str(module))):
            where = f"{module.relative_to(FOLLOW.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                assert not {a.name.split(".")[0] for a in node.names} & RUNS_CODE, f"{where} imports a pickle"
            elif isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] not in RUNS_CODE, f"{where} imports from a pickle"
            elif isinstance(node, ast.Name):
                assert node.id not in RUNS_TEXT | RUNS_CODE, f"{where} names {node.id}"
            elif isinstance(node, ast.keyword):
                assert node.arg != "allow_pickle", f"{where} allows a pickle"


@pytest.mark.parametrize("seed", [3, 8])
def test_a_worker_applies_a_decoded_round_as_it_applies_the_round_itself(seed: int) -> None:
    from dkmsks.spark.bridge import WorkerSession
    from test_bridge import T, _initial_state, _payload
    from test_update import adversarial_case

    objects, events = adversarial_case(seed, timestamps=T)
    sent = _payload(objects, events, 3)
    got = decode_round(encode_round(Round(sent))).payload
    _assert_same(got, sent)
    timing = ["knn_ms", "insert_ms", "delete_ms"]

    def records(p: BatchPayload) -> pa.Table:
        session = WorkerSession(0, _initial_state(objects, events), method="dkm", space=p.space, grid=4)
        out = session.apply(p)
        return out.drop_columns([c for c in timing if c in out.column_names])

    expected = records(sent)
    assert expected.num_rows > 0
    assert records(got).equals(expected)
