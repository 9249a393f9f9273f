"""A follow round's journal commit as Parquet files written where the records are, and one
Delta transaction that adds them all.

Most of a catch-up round's records are result changes (at |S| = 1M, m = 20, a 75-timestamp
round: ~300,000 changes, ~62,000 finals, 1,500 metrics). Appended by the driver with delta-rs,
encoding them took 0.46-0.5 s of the round's ~2 s while both cores' worker tasks stood idle
(docs/benchmarks.md, "The journal's changes written by the worker tasks"). So each worker task
encodes the changes of the workers it hosts into one file of the journal's ``record=change``
partition while the other task still applies, and the driver writes the records it holds
(finals carrying the main server's weights, metrics, ledger) and commits every file with one
``DeltaTable.create_write_transaction``: the same single commit, tagged with the journal's
application transaction, as :func:`dkmsks.storage.journal.commit`'s append (docs/design.md §8).

A file of a round that never commits is in no Delta version: no reader sees it, and VACUUM
(``dkm maintain``) deletes it after the retention period like any other unreferenced file.
Each file carries the statistics delta-rs would have written for it (:func:`file_stats`), so
Spark's data skipping on ``t`` and ``sub_id`` works as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dkmsks.storage.lake import conform

#: The journal's partition column: one directory per record kind.
PARTITION = "record"
#: Columns worth a dictionary: a handful of distinct values in every file. The others (ids,
#: distances, coordinates) have nearly as many values as rows, and hashing them all before
#: giving up on the dictionary cost a third of the encoding (docs/benchmarks.md).
DICTIONARY_COLUMNS = ("change", "run_id")


@dataclass(frozen=True)
class JournalFile:
    """One written Parquet file of the journal, as its Delta ``add`` action will name it."""

    path: str  # relative to the table's root
    size: int
    kind: str
    rows: int
    modification_time: int  # ms since the epoch
    stats: str  # Delta's per-file statistics, JSON

    def to_json(self) -> str:
        """This description as JSON (a worker task hands it to the driver through the spool)."""
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> JournalFile:
        """The description :meth:`to_json` wrote."""
        return JournalFile(**json.loads(text))


def file_schema(table_schema: pa.Schema) -> pa.Schema:
    """The columns a journal file stores: the table's, less the partition column (its value
    is in the file's directory and ``add`` action), all nullable as delta-rs writes them."""
    return pa.schema([pa.field(f.name, f.type, nullable=True) for f in table_schema if f.name != PARTITION])


def file_stats(data: pa.Table) -> str:
    """Delta's statistics of one file's rows (the ``stats`` of its ``add`` action): the row
    count, and for every column of a primitive type its null count and, where it has values,
    their minimum and maximum. Nested columns (the result lists, keywords) get none, as in the
    files delta-rs writes; a floating-point column holding NaN or an infinity gets no bounds
    (JSON has no such numbers, and a missing bound only means no skipping)."""
    n = data.num_rows
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name, column in zip(data.column_names, data.columns, strict=True):
        kind = column.type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_string(kind)
                or pa.types.is_boolean(kind)):
            continue
        nulls[name] = column.null_count
        if column.null_count == n:
            continue
        if pa.types.is_floating(kind) and not pc.all(pc.is_finite(column)).as_py():
            continue
        bounds = pc.min_max(column)
        low[name], high[name] = bounds["min"].as_py(), bounds["max"].as_py()
    return json.dumps({"numRecords": n, "minValues": low, "maxValues": high, "nullCount": nulls},
                      separators=(",", ":"))


def write_file(root: str, kind: str, data: pa.Table, schema: pa.Schema) -> JournalFile:
    """Write ``data`` (records of one ``kind``) as a new Parquet file under the journal at
    ``root`` (a local folder), in the columns and types of the file ``schema``
    (:func:`file_schema`); what its ``add`` action needs."""
    data = conform(data, schema)
    relative = f"{PARTITION}={kind}/part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(data, path, compression="snappy",
                   use_dictionary=[c for c in DICTIONARY_COLUMNS if c in schema.names])
    return JournalFile(relative, os.path.getsize(path), kind, data.num_rows, int(time.time() * 1000),
                       file_stats(data))


def write_kinds(root: str, records: pa.Table, schema: pa.Schema) -> list[JournalFile]:
    """One file per record kind present in ``records`` (a ``record`` column names each row's kind)."""
    kinds = records.column(PARTITION)
    out = []
    for kind in pc.unique(kinds).to_pylist():
        rows = records.filter(pc.equal(kinds, kind))
        out.append(write_file(root, kind, rows, schema))
    return out


def discard(root: str, files: list[JournalFile]) -> None:
    """Delete written files that will not be committed (a replayed round's)."""
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(root, f.path))
