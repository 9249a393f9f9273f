"""The partition plan: what the partitioners produce and what the main server needs later.

A :class:`PartitionPlan` is a frozen value holding, as compact numpy columns,

- per initial subscription: its id, its worker, its estimated cost and the subset it belongs
  to (``-1`` for KOP, which has no subsets);
- per worker: its load ``C(w)`` (Algorithm 1 / Algorithm 3);
- per subset (:class:`SubsetTable`): for SOP the quadtree regions of §3.2 (region ``r``, the
  MBR ``R`` of the subset's balls, ``C(S_r)`` of Eq. 3, worker); for DkM-SKS the subsets
  returned by Algorithm 2 (``R``, region, ``C(S_r)`` of Eq. 6, how the subset was made); for
  PS²Stream (``ps2``) the leaves of its hybrid split (leaf rectangle, term set, count load
  ``L(p)``, worker; docs/design.md §2.5).

Costs are kept exactly as integer *weights*: ``weight = cost · |O_init|``. Every cost of the
paper is a sum of object counts divided by ``|O_init|`` (Eq. 1–6), so integer weights make the
comparisons of Algorithm 2 (``C_s < C_h``), the greedy tie-breaks and the load sums exact and
reproducible; :attr:`PartitionPlan.costs` and :attr:`PartitionPlan.loads` give the paper's
probabilities. PS²Stream has no costs: its weights are the counts ``β`` per subscription and
``L(p) = α·|O_p| + β·|S_p|`` per leaf (docs/design.md §2.5), integers as well; divided by
``|O_init|`` they are only rescaled counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from dkmsks.core.config import Method
from dkmsks.core.model import Float64Array, Int32Array, Int64Array, Rect

__all__ = ["Method", "SplitKind", "SubsetTable", "PartitionPlan", "PLAN_FORMAT_VERSION"]

#: Bumped whenever the serialised layout changes incompatibly.
PLAN_FORMAT_VERSION = 1


class SplitKind(IntEnum):
    """How a subset of Algorithm 2 was produced (its last split)."""

    ROOT = 0  #: never split: the whole of ``S``
    SPACE = 1  #: a quadrant child of Space-only-Partition (SOP regions are all of this kind),
    #: or a half of a PS²Stream space split
    HYBRID = 2  #: a group of Hybrid-Partition (keeps its parent's region)
    TEXT = 3  #: a term group of a PS²Stream text split (keeps its parent's rectangle)


def _ro(a: npt.ArrayLike, dtype: Any, shape_tail: tuple[int, ...] = ()) -> np.ndarray:
    """A read-only contiguous copy, so a frozen plan cannot be mutated through its arrays."""
    arr = np.array(a, dtype=dtype, copy=True)
    if shape_tail and arr.size == 0:
        arr = arr.reshape((0, *shape_tail))
    arr = np.ascontiguousarray(arr)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class SubsetTable:
    """Subsets of a plan, one row each (SOP regions, the subsets of Algorithm 2 or the
    PS²Stream leaves).

    Attributes
    ----------
    rect
        float64 ``[n, 4]`` ``(xmin, ymin, xmax, ymax)``: ``R``, the MBR of the subset's balls
        clipped to the data space (the whole space when a ball is infinite). A PS²Stream leaf
        that is home to no subscription has nothing to bound: its ``rect`` is its ``region``
        clipped to the data space.
    region
        float64 ``[n, 4]``: the quadtree region ``r`` the subset lives in (for a hybrid child,
        its parent's region); for PS²Stream the half-open leaf rectangle ``R_p``
        (``[xmin, xmax) × [ymin, ymax)``, docs/design.md §2.5).
    weight
        int64 ``[n]``: ``C(S_r) · |O_init|`` (Eq. 3 for SOP, Eq. 6 for DkM-SKS); for PS²Stream
        the count load ``L(p) = α·|O_p| + β·|S_p|``.
    size
        int64 ``[n]``: ``|S_r|``, the subscriptions that live in the subset (for PS²Stream the
        leaf's home subscriptions, not every subscription counted in it).
    worker
        int32 ``[n]``: the worker of the subset (SOP and PS²Stream, Algorithm 1 over subsets);
        ``-1`` for DkM-SKS, whose subsets are spread over workers by Algorithm 3.
    kind
        int8 ``[n]``: :class:`SplitKind`.
    depth
        int32 ``[n]``: depth in the partition tree (root = 0).
    all_terms
        bool ``[n]``: the subset's term set is ALL (docs/design.md §2.5). Always true for KOP, SOP
        and DkM-SKS, which have no term sets; default all true.
    terms_ptr, terms
        The explicit term sets in CSR form: row ``j`` is ``terms[terms_ptr[j]:terms_ptr[j+1]]``
        (keyword ids, ascending), empty where ``all_terms``. Default: every row empty.
    """

    rect: Float64Array
    region: Float64Array
    weight: Int64Array
    size: Int64Array
    worker: Int32Array
    kind: npt.NDArray[np.int8]
    depth: Int32Array
    all_terms: npt.NDArray[np.bool_] = field(default=None)  # type: ignore[arg-type]  # None: __post_init__'s default
    terms_ptr: Int64Array = field(default=None)  # type: ignore[arg-type]  # None: __post_init__'s default
    terms: Int32Array = field(default=None)  # type: ignore[arg-type]  # None: __post_init__'s default

    def __post_init__(self) -> None:
        object.__setattr__(self, "rect", _ro(self.rect, np.float64, (4,)))
        object.__setattr__(self, "region", _ro(self.region, np.float64, (4,)))
        for name, dt in (("weight", np.int64), ("size", np.int64), ("worker", np.int32),
                         ("kind", np.int8), ("depth", np.int32)):
            object.__setattr__(self, name, _ro(getattr(self, name), dt))
        n = self.weight.shape[0]
        if self.rect.shape != (n, 4) or self.region.shape != (n, 4):
            raise ValueError("subset rect/region must be [n, 4] arrays matching the weights")
        for name in ("size", "worker", "kind", "depth"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"subset column {name!r} has the wrong length")
        all_terms = np.ones(n, dtype=bool) if self.all_terms is None else self.all_terms
        ptr = np.zeros(n + 1, dtype=np.int64) if self.terms_ptr is None else self.terms_ptr
        terms = np.zeros(0, dtype=np.int32) if self.terms is None else self.terms
        object.__setattr__(self, "all_terms", _ro(all_terms, np.bool_))
        object.__setattr__(self, "terms_ptr", _ro(ptr, np.int64))
        object.__setattr__(self, "terms", _ro(terms, np.int32))
        if self.all_terms.shape != (n,) or self.terms_ptr.shape != (n + 1,):
            raise ValueError("subset term columns must have one entry per subset (terms_ptr: n + 1)")
        if (self.terms_ptr[0] != 0 or np.any(np.diff(self.terms_ptr) < 0)
                or self.terms_ptr[-1] != self.terms.shape[0]):
            raise ValueError("subset terms_ptr must rise from 0 to len(terms)")
        if np.any(self.all_terms & (np.diff(self.terms_ptr) > 0)):
            raise ValueError("a subset whose term set is ALL cannot list terms")

    def __len__(self) -> int:
        return int(self.weight.shape[0])

    def to_dict(self) -> dict[str, Any]:
        """The table as JSON-ready lists."""
        return {
            "rect": self.rect.tolist(),
            "region": self.region.tolist(),
            "weight": self.weight.tolist(),
            "size": self.size.tolist(),
            "worker": self.worker.tolist(),
            "kind": self.kind.tolist(),
            "depth": self.depth.tolist(),
            "all_terms": self.all_terms.tolist(),
            "terms_ptr": self.terms_ptr.tolist(),
            "terms": self.terms.tolist(),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> SubsetTable:
        """Inverse of :meth:`to_dict`; a dict without term columns (written before PS²Stream)
        reads as every term set ALL."""
        term_cols: dict[str, np.ndarray] = {  # absent ones: every term set ALL
            name: np.asarray(d[name], dtype=dt)
            for name, dt in (("all_terms", np.bool_), ("terms_ptr", np.int64), ("terms", np.int32)) if name in d
        }
        return SubsetTable(
            rect=np.asarray(d["rect"], dtype=np.float64).reshape(-1, 4),
            region=np.asarray(d["region"], dtype=np.float64).reshape(-1, 4),
            weight=np.asarray(d["weight"], dtype=np.int64),
            size=np.asarray(d["size"], dtype=np.int64),
            worker=np.asarray(d["worker"], dtype=np.int32),
            kind=np.asarray(d["kind"], dtype=np.int8),
            depth=np.asarray(d["depth"], dtype=np.int32),
            **term_cols,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SubsetTable):
            return NotImplemented
        return all(
            np.array_equal(getattr(self, f), getattr(other, f))
            for f in ("rect", "region", "weight", "size", "worker", "kind", "depth", "all_terms",
                      "terms_ptr", "terms")
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class PartitionPlan:
    """The result of partitioning the initial subscriptions (docs/design.md §2).

    Attributes
    ----------
    method
        :class:`Method`.
    m
        Number of workers.
    params
        The tuning parameters used (``theta`` for SOP; ``gamma1``, ``gamma2`` for DkM-SKS) and
        diagnostics (e.g. ``splits``, ``target``).
    space
        The data space (docs/design.md §1).
    n_objects
        ``|O_init|``: weights divided by ``max(n_objects, 1)`` are the paper's costs.
    sub_ids
        int64 ``[n]``: subscription ids, in the input order of :func:`partition`.
    worker
        int32 ``[n]``: worker of each subscription.
    weight
        int64 ``[n]``: ``C(s) · |O_init|`` of each subscription (Eq. 1; ``P(R)`` of its region
        for SOP, Eq. 2; Eq. 5 for DkM-SKS); ``β`` for PS²Stream, which counts subscriptions.
    subset
        int64 ``[n]``: row of :attr:`subsets` holding the subscription (for PS²Stream its home
        leaf, docs/design.md §2.5 step 4); ``-1`` for KOP.
    load_weight
        int64 ``[m]``: ``C(w) · |O_init|``; for PS²Stream ``L(w) = Σ L(p)`` over the worker's
        leaves (docs/design.md §2.5 step 3), which is not the sum of its subscriptions' weights.
    subsets
        :class:`SubsetTable` (empty for KOP).
    """

    method: Method
    m: int
    params: dict[str, Any]
    space: Rect
    n_objects: int
    sub_ids: Int64Array
    worker: Int32Array
    weight: Int64Array
    subset: Int64Array
    load_weight: Int64Array
    subsets: SubsetTable = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", Method.from_str(self.method))
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "m", int(self.m))
        object.__setattr__(self, "n_objects", int(self.n_objects))
        for name, dt in (("sub_ids", np.int64), ("worker", np.int32), ("weight", np.int64),
                         ("subset", np.int64), ("load_weight", np.int64)):
            object.__setattr__(self, name, _ro(getattr(self, name), dt))
        if self.subsets is None:
            object.__setattr__(self, "subsets", _empty_subsets())
        n = self.sub_ids.shape[0]
        for name in ("worker", "weight", "subset"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"plan column {name!r} has the wrong length")
        if self.load_weight.shape != (self.m,):
            raise ValueError("plan load_weight must have one entry per worker")

    # ---- derived views -------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.sub_ids.shape[0])

    @property
    def costs(self) -> Float64Array:
        """``C(s)`` per subscription as the paper's probability."""
        return self.weight / max(self.n_objects, 1)

    @property
    def loads(self) -> Float64Array:
        """``C(w)`` per worker as the paper's probability."""
        return self.load_weight / max(self.n_objects, 1)

    # ---- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible dict (arrays as lists; floats round-trip exactly through JSON)."""
        return {
            "format": PLAN_FORMAT_VERSION,
            "method": self.method.value,
            "m": self.m,
            "params": self.params,
            "space": list(self.space.as_tuple()),
            "n_objects": self.n_objects,
            "sub_ids": self.sub_ids.tolist(),
            "worker": self.worker.tolist(),
            "weight": self.weight.tolist(),
            "subset": self.subset.tolist(),
            "load_weight": self.load_weight.tolist(),
            "subsets": self.subsets.to_dict(),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> PartitionPlan:
        """The plan of :meth:`to_dict`'s output; refuses another format version."""
        fmt = d.get("format", PLAN_FORMAT_VERSION)
        if fmt != PLAN_FORMAT_VERSION:
            raise ValueError(f"unsupported partition plan format {fmt}; expected {PLAN_FORMAT_VERSION}")
        return PartitionPlan(
            method=Method.from_str(d["method"]),
            m=int(d["m"]),
            params=dict(d["params"]),
            space=Rect(*(float(v) for v in d["space"])),
            n_objects=int(d["n_objects"]),
            sub_ids=np.asarray(d["sub_ids"], dtype=np.int64),
            worker=np.asarray(d["worker"], dtype=np.int32),
            weight=np.asarray(d["weight"], dtype=np.int64),
            subset=np.asarray(d["subset"], dtype=np.int64),
            load_weight=np.asarray(d["load_weight"], dtype=np.int64),
            subsets=SubsetTable.from_dict(d["subsets"]),
        )

    # ---- columnar form (for Delta tables / Parquet) ---------------------------------------
    def to_tables(self) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The plan as three parts a table writer can store without JSON:

        ``(meta, subscriptions, subsets)`` where ``meta`` is a small JSON-compatible dict
        (method, m, params, space, n_objects, load_weight, format) and the other two are dicts
        of equal-length 1-D numpy columns: ``sub_id, worker, weight, subset`` and
        ``subset, xmin, ymin, xmax, ymax, rxmin, rymin, rxmax, rymax, weight, size, worker,
        kind, depth, all_terms, terms`` (``x*``/``y*`` = ``R``, ``r*`` = region; ``terms`` is
        an object column holding one int32 array of keyword ids per subset, a list column
        in a table).
        """
        d = self.to_dict()
        meta = {k: d[k] for k in ("format", "method", "m", "params", "space", "n_objects",
                                  "load_weight")}
        subs: dict[str, np.ndarray] = {"sub_id": self.sub_ids, "worker": self.worker, "weight": self.weight,
                "subset": self.subset}
        ss = self.subsets
        terms = np.empty(len(ss), dtype=object)
        for j in range(len(ss)):
            terms[j] = ss.terms[ss.terms_ptr[j] : ss.terms_ptr[j + 1]]
        sets: dict[str, np.ndarray] = {
            "subset": np.arange(len(ss), dtype=np.int64),
            "xmin": ss.rect[:, 0], "ymin": ss.rect[:, 1], "xmax": ss.rect[:, 2], "ymax": ss.rect[:, 3],
            "rxmin": ss.region[:, 0], "rymin": ss.region[:, 1], "rxmax": ss.region[:, 2],
            "rymax": ss.region[:, 3],
            "weight": ss.weight, "size": ss.size, "worker": ss.worker, "kind": ss.kind,
            "depth": ss.depth, "all_terms": ss.all_terms, "terms": terms,
        }
        return meta, subs, sets

    @staticmethod
    def from_tables(
        meta: dict[str, Any], subscriptions: dict[str, Any], subsets: dict[str, Any]
    ) -> PartitionPlan:
        """Inverse of :meth:`to_tables`; rows may come back in any order (they are re-sorted
        by ``subset``; subscriptions keep the order given). Subset tables without the term
        columns read as every term set ALL."""
        order = np.argsort(np.asarray(subsets["subset"], dtype=np.int64), kind="stable")
        col = {k: np.asarray(v)[order] for k, v in subsets.items() if k != "terms"}
        if not np.array_equal(col["subset"], np.arange(order.shape[0])):
            raise ValueError("subset table rows must be numbered 0..n-1")
        term_cols: dict[str, np.ndarray] = {}  # absent ones: every term set ALL
        if "terms" in subsets:
            rows = [np.asarray(subsets["terms"][i], dtype=np.int32).reshape(-1) for i in order.tolist()]
            lengths = np.array([r.shape[0] for r in rows], dtype=np.int64)
            term_cols["terms_ptr"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            term_cols["terms"] = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int32)
        if "all_terms" in subsets:
            term_cols["all_terms"] = col["all_terms"].astype(np.bool_)
        table = SubsetTable(
            rect=np.stack([col["xmin"], col["ymin"], col["xmax"], col["ymax"]], axis=1),
            region=np.stack([col["rxmin"], col["rymin"], col["rxmax"], col["rymax"]], axis=1),
            weight=col["weight"], size=col["size"], worker=col["worker"], kind=col["kind"],
            depth=col["depth"], **term_cols,
        )
        d = dict(meta)
        d.update(sub_ids=subscriptions["sub_id"], worker=subscriptions["worker"],
                 weight=subscriptions["weight"], subset=subscriptions["subset"])
        fmt = d.get("format", PLAN_FORMAT_VERSION)
        if fmt != PLAN_FORMAT_VERSION:
            raise ValueError(f"unsupported partition plan format {fmt}; expected {PLAN_FORMAT_VERSION}")
        return PartitionPlan(
            method=Method.from_str(d["method"]), m=int(d["m"]), params=dict(d["params"]),
            space=Rect(*(float(v) for v in d["space"])), n_objects=int(d["n_objects"]),
            sub_ids=np.asarray(d["sub_ids"], dtype=np.int64),
            worker=np.asarray(d["worker"], dtype=np.int32),
            weight=np.asarray(d["weight"], dtype=np.int64),
            subset=np.asarray(d["subset"], dtype=np.int64),
            load_weight=np.asarray(d["load_weight"], dtype=np.int64),
            subsets=table,
        )

    def to_json(self) -> str:
        """The plan as compact JSON."""
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)

    @staticmethod
    def from_json(text: str | bytes) -> PartitionPlan:
        """The plan of :meth:`to_json`'s text."""
        return PartitionPlan.from_dict(json.loads(text))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PartitionPlan):
            return NotImplemented
        return (
            self.method == other.method
            and self.m == other.m
            and self.params == other.params
            and self.space == other.space
            and self.n_objects == other.n_objects
            and all(
                np.array_equal(getattr(self, f), getattr(other, f))
                for f in ("sub_ids", "worker", "weight", "subset", "load_weight")
            )
            and self.subsets == other.subsets
        )

    __hash__ = None  # type: ignore[assignment]


def _empty_subsets() -> SubsetTable:
    z = np.zeros(0, dtype=np.int64)
    return SubsetTable(
        rect=np.zeros((0, 4)), region=np.zeros((0, 4)), weight=z, size=z,
        worker=np.zeros(0, dtype=np.int32), kind=np.zeros(0, dtype=np.int8),
        depth=np.zeros(0, dtype=np.int32),
    )
