"""Column-oriented values shared by every part of the core.

Objects, subscriptions and subscription events are held as parallel numpy columns, and
keyword sets as one CSR pair (``ptr``, ``ids``) so that millions of rows cost a few arrays,
not millions of Python objects. Keywords are small integers handed out by a
:class:`Vocabulary`; the strings only matter at the edges (readers, exports).

Semantics follow docs/design.md §1: an object is ``(id, x, y, keywords, t)``, a subscription
``(id, x, y, keywords, k, t)`` with OR keywords and ``k >= 1``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

Int64Array = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]
Float64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class Vocabulary:
    """Maps keyword strings to dense int32 ids, growing as unseen words arrive."""

    def __init__(self, words: Iterable[str] = ()) -> None:
        self._ids: dict[str, int] = {}
        self._words: list[str] = []
        for w in words:
            self.id_of(w)

    def __len__(self) -> int:
        return len(self._words)

    def id_of(self, word: str) -> int:
        """The id of ``word``, given the next free id when it is new."""
        kid = self._ids.get(word)
        if kid is None:
            kid = len(self._words)
            self._ids[word] = kid
            self._words.append(word)
        return kid

    def lookup(self, word: str) -> int | None:
        """The id of ``word`` or ``None`` when it was never seen (no id is added)."""
        return self._ids.get(word)

    def word(self, kid: int) -> str:
        """The word of id ``kid``."""
        return self._words[kid]

    @property
    def words(self) -> list[str]:
        """Every word, in id order."""
        return list(self._words)


@dataclass(frozen=True)
class KeywordSets:
    """Keyword sets of ``n`` rows in CSR form: row ``i`` is ``ids[ptr[i]:ptr[i+1]]``.

    Each row holds distinct keyword ids (sorted ascending).
    """

    ptr: Int64Array
    ids: Int32Array

    def __len__(self) -> int:
        return int(self.ptr.shape[0] - 1)

    def row(self, i: int) -> Int32Array:
        """The keyword ids of row ``i``."""
        return self.ids[self.ptr[i] : self.ptr[i + 1]]

    def lengths(self) -> Int64Array:
        """The number of keywords of every row."""
        return np.diff(self.ptr)

    def owners(self) -> Int64Array:
        """Row index of every entry of ``ids`` (the COO row column)."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths())

    def take(self, rows: npt.ArrayLike) -> KeywordSets:
        """The sets of ``rows``, in that order."""
        taken = np.asarray(rows, dtype=np.int64)
        if taken.shape[0] and taken.min() < 0:
            taken = np.arange(len(self))[taken]  # numpy's negative indexing (and its IndexError)
        # The taken rows' lengths only: the lengths of all rows cost a pass over the whole
        # pointer array per call (a workload's objects, taken a timestamp at a time).
        starts = self.ptr[taken]
        lengths = self.ptr[taken + 1] - starts
        ptr = np.zeros(taken.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        if ptr[-1] == 0:
            return KeywordSets(ptr, np.zeros(0, dtype=np.int32))
        # Gather each row's slice without a Python loop: offset of every output entry.
        offsets = np.arange(ptr[-1], dtype=np.int64) - np.repeat(ptr[:-1], lengths)
        ids = self.ids[np.repeat(starts, lengths) + offsets]
        return KeywordSets(ptr, ids.astype(np.int32, copy=False))

    def slice_rows(self, lo: int, hi: int) -> KeywordSets:
        """The sets of rows ``lo .. hi - 1``: a view of their ids, the pointer rebased to 0."""
        ptr = self.ptr[lo : hi + 1]
        return KeywordSets(ptr - ptr[0], self.ids[ptr[0] : ptr[-1]])

    @staticmethod
    def from_lists(rows: Sequence[Sequence[int]]) -> KeywordSets:
        """Sets from lists of keyword ids (duplicates dropped)."""
        lengths = np.fromiter((len(set(r)) for r in rows), dtype=np.int64, count=len(rows))
        ptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        ids = np.fromiter(
            (k for r in rows for k in sorted(set(r))), dtype=np.int32, count=int(ptr[-1])
        )
        return KeywordSets(ptr, ids)

    @staticmethod
    def concat(parts: Sequence[KeywordSets]) -> KeywordSets:
        """The rows of ``parts``, one after another."""
        if not parts:
            return KeywordSets(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32))
        lengths = np.concatenate([p.lengths() for p in parts])
        ptr = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        return KeywordSets(ptr, np.concatenate([p.ids for p in parts]).astype(np.int32))


@dataclass(frozen=True)
class Objects:
    """Geo-tagged objects (docs/design.md §1), one row each."""

    ids: Int64Array
    x: Float64Array
    y: Float64Array
    keywords: KeywordSets
    t: Int64Array

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def take(self, rows: npt.ArrayLike) -> Objects:
        """The objects of ``rows``, in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        return Objects(
            self.ids[rows], self.x[rows], self.y[rows], self.keywords.take(rows), self.t[rows]
        )

    @staticmethod
    def concat(parts: Sequence[Objects]) -> Objects:
        """The objects of ``parts``, one after another."""
        return Objects(
            np.concatenate([p.ids for p in parts]).astype(np.int64),
            np.concatenate([p.x for p in parts]).astype(np.float64),
            np.concatenate([p.y for p in parts]).astype(np.float64),
            KeywordSets.concat([p.keywords for p in parts]),
            np.concatenate([p.t for p in parts]).astype(np.int64),
        )

    @staticmethod
    def build(
        ids: npt.ArrayLike,
        x: npt.ArrayLike,
        y: npt.ArrayLike,
        keywords: Sequence[Sequence[int]],
        t: npt.ArrayLike,
    ) -> Objects:
        """Convenience constructor for tests and small inputs."""
        return Objects(
            np.asarray(ids, dtype=np.int64),
            np.asarray(x, dtype=np.float64),
            np.asarray(y, dtype=np.float64),
            KeywordSets.from_lists(keywords),
            np.asarray(t, dtype=np.int64),
        )


@dataclass(frozen=True)
class Subscriptions:
    """Registered subscriptions (docs/design.md §1): OR keywords, ``k >= 1``, registration time ``t``."""

    ids: Int64Array
    x: Float64Array
    y: Float64Array
    keywords: KeywordSets
    k: Int32Array
    t: Int64Array

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def take(self, rows: npt.ArrayLike) -> Subscriptions:
        """The subscriptions of ``rows``, in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        return Subscriptions(
            self.ids[rows],
            self.x[rows],
            self.y[rows],
            self.keywords.take(rows),
            self.k[rows],
            self.t[rows],
        )

    def slice_rows(self, lo: int, hi: int) -> Subscriptions:
        """The subscriptions of rows ``lo .. hi - 1`` (views, but for the keywords' pointer)."""
        return Subscriptions(self.ids[lo:hi], self.x[lo:hi], self.y[lo:hi], self.keywords.slice_rows(lo, hi),
                             self.k[lo:hi], self.t[lo:hi])

    @staticmethod
    def concat(parts: Sequence[Subscriptions]) -> Subscriptions:
        """The subscriptions of ``parts``, one after another."""
        return Subscriptions(
            np.concatenate([p.ids for p in parts]).astype(np.int64),
            np.concatenate([p.x for p in parts]).astype(np.float64),
            np.concatenate([p.y for p in parts]).astype(np.float64),
            KeywordSets.concat([p.keywords for p in parts]),
            np.concatenate([p.k for p in parts]).astype(np.int32),
            np.concatenate([p.t for p in parts]).astype(np.int64),
        )

    @staticmethod
    def build(
        ids: npt.ArrayLike,
        x: npt.ArrayLike,
        y: npt.ArrayLike,
        keywords: Sequence[Sequence[int]],
        k: npt.ArrayLike,
        t: npt.ArrayLike,
    ) -> Subscriptions:
        """Subscriptions from plain sequences, converted to the column types."""
        return Subscriptions(
            np.asarray(ids, dtype=np.int64),
            np.asarray(x, dtype=np.float64),
            np.asarray(y, dtype=np.float64),
            KeywordSets.from_lists(keywords),
            np.asarray(k, dtype=np.int32),
            np.asarray(t, dtype=np.int64),
        )


class Op(IntEnum):
    """Subscription event kind; ``from_str`` accepts the file spelling."""

    INSERT = 0
    DELETE = 1

    @classmethod
    def from_str(cls, text: str) -> Op:
        """The op named ``text`` (any case), or a :class:`ValueError` listing the valid ones."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            valid = ", ".join(m.name.lower() for m in cls)
            raise ValueError(f"unknown op {text!r}; valid ops: {valid}") from None


@dataclass(frozen=True)
class SubscriptionEvents:
    """Subscription insertions and deletions in file order.

    A deletion row carries only ``id`` and ``t``: its ``x``/``y`` are NaN, ``k`` is 0 and its
    keyword set is empty.
    """

    op: npt.NDArray[np.int8]
    ids: Int64Array
    x: Float64Array
    y: Float64Array
    keywords: KeywordSets
    k: Int32Array
    t: Int64Array

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def take(self, rows: npt.ArrayLike) -> SubscriptionEvents:
        """The events of ``rows``, in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        return SubscriptionEvents(
            self.op[rows],
            self.ids[rows],
            self.x[rows],
            self.y[rows],
            self.keywords.take(rows),
            self.k[rows],
            self.t[rows],
        )

    def insertions(self) -> Subscriptions:
        """The inserted subscriptions, in event order."""
        rows = np.flatnonzero(self.op == Op.INSERT)
        e = self.take(rows)
        return Subscriptions(e.ids, e.x, e.y, e.keywords, e.k, e.t)

    @staticmethod
    def concat(parts: Sequence[SubscriptionEvents]) -> SubscriptionEvents:
        """The events of ``parts``, one after another."""
        return SubscriptionEvents(
            np.concatenate([p.op for p in parts]).astype(np.int8),
            np.concatenate([p.ids for p in parts]).astype(np.int64),
            np.concatenate([p.x for p in parts]).astype(np.float64),
            np.concatenate([p.y for p in parts]).astype(np.float64),
            KeywordSets.concat([p.keywords for p in parts]),
            np.concatenate([p.k for p in parts]).astype(np.int32),
            np.concatenate([p.t for p in parts]).astype(np.int64),
        )


@dataclass(frozen=True)
class KnnResult:
    """The exact result ``A(s)`` of one subscription, ordered by ``(d², object id)``."""

    object_ids: Int64Array
    d2: Float64Array

    @property
    def distances(self) -> Float64Array:
        """The distances (square roots of ``d2``)."""
        return np.sqrt(self.d2)


#: Results of every live subscription at one timestamp, keyed by subscription id.
Results = dict[int, KnnResult]


def results_equal(a: Results, b: Results) -> bool:
    """Byte-identical comparison of two result maps (ids and squared distances)."""
    if a.keys() != b.keys():
        return False
    return all(
        np.array_equal(a[s].object_ids, b[s].object_ids) and np.array_equal(a[s].d2, b[s].d2)
        for s in a
    )


def describe_difference(a: Results, b: Results, limit: int = 5) -> str:
    """A short human-readable account of how two result maps differ (for test failures)."""
    lines = []
    only_a = sorted(a.keys() - b.keys())[:limit]
    only_b = sorted(b.keys() - a.keys())[:limit]
    if only_a:
        lines.append(f"subscriptions only in first: {only_a}")
    if only_b:
        lines.append(f"subscriptions only in second: {only_b}")
    for s in sorted(a.keys() & b.keys()):
        if len(lines) >= limit + 2:
            break
        ra, rb = a[s], b[s]
        if not (np.array_equal(ra.object_ids, rb.object_ids) and np.array_equal(ra.d2, rb.d2)):
            lines.append(
                f"sub {s}: {ra.object_ids.tolist()} {ra.d2.tolist()} != "
                f"{rb.object_ids.tolist()} {rb.d2.tolist()}"
            )
    return "\n".join(lines) or "equal"


@dataclass(frozen=True)
class Rect:
    """Axis-aligned rectangle ``[xmin, xmax] × [ymin, ymax]`` (closed)."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float

    @property
    def area(self) -> float:
        """The rectangle's area (``0`` when empty)."""
        return max(0.0, self.xmax - self.xmin) * max(0.0, self.ymax - self.ymin)

    def as_tuple(self) -> tuple[float, float, float, float]:
        """``(xmin, ymin, xmax, ymax)``."""
        return (self.xmin, self.ymin, self.xmax, self.ymax)


def data_space(objects: Objects, subscriptions: Subscriptions) -> Rect:
    """The bounding box of ``O_init`` and the initial subscriptions (docs/design.md §1)."""
    xs = np.concatenate([objects.x, subscriptions.x])
    ys = np.concatenate([objects.y, subscriptions.y])
    if xs.size == 0:
        return Rect(0.0, 0.0, 1.0, 1.0)
    return Rect(float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max()))
