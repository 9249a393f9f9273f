"""Writing the file formats of docs/design.md §6: workload files (objects and subscription
events, TSV) and the results export (JSON lines), which :func:`read_results` reads back for
comparisons.
"""

from __future__ import annotations

import gzip
import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.model import (
    KeywordSets,
    Objects,
    Op,
    Results,
    SubscriptionEvents,
    Vocabulary,
)
from dkmsks.cores import usable_cores
from dkmsks.io.formats import EVENT_COLUMNS, OBJECT_COLUMNS


def _open_text_out(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        # Level 1: these files are rewritten often and read once; speed beats size here.
        return io.TextIOWrapper(gzip.open(path, "wb", compresslevel=1), encoding="utf-8", newline="\n")
    return open(path, "w", encoding="utf-8", newline="\n")


def _open_binary_out(path: Path) -> gzip.GzipFile | BinaryIO:
    if path.name.endswith(".gz"):
        return gzip.GzipFile(path, "wb", compresslevel=1)  # level as in _open_text_out
    return open(path, "wb")


def _keyword_texts(keywords: KeywordSets, vocab: Vocabulary) -> list[str]:
    words = vocab.words
    return [" ".join(words[k] for k in keywords.row(i)) for i in range(len(keywords))]


def write_objects(path: str | Path, objects: Objects, vocab: Vocabulary) -> None:
    """Write objects as TSV (gzip when the name ends in ``.gz``)."""
    kw = _keyword_texts(objects.keywords, vocab)
    with _open_text_out(Path(path)) as out:
        out.write("\t".join(OBJECT_COLUMNS) + "\n")
        for i, oid, x, y, t in zip(
            range(len(objects)), objects.ids.tolist(), objects.x.tolist(), objects.y.tolist(),
            objects.t.tolist(), strict=True,
        ):
            out.write(f"{oid}\t{x!r}\t{y!r}\t{kw[i]}\t{t}\n")


def write_events(path: str | Path, events: SubscriptionEvents, vocab: Vocabulary) -> None:
    """Write subscription events as TSV; delete rows carry only ``op``, ``id`` and ``t``."""
    kw = _keyword_texts(events.keywords, vocab)
    with _open_text_out(Path(path)) as out:
        out.write("\t".join(EVENT_COLUMNS) + "\n")
        for i, op, sid, x, y, k, t in zip(
            range(len(events)), events.op.tolist(), events.ids.tolist(), events.x.tolist(),
            events.y.tolist(), events.k.tolist(), events.t.tolist(), strict=True,
        ):
            if op == Op.DELETE:
                out.write(f"delete\t{sid}\t\t\t\t\t{t}\n")
            else:
                out.write(f"insert\t{sid}\t{x!r}\t{y!r}\t{kw[i]}\t{k}\t{t}\n")


def write_results(path: str | Path, results: Results, t: int) -> int:
    """Write the results export (docs/design.md §6), one JSON line per live subscription by id.

    Returns the number of lines written.
    """
    return write_results_table(path, results_table(results), t)


def results_table(results: Results) -> pa.Table:
    """``results`` as columns ``sub_id``, ``object_ids``, ``d2`` (lists), ordered by ``sub_id``."""
    keys = sorted(results)
    rows = [results[s] for s in keys]
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum([len(r.object_ids) for r in rows], out=offsets[1:])
    ids = np.concatenate([r.object_ids for r in rows]) if rows else np.zeros(0, np.int64)
    d2 = np.concatenate([r.d2 for r in rows]) if rows else np.zeros(0, np.float64)
    return pa.table({
        "sub_id": pa.array(keys, type=pa.int64()),
        "object_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids, type=pa.int64())),
        "d2": pa.ListArray.from_arrays(pa.array(offsets), pa.array(d2, type=pa.float64())),
    })


#: Rows formatted per Arrow call in :func:`write_results_table` (bounds memory and keeps the
#: string offsets of a batch well inside int32 at any |S|).
_EXPORT_BATCH_ROWS = 100_000


def write_results_table(path: str | Path, table: pa.Table, t: int) -> int:
    """Write the results export from columns ``sub_id``, ``object_ids``, ``d2`` ordered by
    ``sub_id`` (:func:`results_table`, :func:`dkmsks.storage.export.results_table_as_of`).

    The lines are built by Arrow's string kernels, not one ``json.dumps`` per subscription
    (1M subscriptions: ~20 s in Python). Distances are ``sqrt(d2)`` printed in the shortest
    form that reads back as the same float64 (Arrow's formatter; ``.0`` is added to whole
    numbers so every distance stays a JSON float): ``json.loads`` returns exactly the values
    ``np.sqrt(d2)`` holds. Returns the number of lines written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    batches = table.combine_chunks().to_batches(max_chunksize=_EXPORT_BATCH_ROWS)
    # Arrow's kernels release the GIL: batches are formatted on every core, a round of one
    # batch per thread at a time (so only that many formatted batches are held), written in order.
    threads = min(4, usable_cores())
    with _open_binary_out(path) as out, ThreadPoolExecutor(max_workers=threads) as pool:
        for first in range(0, len(batches), threads):
            for lines in pool.map(lambda batch: _json_lines(batch, int(t)), batches[first:first + threads]):
                out.write(lines)
    return table.num_rows


def _json_lines(batch: pa.RecordBatch, t: int) -> memoryview:
    """The export lines of ``batch``, concatenated (each ends with a newline)."""
    ids = batch.column("object_ids")
    d2 = batch.column("d2")
    # Both lists are formatted flat and joined per row through offsets of their own (the
    # batch may be a slice): casting the list column itself to list<string> costs 3-5x the
    # flat cast of the same values (measured, pyarrow 21, 100k results of the 1M warehouse).
    starts = np.zeros(len(batch) + 1, dtype=np.int32)
    np.cumsum(pc.list_value_length(ids).fill_null(0).to_numpy(zero_copy_only=False), out=starts[1:])
    offsets = pa.array(starts)
    id_text = pc.binary_join(pa.ListArray.from_arrays(offsets, pc.cast(pc.list_flatten(ids), pa.string())), ", ")
    values = _json_floats(pc.sqrt(pc.list_flatten(d2)))
    distance_text = pc.binary_join(pa.ListArray.from_arrays(offsets, values), ", ")
    lines = pc.binary_join_element_wise(
        '{"sub_id": ', pc.cast(batch.column("sub_id"), pa.string()), f', "t": {t}, "object_ids": [', id_text,
        '], "distances": [', distance_text, "]}\n", "")
    if len(lines) == 0:
        return memoryview(b"")
    # The lines are back to back in the string array's data buffer: write that slice as is.
    ends = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset:lines.offset + len(lines) + 1]
    return memoryview(lines.buffers()[2])[ends[0]:ends[-1]]


def _json_floats(values: pa.Array) -> pa.Array:
    """``values`` (float64) as text that reads back as the same floats, each a JSON float.

    Arrow prints the shortest round-trip form, which for a whole number has neither a point
    nor an exponent ("3"): those get ".0". Only whole numbers can lack both, and distances
    rarely are, so only they are looked at (testing every string with a regex was a third
    of the export's formatting time at 1M subscriptions)."""
    text = pc.cast(values, pa.string())
    x = values.to_numpy(zero_copy_only=False)
    whole = np.flatnonzero(np.trunc(x) == x)
    if whole.size == 0:
        return text
    candidates = text.take(pa.array(whole))
    bare = np.asarray(pc.invert(pc.match_substring_regex(candidates, r"[.eE]")), dtype=bool)
    if not bare.any():
        return text
    mask = np.zeros(len(text), dtype=bool)
    mask[whole[bare]] = True
    suffixed = pc.binary_join_element_wise(candidates.filter(pa.array(bare)), ".0", "")
    return pc.replace_with_mask(text, pa.array(mask), suffixed)


def read_results(path: str | Path) -> dict[int, dict[str, object]]:
    """Read a results export back, keyed by subscription id (for comparisons)."""
    rows: dict[int, dict[str, object]] = {}
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                rows[int(row["sub_id"])] = row
    return rows
