"""Generator statistics follow the paper's protocol (docs/design.md §5)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from conftest import real_objects
from dkmsks.core.model import Op
from dkmsks.core.workload import WorkloadSpec, generate_workload

pytestmark = pytest.mark.unit

SPEC = WorkloadSpec(o_init=5000, subscriptions=2000, timestamps=8, objects_per_ts=300,
                    inserts_per_ts=40, deletes_per_ts=50, k_max=7, seed=3)


@pytest.fixture(scope="module")
def generated():
    source, _ = real_objects(SPEC.objects_needed + 100)
    objects, events = generate_workload(source, SPEC)
    return source, objects, events


def test_objects_are_the_source_head_with_timestamps_0_then_1_to_T(generated):
    source, objects, _ = generated
    assert objects.ids.tolist() == source.ids[: SPEC.objects_needed].tolist()
    assert (objects.t[: SPEC.o_init] == 0).all()
    counts = np.bincount(objects.t)
    assert counts[0] == SPEC.o_init and (counts[1:] == SPEC.objects_per_ts).all()
    assert len(counts) == SPEC.timestamps + 1


def test_subscriptions_copy_a_published_object_and_up_to_five_of_its_keywords(generated):
    _, objects, events = generated
    by_location = defaultdict(list)  # (x, y) -> [(t, keyword set)]
    for i in range(len(objects)):
        by_location[(objects.x[i], objects.y[i])].append((objects.t[i], set(objects.keywords.row(i).tolist())))
    ins = np.flatnonzero(events.op == Op.INSERT)
    assert len(ins) == SPEC.subscriptions + SPEC.timestamps * SPEC.inserts_per_ts
    for r in ins:
        kws = set(events.keywords.row(r).tolist())
        assert 1 <= len(kws) <= 5
        assert 1 <= events.k[r] <= SPEC.k_max
        sources = by_location[(events.x[r], events.y[r])]
        assert any(t <= events.t[r] and kws <= okws for t, okws in sources), r
    # The keyword count is not always the maximum: it is drawn, and k spans its range.
    lengths = events.keywords.lengths()[ins]
    assert set(lengths.tolist()) >= {1, 2, 3}
    assert set(events.k[ins].tolist()) == set(range(1, SPEC.k_max + 1))


def test_deletions_only_of_live_ids_and_per_timestamp_counts(generated):
    _, _, events = generated
    live = set()
    for t in range(SPEC.timestamps + 1):
        rows = np.flatnonzero(events.t == t)
        dels = [int(events.ids[r]) for r in rows if events.op[r] == Op.DELETE]
        inss = [int(events.ids[r]) for r in rows if events.op[r] == Op.INSERT]
        assert all(d in live for d in dels)
        assert len(set(dels)) == len(dels)
        live -= set(dels)
        assert not (set(inss) & live)
        live |= set(inss)
        if t == 0:
            assert (len(dels), len(inss)) == (0, SPEC.subscriptions)
        else:
            assert (len(dels), len(inss)) == (SPEC.deletes_per_ts, SPEC.inserts_per_ts)


def test_same_seed_same_workload_other_seed_differs(generated):
    source, objects, events = generated
    again = generate_workload(source, SPEC)[1]
    assert np.array_equal(again.ids, events.ids) and np.array_equal(again.keywords.ids, events.keywords.ids)
    other = generate_workload(source, WorkloadSpec(**{**SPEC.__dict__, "seed": 4}))[1]
    assert not np.array_equal(other.x, events.x)


def test_too_small_source_and_bad_spec_are_refused_with_a_fix(generated):
    source, _, _ = generated
    with pytest.raises(ValueError, match="lower o_init, timestamps or objects_per_ts"):
        generate_workload(source.take(np.arange(100)), SPEC)
    with pytest.raises(ValueError, match="k_max"):
        WorkloadSpec(o_init=1, subscriptions=1, timestamps=1, k_max=0)
