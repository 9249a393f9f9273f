"""Workload generator: the paper's experimental protocol (docs/design.md §5) over a real object stream.

``O_init`` is the first ``o_init`` objects of the source in stream order; every following
timestamp ``t = 1..T`` publishes the next ``objects_per_ts`` objects, deletes
``deletes_per_ts`` live subscriptions and registers ``inserts_per_ts`` new ones. A
subscription "follows the data": its location is that of a random object published so far,
its keywords a uniformly drawn number (1 to ``min(5, |o.ψ|)``) of that object's keywords
chosen uniformly without replacement, and ``k`` is uniform in ``[1, k_max]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dkmsks.core.model import KeywordSets, Objects, Op, SubscriptionEvents

#: The paper draws "up to five" keywords of the chosen object.
MAX_SUBSCRIPTION_KEYWORDS = 5


@dataclass(frozen=True, kw_only=True)
class WorkloadSpec:
    """Sizes of a generated workload (defaults: the paper's per-timestamp rates)."""

    o_init: int
    subscriptions: int
    timestamps: int
    objects_per_ts: int = 1000
    inserts_per_ts: int = 100
    deletes_per_ts: int = 100
    k_max: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("o_init", "subscriptions", "timestamps", "objects_per_ts",
                     "inserts_per_ts", "deletes_per_ts"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.o_init < 1:
            raise ValueError("o_init must be >= 1: subscriptions take their location from O_init")
        if self.k_max < 1:
            raise ValueError(f"k_max must be >= 1, got {self.k_max}")

    @property
    def objects_needed(self) -> int:
        """The objects the workload draws: ``O_init`` and every timestamp's new ones."""
        return self.o_init + self.timestamps * self.objects_per_ts


def sample_keywords(
    keywords: KeywordSets, rows: np.ndarray, rng: np.random.Generator
) -> KeywordSets:
    """For each source row, a uniform number (1..min(5, len)) of its keywords, uniformly.

    Vectorised: every keyword entry gets a random key, entries are ordered by (row, key)
    and the first ``n_pick`` of each row are kept.
    """
    sub = keywords.take(rows)
    lengths = sub.lengths()
    if np.any(lengths == 0):
        raise ValueError("a source object has no keywords; subscriptions need at least one")
    n_pick = rng.integers(1, np.minimum(lengths, MAX_SUBSCRIPTION_KEYWORDS) + 1)
    owners = sub.owners()
    order = np.lexsort((rng.random(int(sub.ids.shape[0])), owners))
    rank_in_row = np.arange(order.shape[0], dtype=np.int64) - np.repeat(sub.ptr[:-1], lengths)
    chosen = order[rank_in_row < np.repeat(n_pick, lengths)]
    chosen = chosen[np.lexsort((sub.ids[chosen], owners[chosen]))]
    ptr = np.zeros(len(sub) + 1, dtype=np.int64)
    np.cumsum(n_pick, out=ptr[1:])
    return KeywordSets(ptr, sub.ids[chosen].astype(np.int32))


def _subscription_rows(
    source: Objects,
    object_rows: np.ndarray,
    ids: np.ndarray,
    t: int,
    k_max: int,
    rng: np.random.Generator,
) -> SubscriptionEvents:
    n = int(object_rows.shape[0])
    return SubscriptionEvents(
        np.full(n, Op.INSERT, dtype=np.int8),
        ids.astype(np.int64),
        source.x[object_rows],
        source.y[object_rows],
        sample_keywords(source.keywords, object_rows, rng),
        rng.integers(1, k_max + 1, size=n).astype(np.int32),
        np.full(n, t, dtype=np.int64),
    )


def _deletions(ids: np.ndarray, t: int) -> SubscriptionEvents:
    n = ids.shape[0]
    return SubscriptionEvents(
        np.full(n, Op.DELETE, dtype=np.int8),
        ids.astype(np.int64),
        np.full(n, np.nan),
        np.full(n, np.nan),
        KeywordSets(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int32)),
        np.zeros(n, dtype=np.int32),
        np.full(n, t, dtype=np.int64),
    )


def generate_workload(source: Objects, spec: WorkloadSpec) -> tuple[Objects, SubscriptionEvents]:
    """Objects (``O_init`` at ``t = 0``, then ``t = 1..T``) and subscription events.

    ``source`` must be in stream order and hold at least ``spec.objects_needed`` objects.
    Subscription ids are ``0..|S|-1`` for the initial ones and continue upwards for
    insertions; deletions pick uniformly among the subscriptions live before the timestamp.
    Deterministic for a given ``spec.seed``.
    """
    if len(source) < spec.objects_needed:
        raise ValueError(
            f"the source has {len(source)} objects but the workload needs {spec.objects_needed} "
            f"(o_init {spec.o_init} + {spec.timestamps} timestamps x {spec.objects_per_ts}); "
            "lower o_init, timestamps or objects_per_ts"
        )
    rng = np.random.default_rng(spec.seed)
    objects = source.take(np.arange(spec.objects_needed))
    t_of_row = np.zeros(spec.objects_needed, dtype=np.int64)
    if spec.timestamps:
        t_of_row[spec.o_init:] = np.repeat(
            np.arange(1, spec.timestamps + 1, dtype=np.int64), spec.objects_per_ts
        )
    objects = Objects(objects.ids, objects.x, objects.y, objects.keywords, t_of_row)

    parts = [
        _subscription_rows(
            objects,
            rng.integers(0, spec.o_init, size=spec.subscriptions),
            np.arange(spec.subscriptions, dtype=np.int64),
            0,
            spec.k_max,
            rng,
        )
    ]
    # Live ids kept in an array with swap-removal so a uniform deletion costs O(1).
    live = np.arange(spec.subscriptions, dtype=np.int64)
    n_live = spec.subscriptions
    next_id = spec.subscriptions
    for t in range(1, spec.timestamps + 1):
        n_del = min(spec.deletes_per_ts, n_live)
        picked = np.empty(n_del, dtype=np.int64)
        for j in range(n_del):
            pos = int(rng.integers(0, n_live))
            picked[j] = live[pos]
            n_live -= 1
            live[pos] = live[n_live]
        if n_del:
            parts.append(_deletions(picked, t))
        n_ins = spec.inserts_per_ts
        if n_ins:
            visible = spec.o_init + t * spec.objects_per_ts
            new_ids = np.arange(next_id, next_id + n_ins, dtype=np.int64)
            next_id += n_ins
            parts.append(
                _subscription_rows(
                    objects, rng.integers(0, visible, size=n_ins), new_ids, t, spec.k_max, rng
                )
            )
            if n_live + n_ins > live.shape[0]:
                live = np.concatenate([live[:n_live], np.empty(max(n_ins, live.shape[0]), np.int64)])
            live[n_live : n_live + n_ins] = new_ids
            n_live += n_ins
    return objects, SubscriptionEvents.concat(parts)
