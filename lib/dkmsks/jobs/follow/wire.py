"""A follow round as bytes: what any round channel carries between the driver and its tasks.

Data only, never code: a task reads a round with Arrow's IPC reader and :func:`json.loads`, so
a file someone else put in the spool can at worst be refused (:class:`RoundFormatError`), not
run (a pickle would run whatever its writer chose). A worker's records go back as one Arrow IPC
stream (:func:`encode_records`).

A round (:func:`encode_round`, version 1) is :data:`MAGIC` (16 bytes) and then five parts,
each a little-endian unsigned 64-bit length, that many bytes and zeros to the next multiple of
8 bytes (so that every Arrow buffer is aligned as Arrow's own files align them):

1. a JSON header: ``{"format", "version", "method", "space", "timestamps", "grid",
   "index_options", "probe_timestamps", "change_files"}`` — the payload's scalars, and
   ``{"root", "plan_version", "run_id"}`` of its :class:`~dkmsks.jobs.follow.channel.ChangeFiles`
   or null;
2. the objects, an Arrow IPC stream of one record batch: ``ids``, ``x``, ``y``, ``t``,
   ``keywords``;
3. the deletions: ``t``, ``ids``, ``worker``;
4. the insertions: ``t``, ``ids``, ``worker``, ``x``, ``y``, ``k``, ``weight``, ``keywords``;
5. the change files' table schema (an Arrow IPC schema message), empty without change files.

Each column is the :class:`~dkmsks.spark.bridge.BatchPayload` array of that name with its
dtype (``obj_x`` is the objects' ``x``); a keyword column is ``large_list<dictionary<int32,
string>>`` — the :class:`~dkmsks.spark.bridge.KeywordColumn` itself: its ``ptr`` the list
offsets, its ``ids`` the dictionary indices, its ``words`` the dictionary — so any Arrow reader
sees each row's keywords as strings. Decoded arrays are the payload's arrays again, each a
writable copy of its own, as a pickle's were (the compiled kernels take a read-only array for a
type of its own, which would compile anew in a round).
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pyarrow as pa

from dkmsks.jobs.follow.channel import ChangeFiles, Round
from dkmsks.spark.bridge import BatchPayload, KeywordColumn
from dkmsks.spark.worker_tasks import from_ipc, to_ipc

#: The first bytes of a round (with PNG's trick: a line-ending or 7-bit mangling shows).
MAGIC = b"DKMSKS-ROUND\r\n\x1a\n"
#: The version of the layout above this module writes, the one it reads.
VERSION = 1
FORMAT = "dkmsks follow round"
#: The payload's columns of each table, by column name (``obj_`` + ``ids`` is ``obj_ids``).
TABLES = {
    "obj_": ("ids", "x", "y", "t", "keywords"),
    "del_": ("t", "ids", "worker"),
    "ins_": ("t", "ids", "worker", "x", "y", "k", "weight", "keywords"),
}
_LENGTH = struct.Struct("<Q")


class RoundFormatError(ValueError):
    """Bytes that are not a follow round this version of dkmsks reads."""


# ---------------------------------------------------------------------------------- writing
def encode_round(round_: Round) -> bytes:
    """The bytes of ``round_`` (module doc)."""
    p, files = round_.payload, round_.change_files
    header = {
        "format": FORMAT, "version": VERSION, "method": p.method,
        "space": [float(v) for v in p.space], "timestamps": [int(t) for t in p.timestamps], "grid": int(p.grid),
        "index_options": {str(k): float(v) for k, v in p.index_options.items()},
        "probe_timestamps": int(p.probe_timestamps),
        "change_files": None if files is None else {"root": files.root, "plan_version": int(files.plan_version),
                                                    "run_id": files.run_id},
    }
    parts: list[Any] = [json.dumps(header).encode()]
    parts += [_table_ipc(p, prefix, names) for prefix, names in TABLES.items()]
    parts.append(files.schema.serialize() if files is not None else b"")
    out: list[Any] = [MAGIC]
    for part in parts:
        length = memoryview(part).nbytes
        out += [_LENGTH.pack(length), part, bytes(-length % 8)]
    return b"".join(out)


def _table_ipc(p: BatchPayload, prefix: str, names: tuple[str, ...]) -> pa.Buffer:
    arrays = [_keyword_array(getattr(p, prefix + name)) if name == "keywords" else pa.array(getattr(p, prefix + name))
              for name in names]
    batch = pa.record_batch(arrays, names=list(names))  # raises if the payload's columns differ in length
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def _keyword_array(column: KeywordColumn) -> pa.Array:
    ptr = np.asarray(column.ptr, dtype=np.int64)
    if ptr.shape[0] == 0 or ptr[0] != 0 or ptr[-1] != column.ids.shape[0]:
        raise ValueError(f"a keyword column's ptr must run from 0 to its {column.ids.shape[0]} ids "
                         f"(KeywordColumn.from_sets makes it so)")
    words = pa.DictionaryArray.from_arrays(pa.array(column.ids), pa.array(column.words, type=pa.string()))
    return pa.LargeListArray.from_arrays(pa.array(ptr), words)


def encode_records(records: pa.Table) -> bytes:
    """A worker's records as one Arrow IPC stream (as a catch-up run's tasks return them)."""
    return to_ipc(records)


# ---------------------------------------------------------------------------------- reading
def decode_round(data: bytes) -> Round:
    """The round :func:`encode_round` wrote; :class:`RoundFormatError` for anything else."""
    if not data.startswith(MAGIC):
        raise RoundFormatError(f"not a follow round: it does not start with {MAGIC!r} (starts {data[:24]!r})")
    parts = _parts(memoryview(data)[len(MAGIC):])
    try:
        header = json.loads(bytes(parts[0]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RoundFormatError(f"a follow round's header is not JSON: {err}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RoundFormatError(f"a follow round's header does not name the format {FORMAT!r}")
    if type(header.get("version")) is not int or header["version"] != VERSION:
        raise RoundFormatError(f"a follow round of version {header.get('version')!r}; this dkmsks reads "
                               f"version {VERSION}")
    try:
        columns: dict[str, Any] = {}
        for (prefix, names), part in zip(TABLES.items(), parts[1:4], strict=True):
            columns.update(_read_table(part, prefix, names))
        files = header["change_files"]
        space = [float(_typed(v, float)) for v in header["space"]]
        if len(space) != 4:
            raise RoundFormatError(f"a follow round's space has {len(space)} values, not 4")
        payload = BatchPayload(
            method=_typed(header["method"], str), space=(space[0], space[1], space[2], space[3]),
            timestamps=[_typed(t, int) for t in header["timestamps"]], grid=_typed(header["grid"], int),
            index_options={_typed(k, str): _typed(v, float) for k, v in header["index_options"].items()},
            probe_timestamps=_typed(header["probe_timestamps"], int), **columns,
        )
        change_files = None if files is None else ChangeFiles(
            root=_typed(files["root"], str), schema=pa.ipc.read_schema(pa.py_buffer(parts[4])),
            plan_version=_typed(files["plan_version"], int), run_id=_typed(files["run_id"], str))
    except (KeyError, AttributeError, TypeError) as err:
        raise RoundFormatError(f"a follow round's header lacks or mistypes {err}") from None
    except pa.ArrowException as err:
        raise RoundFormatError(f"a follow round's tables are not readable Arrow: {err}") from None
    return Round(payload, change_files)


def _parts(data: memoryview) -> list[memoryview]:
    parts, at = [], 0
    while at < data.nbytes:
        if data.nbytes - at < _LENGTH.size:
            raise RoundFormatError("a follow round ends within a part's length")
        (length,) = _LENGTH.unpack_from(data, at)
        at += _LENGTH.size
        if length > data.nbytes - at:
            raise RoundFormatError(f"a follow round's part claims {length} bytes; {data.nbytes - at} remain")
        parts.append(data[at:at + length])
        at += length + (-length % 8)
    if len(parts) != 5:
        raise RoundFormatError(f"a follow round has {len(parts)} parts, not 5")
    return parts


def _read_table(part: memoryview, prefix: str, names: tuple[str, ...]) -> dict[str, Any]:
    reader = pa.ipc.open_stream(pa.py_buffer(part))
    batches = list(reader)
    if len(batches) != 1 or tuple(batches[0].schema.names) != names:
        raise RoundFormatError(f"a follow round's {prefix}* table holds {len(batches)} batches of columns "
                               f"{reader.schema.names}, not one of {list(names)}")
    batch = batches[0]
    batch.validate(full=True)  # offsets and dictionary indices in bounds before numpy reads them
    return {prefix + name: _keyword_column(batch.column(name)) if name == "keywords" else _numbers(batch.column(name))
            for name in names}


def _numbers(column: pa.Array) -> np.ndarray:
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)) or column.null_count:
        raise RoundFormatError(f"a follow round's column is {column.type} with {column.null_count} nulls; "
                               f"payload columns are numbers without nulls")
    return np.array(column.to_numpy(zero_copy_only=True))  # writable, a copy of its own


def _keyword_column(column: pa.Array) -> KeywordColumn:
    kind = column.type
    if (not pa.types.is_large_list(kind) or not pa.types.is_dictionary(kind.value_type)
            or not pa.types.is_string(kind.value_type.value_type) or column.null_count or column.offset):
        raise RoundFormatError(f"a follow round's keyword column is {kind}, not large_list<dictionary<int, string>>")
    words = column.values
    if words.null_count or words.dictionary.null_count:
        raise RoundFormatError("a follow round's keyword column holds nulls")
    return KeywordColumn(ptr=np.array(column.offsets.to_numpy()), ids=_numbers(words.indices),
                         words=words.dictionary.to_pylist())


def decode_records(data: bytes) -> pa.Table:
    """The records :func:`encode_records` wrote."""
    return from_ipc(data)


def _typed(value: Any, kind: type) -> Any:
    """``value`` if it is a ``kind`` (an int for a float, as JSON writes 2.0 as 2.0 and 2 as 2)."""
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else kind):
        raise TypeError(f"{value!r} (a {type(value).__name__}, not a {kind.__name__})")
    return value
