"""Routed rounds of the driver without Spark (spark/main_server.py's route and task_payload,
docs/design.md §2.6): rounds of one or several timestamps, with deletions and registrations
inside them, routed by the main server's summary; each task handed only its workers' part; the
records of warm worker sessions replayed give the oracle at every timestamp, for every method,
worker count and number of tasks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from dkmsks.core.config import PartitionConfig
from dkmsks.core.model import KnnResult, Vocabulary, describe_difference, results_equal
from dkmsks.core.oracle import oracle_results
from dkmsks.core.routing import ObjectRouter
from test_update import adversarial_case

pytestmark = pytest.mark.unit

METHODS = ("kop", "sop", "dkm", "ps2")


def _state_table(subs, knn, worker, weight, subset, vocab: Vocabulary) -> pa.Table:
    ids, d2 = knn
    keep = [ids[i][: int(subs.k[i])] for i in range(len(subs))]
    lists = [(row[row >= 0].tolist(), d2[i][: int(subs.k[i])][row >= 0].tolist()) for i, row in enumerate(keep)]
    n = len(subs)
    return pa.table({
        "plan_version": np.zeros(n, np.int64), "worker": np.asarray(worker, np.int32), "sub_id": subs.ids,
        "x": subs.x, "y": subs.y,
        "keywords": [[vocab.word(k) for k in subs.keywords.row(i).tolist()] for i in range(n)],
        "k": subs.k.astype(np.int32), "registered_t": np.zeros(n, np.int64), "weight": np.asarray(weight, np.int64),
        "subset": np.asarray(subset, np.int64), "object_ids": [a for a, _ in lists], "d2": [b for _, b in lists],
        "updated_t": np.zeros(n, np.int64),
    })


@pytest.mark.parametrize(("method", "m", "processes", "width"),
                         [(method, m, p, w) for method in METHODS for m, p in ((1, 1), (3, 2), (7, 3), (20, 4))
                          for w in (1, 4)])
def test_routed_rounds_of_the_driver_equal_the_oracle(method: str, m: int, processes: int, width: int) -> None:
    """The driver's path without Spark: rounds of ``width`` timestamps (deletions and
    registrations inside them, ids registered again) routed by the main server
    (spark/main_server.route with the summary), each task handed only its workers' part
    (task_payload), applied by warm WorkerSessions, the balls reported back (refresh_weights):
    the change records replayed give the oracle at every timestamp, and every task got fewer
    objects than a broadcast's without any worker needing one it did not get."""
    from dkmsks.core.engine import initial_phase
    from dkmsks.core.knn_init import StaticKnnIndex
    from dkmsks.core.model import data_space
    from dkmsks.core.partition import MainServer, partition
    from dkmsks.core.stats import ObjectStatistics
    from dkmsks.spark.bridge import RoundInputs, WorkerSession
    from dkmsks.spark.main_server import refresh_weights, route, task_payload
    from dkmsks.storage.plans import PlanInfo

    T = 8
    objects, events = adversarial_case(90 + m, timestamps=T)
    vocab = Vocabulary(f"w{k}" for k in range(16))
    config = PartitionConfig(method=method, workers=m, grid=4, theta=2, gamma1=3, gamma2=2)
    o_init, subs = initial_phase(objects, events, 0)
    space = data_space(o_init, subs)
    index = StaticKnnIndex.build(o_init, 16, workers=1)
    knn = index.query(subs, width=max(int(subs.k.max()), 1))
    stats = ObjectStatistics.build(o_init, 16, workers=1)
    plan = partition(config.method, stats, knn, subs, space, objects=o_init, **config.partition_kwargs())
    server = MainServer(plan, stats, index, new_cost=config.new_cost, ps2_new=config.ps2_new)
    info = PlanInfo(plan_version=1, config=config, space=space, effective_t=0, meta={})
    router = ObjectRouter(space, m)
    router.register(subs.ids, plan.worker, subs.x, subs.y, subs.keywords,
                    knn[1][np.arange(len(subs)), subs.k.astype(np.int64) - 1])
    subset = plan.subset if method in ("sop", "ps2") else np.full(len(subs), -1)
    table = _state_table(subs, knn, plan.worker, plan.weight, subset, vocab)
    hosted = [list(range(task, m, processes)) for task in range(processes)]
    task_vocab = [Vocabulary() for _ in range(processes)]
    sessions = [[WorkerSession(w, table.filter(pa.compute.equal(table.column("worker"), w)), method=method,
                               space=space.as_tuple(), grid=4, vocab=task_vocab[task]) for w in hosted[task]]
                for task in range(processes)]
    results = {int(s): KnnResult(np.asarray(o, np.int64), np.asarray(d, np.float64))
               for s, o, d in zip(*(table.column(c).to_pylist() for c in ("sub_id", "object_ids", "d2")), strict=True)}
    phase = {"delete": 0, "insert": 1, "update": 2}
    sent = broadcast = 0
    for start in range(1, T + 1, width):
        ts = list(range(start, min(start + width, T + 1)))
        rows = np.flatnonzero((objects.t >= ts[0]) & (objects.t <= ts[-1]))
        order = rows[np.argsort(objects.t[rows], kind="stable")]
        taken = objects.take(order)
        ev = events.take(np.flatnonzero((events.t >= ts[0]) & (events.t <= ts[-1])))
        routed = route(server, info, ts, taken, ev, vocab, router)
        assert routed.objects_to is not None and not routed.refused
        records = []
        for task in range(processes):
            payload = task_payload(routed, hosted[task])
            sent += payload.obj_ids.shape[0]
            broadcast += len(taken)
            inputs = RoundInputs(payload, task_vocab[task])
            records += [session.apply(inputs) for session in sessions[task]]
        out = pa.concat_tables(records)
        refresh_weights(server, out, router)
        changes = out.filter(pa.compute.equal(out.column("record"), "change")).to_pylist()
        for t in ts:
            at_t = [c for c in changes if c["t"] == t]
            for c in sorted(at_t, key=lambda c: (phase[c["change"]], c["worker"], c["seq"])):
                if c["change"] == "delete":
                    del results[c["sub_id"]]
                else:
                    results[c["sub_id"]] = KnnResult(np.asarray(c["object_ids"], np.int64),
                                                     np.asarray(c["d2"], np.float64))
            expected = oracle_results(objects, events, t)
            assert results_equal(results, expected), f"t={t}: " + describe_difference(results, expected)
    assert sent <= broadcast
    if m > processes:
        assert sent < broadcast
