"""The brute-force oracle on hand-made cases and against an independent tiny implementation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dkmsks.core.model import KeywordSets, Objects, Op, SubscriptionEvents
from dkmsks.core.oracle import live_subscriptions, oracle_results

pytestmark = pytest.mark.unit


def events(rows):
    """rows: (op, id, x, y, keywords, k, t); deletes may give None for the unused fields."""
    return SubscriptionEvents(
        np.array([Op.from_str(r[0]) for r in rows], dtype=np.int8),
        np.array([r[1] for r in rows], dtype=np.int64),
        np.array([math.nan if r[2] is None else r[2] for r in rows]),
        np.array([math.nan if r[3] is None else r[3] for r in rows]),
        KeywordSets.from_lists([r[4] or [] for r in rows]),
        np.array([r[5] or 0 for r in rows], dtype=np.int32),
        np.array([r[6] for r in rows], dtype=np.int64),
    )


def as_lists(results):
    return {s: (r.object_ids.tolist(), r.d2.tolist()) for s, r in results.items()}


A, B, C = 0, 1, 2  # keyword ids


def test_distance_ties_break_by_object_id():
    objs = Objects.build([30, 10, 20], [1, -1, 0], [0, 0, 1], [[A], [A], [A]], [0, 0, 0])
    ev = events([("insert", 1, 0, 0, [A], 2, 0)])
    assert as_lists(oracle_results(objs, ev, 0)) == {1: ([10, 20], [1.0, 1.0])}


def test_co_located_objects_and_subscription():
    objs = Objects.build([5, 4, 6], [2, 2, 2], [3, 3, 3], [[A], [A, B], [B]], [0, 0, 0])
    ev = events([("insert", 1, 2, 3, [A, B], 3, 0), ("insert", 2, 2, 3, [B], 1, 0)])
    assert as_lists(oracle_results(objs, ev, 0)) == {
        1: ([4, 5, 6], [0.0, 0.0, 0.0]),
        2: ([4], [0.0]),
    }


def test_objects_before_registration_do_not_qualify():
    objs = Objects.build([1, 2, 3], [0, 5, 9], [0, 0, 0], [[A], [A], [A]], [0, 2, 3])
    ev = events([("insert", 7, 0, 0, [A], 5, 2)])  # registered at t=2: sees o.t >= 2 only
    assert as_lists(oracle_results(objs, ev, 3)) == {7: ([2, 3], [25.0, 81.0])}
    assert as_lists(oracle_results(objs, ev, 2)) == {7: ([2], [25.0])}
    assert oracle_results(objs, ev, 1) == {}  # not registered yet


def test_initial_subscriptions_see_all_of_o_init():
    objs = Objects.build([1, 2], [0, 1], [0, 0], [[A], [A]], [-5, 0])  # O_init: t <= T0 = 0
    ev = events([("insert", 7, 0, 0, [A], 5, 0)])
    assert as_lists(oracle_results(objs, ev, 0)) == {7: ([1, 2], [0.0, 1.0])}


def test_deleted_then_registered_again_starts_over():
    objs = Objects.build([1, 2, 3], [0, 1, 2], [0, 0, 0], [[A], [A], [A]], [0, 1, 3])
    ev = events([
        ("insert", 7, 0, 0, [A], 2, 0),
        ("delete", 7, None, None, None, None, 2),
        ("insert", 7, 0.5, 0, [A], 2, 2),
    ])
    assert as_lists(oracle_results(objs, ev, 1)) == {7: ([1, 2], [0.0, 1.0])}
    assert as_lists(oracle_results(objs, ev, 2)) == {7: ([], [])}  # re-registered at 2, O(s) empty
    assert as_lists(oracle_results(objs, ev, 3)) == {7: ([3], [2.25])}


def test_deletion_at_t_is_gone_at_t_and_insert_sees_objects_of_its_timestamp():
    objs = Objects.build([1, 2], [0, 1], [0, 0], [[A], [A]], [0, 4])
    ev = events([
        ("insert", 7, 0, 0, [A], 1, 0),
        ("delete", 7, None, None, None, None, 4),
        ("insert", 8, 0, 0, [A], 1, 4),
    ])
    assert as_lists(oracle_results(objs, ev, 4)) == {8: ([2], [1.0])}


def test_fewer_matches_than_k_and_unseen_keywords():
    objs = Objects.build([1, 2, 3], [0, 1, 2], [0, 0, 0], [[A], [B], [A, B]], [0, 0, 0])
    ev = events([("insert", 7, 0, 0, [A], 10, 0), ("insert", 8, 0, 0, [C], 3, 0)])
    assert as_lists(oracle_results(objs, ev, 0)) == {7: ([1, 3], [0.0, 4.0]), 8: ([], [])}


def test_events_out_of_file_order_within_a_timestamp_apply_deletions_first():
    ev = events([("insert", 7, 0, 0, [A], 1, 0), ("insert", 7, 1, 1, [A], 1, 3),
                 ("delete", 7, None, None, None, None, 3)])
    live = live_subscriptions(ev, 3)
    assert live.ids.tolist() == [7] and live.x.tolist() == [1.0]


def test_inconsistent_events_are_refused_not_guessed():
    with pytest.raises(ValueError, match="not live"):
        live_subscriptions(events([("delete", 7, None, None, None, None, 1)]), 1)
    with pytest.raises(ValueError, match="already live"):
        live_subscriptions(events([("insert", 7, 0, 0, [A], 1, 0), ("insert", 7, 0, 0, [A], 1, 1)]), 1)


def tiny_reference(objs_rows, ev_rows, as_of, t0=0):
    """Independent plain-Python implementation of docs/design.md §1 on tuples."""
    live = {}
    for t in sorted({r[6] for r in ev_rows if r[6] <= as_of}):
        for r in ev_rows:
            if r[6] == t and r[0] == "delete":
                live.pop(r[1])
        for r in ev_rows:
            if r[6] == t and r[0] == "insert":
                live[r[1]] = r
    out = {}
    for sid, (_, _, sx, sy, skw, k, st) in live.items():
        reg = -math.inf if st <= t0 else st
        cands = sorted(
            ((ox - sx) * (ox - sx) + (oy - sy) * (oy - sy), oid)
            for oid, ox, oy, okw, ot in objs_rows
            if set(okw) & set(skw) and reg <= ot <= as_of
        )[:k]
        out[sid] = ([c[1] for c in cands], [c[0] for c in cands])
    return out


@pytest.mark.parametrize("seed", range(8))
def test_oracle_matches_independent_reference_on_random_streams(seed):
    rng = np.random.default_rng(seed)
    n_obj, n_kw, T = 120, 5, 6
    # Coordinates on a coarse lattice so that distance ties and co-located points are common.
    objs_rows = [
        (int(i * 7 + 3), float(rng.integers(0, 6)), float(rng.integers(0, 6)),
         sorted(set(rng.integers(0, n_kw, size=rng.integers(1, 3)).tolist())), int(rng.integers(0, T + 1)))
        for i in range(n_obj)
    ]
    ev_rows, live, deleted, next_id = [], set(), [], 0
    for t in range(T + 1):
        for sid in sorted(live):
            if t > 0 and rng.random() < 0.2:
                ev_rows.append(("delete", sid, None, None, None, None, t))
                live.discard(sid)
                deleted.append(sid)
        for _ in range(6 if t == 0 else 3):
            if deleted and rng.random() < 0.4:
                sid = deleted.pop(0)  # a deleted id registered again (maybe in the same t)
            else:
                sid, next_id = next_id, next_id + 1
            ev_rows.append(("insert", sid, float(rng.integers(0, 6)), float(rng.integers(0, 6)),
                            sorted(set(rng.integers(0, n_kw + 1, size=rng.integers(1, 3)).tolist())),
                            int(rng.integers(1, 5)), t))
            live.add(sid)
    objs = Objects.build([o[0] for o in objs_rows], [o[1] for o in objs_rows], [o[2] for o in objs_rows],
                         [o[3] for o in objs_rows], [o[4] for o in objs_rows])
    ev = events(ev_rows)
    for as_of in range(T + 1):
        assert as_lists(oracle_results(objs, ev, as_of)) == tiny_reference(objs_rows, ev_rows, as_of)
