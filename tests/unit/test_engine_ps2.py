"""PS²Stream (``ps2``) end to end in the in-memory engine: results equal the brute-force
oracle for every worker count, with subscription insertions and deletions, on adversarial
cases and on slices of both real data sets; the worker index's parts (docs/design.md §2.5)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dkmsks.core.config import PartitionConfig
from dkmsks.core.engine import build_engine
from dkmsks.core.knn_state import KnnState
from dkmsks.core.model import Subscriptions
from dkmsks.core.oracle import live_subscriptions
from dkmsks.core.worker_index import Ps2Index, make_index
from dkmsks.core.workload import WorkloadSpec, generate_workload
from test_engine import check_against_oracle
from test_update import adversarial_case

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("m", "new"), list(itertools.product([1, 2, 7, 20], ["argmin", "route"])))
def test_ps2_engine_equals_oracle_adversarial(m: int, new: str) -> None:
    """Ties, objects outside the data space, keywords absent from O_init, re-registered ids."""
    objects, events = adversarial_case(60 + m, timestamps=6)
    config = PartitionConfig(method="PS²Stream", workers=m, ps2_theta=2, ps2_new=new)
    engine, setup = build_engine(config, objects, events, threads=2)
    assert engine.method == "ps2" and engine.workers[0].index.kind == "ps2"
    assert setup.plan.method.value == "ps2" and setup.plan.params["leaves"] > 1
    assert np.array_equal(engine.where(setup.plan.sub_ids), setup.plan.worker)
    check_against_oracle(engine, objects, events, [2, 4, 6])


def test_ps2_index_parts() -> None:
    """Initial subscriptions by home leaf, new ones in the overflow part; R is the MBR of the
    balls (not a cell), grows at once for an infinite ball and shrinks after maintenance."""
    subs = Subscriptions.build([1, 2, 3], [0.0, 10.0, 5.0], [0.0, 0.0, 5.0], [[0], [0], [1]],
                               [1, 1, 1], [0, 0, 0])
    state = KnnState(width=1)
    # Balls of radius 1, 2 and 3 around the three centres.
    rows = state.add(subs, (np.array([[7], [8], [9]]), np.array([[1.0], [4.0], [9.0]])))
    index = make_index("ps2", None)  # type: ignore[arg-type]
    assert isinstance(index, Ps2Index) and index.kind == "ps2"
    index.add(state, rows[:2], np.array([4, 4]))
    index.add(state, rows[2:])  # no group: the overflow part
    assert index.labels == [4, Ps2Index.OVERFLOW]
    assert index.group[rows].tolist() == [0, 0, 1]
    r = index.rect
    assert r[0, 0] < -1.0 < 12.0 < r[0, 2] < 12.0 + 1e-6  # x: [0 - 1, 10 + 2], a little wider
    assert 2.0 - 1e-6 < r[1, 1] < 2.0 < 8.0 < r[1, 3] < 8.0 + 1e-6  # y: [5 - 3, 5 + 3]
    new = state.add(Subscriptions.build([4], [50.0], [50.0], [[0]], [1], [1]), None)
    index.add(state, new)
    assert np.isinf(index.rect[1]).all()  # an infinite ball: the whole plane
    # Its ball becomes radius 0.5: after maintenance R is the MBR of (5,5)±3 and (50,50)±0.5.
    state.ids[new], state.d2[new] = 6, 0.25
    index.updated(state, new)
    index.maintain(state, force=True)
    assert 2.0 - 1e-6 < index.rect[1, 0] < 2.0 < 50.5 < index.rect[1, 2] < 50.5 + 1e-6


# ---------------------------------------------------------------------------- real data
def real_case(path) -> dict:
    from conftest import real_objects

    source, _ = real_objects(10_000, path)
    spec = WorkloadSpec(
        o_init=6_000, subscriptions=1_500, timestamps=4, objects_per_ts=1_000,
        inserts_per_ts=100, deletes_per_ts=100, k_max=10, seed=14,
    )
    return {"workload": generate_workload(source, spec), "oracle": {}, "min_work": None}


@pytest.fixture(scope="module")
def place() -> dict:
    from conftest import PLACE_FILE

    return real_case(PLACE_FILE)


@pytest.fixture(scope="module")
def names() -> dict:
    from conftest import NAMES_FILE

    return real_case(NAMES_FILE)


@pytest.mark.realdata
@pytest.mark.parametrize(("data", "m"), list(itertools.product(["place", "names"], [1, 7, 20])))
def test_ps2_engine_equals_oracle_real_data(data: str, m: int, request: pytest.FixtureRequest) -> None:
    case = request.getfixturevalue(data)
    objects, events = case["workload"]
    engine, setup = build_engine(PartitionConfig(method="ps2", workers=m, ps2_theta=20), objects, events, threads=2)
    plan = setup.plan
    assert np.array_equal(engine.where(plan.sub_ids), plan.worker)
    assert plan.load_weight.sum() == plan.subsets.weight.sum()
    metrics = check_against_oracle(engine, objects, events, [1, 2, 4], cache=case["oracle"])
    assert [x.t for x in metrics] == [1, 2, 3, 4]
    for x in metrics:
        assert x.n_inserted == 100 and x.n_deleted == 100
        assert x.work >= x.min_work
        assert x.worker_subs.sum() == len(live_subscriptions(events, x.t))
    # The minimum possible work is a property of the data, not of m.
    min_work = [x.min_work for x in metrics]
    case["min_work"] = case["min_work"] or min_work
    assert min_work == case["min_work"]
    # β = 1 per subscription: C(w) moved by +1 per insertion and -1 per deletion in total.
    assert setup.server.load_weight.sum() == plan.load_weight.sum()
