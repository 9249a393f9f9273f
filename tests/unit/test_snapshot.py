"""What the live map reads (dkmsks.storage.snapshot) equals the oracle at every timestamp: the
live subscriptions with their exact results, their place, k and keywords as registered, the
worker that held them then; across a compaction (a knn_state version exact at a later
timestamp) and a subscription deleted and registered again elsewhere; a box, a limit and a few
ids; the objects of a range of timestamps and by id."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.client import Client
from dkmsks.storage import lake as lake_module
from dkmsks.storage.snapshot import objects_between, objects_by_id, spread_order, subscriptions_as_of
from live_pipeline import live_pipeline, workload

pytestmark = [pytest.mark.unit, pytest.mark.realdata]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Six timestamps of the workload, a compaction after the third, and subscription 990001
    registered at 2, deleted at 4 and registered again at another place with another k at 5."""
    work = workload()
    pipeline = live_pipeline(tmp_path_factory.mktemp("snapshot") / "wh", work)
    client = Client(pipeline.warehouse)
    seen = {0: (dict(pipeline.info), dict(pipeline.workers))}
    first = work.objects_at(1)[0]
    for t in range(1, 7):
        client.publish(work.objects_at(t), work.events_at(t))
        if t == 2:
            client.subscribe(990001, first["x"], first["y"], first["keywords"][:1], 2)
        if t == 4:
            client.unsubscribe(990001)
        if t == 5:
            client.subscribe(990001, first["x"] + 0.5, first["y"] - 0.5, first["keywords"][:1], 3)
        assert pipeline.round() == [t]
        seen[t] = (dict(pipeline.info), dict(pipeline.workers))
        if t == 3:
            assert pipeline.compact() == 3
    return pipeline, work, seen


def rows(snapshot):
    return {r["sub_id"]: r for r in snapshot.subscriptions.to_pylist()}


@pytest.mark.parametrize("t", range(7))
def test_every_live_subscription_at_t_with_its_exact_result_place_and_worker(run, t):
    pipeline, _, seen = run
    oracle = pipeline.oracle(t)
    info, workers = seen[t]
    snap = subscriptions_as_of(pipeline.lake, t)
    got = rows(snap)
    assert snap.t == t and snap.total == len(oracle) and sorted(got) == sorted(oracle)
    for sid, r in got.items():
        assert (r["object_ids"], r["d2"]) == (oracle[sid].object_ids.tolist(), oracle[sid].d2.tolist()), (t, sid)
        x, y, keywords, k, registered = info[sid]
        assert (r["x"], r["y"], r["keywords"], r["k"], r["registered_t"]) == (x, y, keywords, k, registered), (t, sid)
        assert r["worker"] == workers[sid], (t, sid)
    if 2 <= t < 4 or t >= 5:  # registered again at 5: the second registration's place and k
        assert got[990001]["registered_t"] == (2 if t < 4 else 5) and got[990001]["k"] == (2 if t < 4 else 3)
    else:
        assert 990001 not in got


def test_a_box_a_limit_and_a_few_ids(run, monkeypatch):
    pipeline, _, _ = run
    whole = rows(subscriptions_as_of(pipeline.lake, 6))
    xs = sorted(r["x"] for r in whole.values())
    ys = sorted(r["y"] for r in whole.values())
    box = (xs[len(xs) // 4], ys[len(ys) // 4], xs[-1], ys[-1])
    inside = sorted(s for s, r in whole.items() if box[0] <= r["x"] <= box[2] and box[1] <= r["y"] <= box[3])
    assert 0 < len(inside) < len(whole)
    boxed = subscriptions_as_of(pipeline.lake, 6, box=box)
    assert boxed.total == len(inside) and sorted(rows(boxed)) == inside
    limited = subscriptions_as_of(pipeline.lake, 6, box=box, limit=5)
    ids = np.array(inside, dtype=np.int64)
    assert limited.total == len(inside)
    assert sorted(rows(limited)) == sorted(ids[spread_order(ids)[:5]].tolist())
    assert rows(limited) == {s: whole[s] for s in rows(limited)}
    for limit in (lake_module.PREDICATE_IDS, 1):  # through the scans' predicate, or filtered after
        monkeypatch.setattr(lake_module, "PREDICATE_IDS", limit)
        picked = [inside[0], 990001, 123456789]
        assert rows(subscriptions_as_of(pipeline.lake, 6, sub_ids=picked)) == {s: whole[s] for s in picked[:2]}
    assert subscriptions_as_of(pipeline.lake, 6, sub_ids=[]).total == 0


def test_spread_order_is_a_fixed_permutation():
    ids = np.arange(1000, dtype=np.int64) * 7
    order = spread_order(ids)
    assert sorted(order.tolist()) == list(range(1000))
    assert order.tolist() == spread_order(ids.copy()).tolist()
    # Spread: the first tenth is not a run of neighbouring ids.
    assert np.ptp(ids[order[:100]]) > 5000
    # A subset keeps the relative order of its members.
    sub = ids[::3]
    assert ids[order][np.isin(ids[order], sub)].tolist() == sub[spread_order(sub)].tolist()


def test_objects_of_a_range_of_timestamps_and_by_id(run):
    pipeline, work, _ = run
    expected = [o for t in (3, 4) for o in sorted(work.objects_at(t), key=lambda o: o["id"])]
    table, total = objects_between(pipeline.lake, 2, 4)
    assert total == len(expected) and table.to_pylist() == expected
    newest, total = objects_between(pipeline.lake, 2, 4, limit=3)
    assert total == len(expected) and newest.to_pylist() == sorted(
        sorted(work.objects_at(4), key=lambda o: o["id"])[:3], key=lambda o: o["id"])
    first = expected[0]
    box = (first["x"], first["y"], first["x"], first["y"])
    assert objects_between(pipeline.lake, 2, 4, box=box)[0].column("id").to_pylist()[0] == first["id"]
    picked = [expected[5]["id"], expected[0]["id"], 1 << 60]
    assert objects_by_id(pipeline.lake, picked).to_pylist() == sorted(expected[:1] + expected[5:6],
                                                                       key=lambda o: o["id"])
    assert objects_by_id(pipeline.lake, picked, through=3).column("id").to_pylist() == [
        o["id"] for o in sorted(expected[:1] + expected[5:6], key=lambda o: o["id"]) if o["t"] <= 3]
