"""Test helpers for follow mode's round exchange: routed payloads of any size, made up.

The values are random but shaped as the main server makes them (dkmsks.spark.main_server.route):
columns sorted by ``t``, the dtypes a round carries, keyword sets as a
:class:`~dkmsks.spark.bridge.KeywordColumn` of the words used.
"""

from __future__ import annotations

import numpy as np

from dkmsks.core.model import KeywordSets
from dkmsks.spark.bridge import BatchPayload, KeywordColumn

#: A vocabulary of the size the Twitter-like data set's rounds draw from.
WORDS = [f"word{k}" for k in range(20_000)]


def keyword_column(rng: np.random.Generator, rows: int, words: list[str], most: int = 4) -> KeywordColumn:
    """``rows`` keyword sets of 1..``most`` distinct words of ``words`` (at least ``most``) each."""
    lengths = rng.integers(1, most + 1, size=rows)
    ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    owners = np.repeat(np.arange(rows), lengths)
    # A row's words: a random first one and the next at a random stride below len(words) / most
    # (distinct), sorted within the row.
    first, stride = rng.integers(0, len(words), size=rows), rng.integers(1, max(2, len(words) // most), size=rows)
    ids = (first[owners] + (np.arange(ptr[-1]) - ptr[owners]) * stride[owners]) % len(words)
    ids = ids[np.lexsort((ids, owners))].astype(np.int32)
    return KeywordColumn.from_sets(KeywordSets(ptr, ids), words)


def payload(seed: int = 0, *, timestamps: int = 10, objects: int = 1_000, events: int = 100,
            workers: int = 20, words: list[str] | None = None) -> BatchPayload:
    """A routed round of ``timestamps`` timestamps, each with ``objects`` objects and ``events``
    deletions and insertions (all zero: an empty round)."""
    rng = np.random.default_rng(seed)
    words = WORDS if words is None else words
    ts = list(range(101, 101 + timestamps))
    n_obj, n_ev = timestamps * objects, timestamps * events

    def times(per: int) -> np.ndarray:
        return np.repeat(np.asarray(ts, dtype=np.int64), per)

    return BatchPayload(
        method="dkm", space=(-124.7, 24.5, -66.9, 49.4), timestamps=ts,
        obj_ids=rng.permutation(np.cumsum(rng.integers(1, 1_000, n_obj, dtype=np.int64))),
        obj_x=rng.uniform(-124.7, -66.9, n_obj), obj_y=rng.uniform(24.5, 49.4, n_obj), obj_t=times(objects),
        obj_keywords=keyword_column(rng, n_obj, words),
        del_t=times(events), del_ids=rng.integers(0, 10**6, n_ev, dtype=np.int64),
        del_worker=rng.integers(0, workers, n_ev).astype(np.int32),
        ins_t=times(events), ins_ids=rng.integers(10**6, 2 * 10**6, n_ev, dtype=np.int64),
        ins_worker=rng.integers(0, workers, n_ev).astype(np.int32),
        ins_x=rng.uniform(-124.7, -66.9, n_ev), ins_y=rng.uniform(24.5, 49.4, n_ev),
        ins_k=rng.integers(1, 11, n_ev).astype(np.int32), ins_weight=rng.integers(1, 10**6, n_ev, dtype=np.int64),
        ins_keywords=keyword_column(rng, n_ev, words),
        grid=16384, index_options={"theta": 20.0, "gamma1": 100_000.0}, probe_timestamps=10,
    )
