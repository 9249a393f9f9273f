"""What one worker task runs (spark/bridge.py), without a JVM: a catch-up that shares one
index probe over several timestamps emits exactly the records of one timestamp at a time, and
its final state is the oracle's."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from dkmsks.core.model import KnnResult, Op, Vocabulary, describe_difference, results_equal
from dkmsks.core.oracle import brute_force_knn, live_subscriptions, oracle_results
from test_update import adversarial_case, knn_matrices

pytestmark = pytest.mark.unit

T = 8


def _words(vocab: Vocabulary, sets, rows=None):
    rows = range(len(sets.ptr) - 1) if rows is None else rows
    return [[f"w{k}" for k in sets.row(i).tolist()] for i in rows]


def _initial_state(objects, events):
    """The ``knn_state`` rows of one worker holding every initial subscription."""
    o_init = objects.take(np.flatnonzero(objects.t <= 0))
    subs = live_subscriptions(events, 0, t0=0)
    ids, d2 = knn_matrices(brute_force_knn(o_init, subs, 0), subs)
    lists = [(ids[i][ids[i] >= 0].tolist(), d2[i][ids[i] >= 0].tolist()) for i in range(len(subs))]
    n = len(subs)
    return pa.table({
        "plan_version": np.zeros(n, np.int64), "worker": np.zeros(n, np.int32), "sub_id": subs.ids,
        "x": subs.x, "y": subs.y, "keywords": _words(None, subs.keywords), "k": subs.k.astype(np.int32),
        "registered_t": np.zeros(n, np.int64), "weight": np.ones(n, np.int64), "subset": np.zeros(n, np.int64),
        "object_ids": [a for a, _ in lists], "d2": [b for _, b in lists], "updated_t": np.zeros(n, np.int64),
    })


def _space(objects, events):
    from dkmsks.core.model import data_space

    return data_space(objects.take(np.flatnonzero(objects.t <= 0)), live_subscriptions(events, 0, t0=0)).as_tuple()


def _payload(objects, events, probe_timestamps):
    from dkmsks.spark.bridge import BatchPayload, KeywordColumn

    words = [f"w{k}" for k in range(64)]
    later = np.flatnonzero(objects.t > 0)
    obj = objects.take(later)
    ev = events.take(np.flatnonzero(events.t > 0))
    dels, ins = np.flatnonzero(ev.op == Op.DELETE), np.flatnonzero(ev.op == Op.INSERT)
    e = ev.take(ins)
    return BatchPayload(
        method="dkm", space=_space(objects, events), timestamps=list(range(1, T + 1)),
        obj_ids=obj.ids, obj_x=obj.x, obj_y=obj.y, obj_t=obj.t,
        obj_keywords=KeywordColumn.from_sets(obj.keywords, words),
        del_t=ev.t[dels], del_ids=ev.ids[dels], del_worker=np.zeros(dels.shape[0], np.int32),
        ins_t=e.t, ins_ids=e.ids, ins_worker=np.zeros(len(e), np.int32), ins_x=e.x, ins_y=e.y, ins_k=e.k,
        ins_weight=np.ones(len(e), np.int64), ins_keywords=KeywordColumn.from_sets(e.keywords, words),
        grid=4, probe_timestamps=probe_timestamps,
    )


def _records(objects, events, probe_timestamps):
    from dkmsks.spark.bridge import WorkerSession

    payload = _payload(objects, events, probe_timestamps)
    session = WorkerSession(0, _initial_state(objects, events), method="dkm", space=payload.space, grid=4)
    return session.apply(payload)


@pytest.mark.parametrize("seed", [3, 8])
def test_a_shared_probe_emits_the_records_of_one_timestamp_at_a_time(seed):
    objects, events = adversarial_case(seed, timestamps=T)
    one = _records(objects, events, 1)
    assert one.num_rows > 0
    # pairs_in_ball counts each timestamp's pairs inside the balls as they stand then, whatever
    # the width; pairs_tested depends on the width (a shared probe meets the group-start balls).
    keep = ["record", "t", "seq", "sub_id", "change", "object_ids", "d2", "k", "registered_t",
            "subscriptions", "results_changed", "pairs_in_ball"]
    for width in (3, T):
        shared = _records(objects, events, width)
        assert shared.select(keep).equals(one.select(keep)), width
        metrics = shared.filter(pa.compute.equal(shared.column("record"), "metric"))
        assert metrics.column("t").to_pylist() == list(range(1, T + 1))

    _assert_replay_is_the_oracle([_initial_state(objects, events)], [one], objects, events)


def _assert_replay_is_the_oracle(states, records, objects, events):
    """The change records of every worker, replayed over the workers' initial results one
    timestamp at a time (its deletions, insertions, then updates), give the oracle at every t."""
    results = {int(s): KnnResult(np.asarray(o, np.int64), np.asarray(d, np.float64))
               for st in states
               for s, o, d in zip(*(st.column(c).to_pylist() for c in ("sub_id", "object_ids", "d2")), strict=True)}
    changes = [c for t in records for c in t.filter(pa.compute.equal(t.column("record"), "change")).to_pylist()]
    phase = {"delete": 0, "insert": 1, "update": 2}  # as one timestamp is applied (docs/design.md §1)
    for t in range(1, T + 1):
        for c in sorted((c for c in changes if c["t"] == t), key=lambda c: (phase[c["change"]], c["worker"], c["seq"])):
            if c["change"] == "delete":
                del results[c["sub_id"]]
            else:
                results[c["sub_id"]] = KnnResult(np.asarray(c["object_ids"], np.int64),
                                                 np.asarray(c["d2"], np.float64))
        expected = oracle_results(objects, events, t)
        assert results_equal(results, expected), f"t={t}: " + describe_difference(results, expected)


@pytest.mark.parametrize("seed", [3, 8])
def test_a_worker_task_on_the_numpy_reference_kernel_emits_the_same_records(seed, monkeypatch):
    """DKMSKS_KERNEL=numpy puts a Spark worker task on the numpy reference path: the records of
    a multi-timestamp batch (changes, metrics' work counters) equal those of the default kernel."""
    objects, events = adversarial_case(seed, timestamps=T)
    keep = ["record", "t", "seq", "sub_id", "change", "object_ids", "d2", "k", "registered_t",
            "subscriptions", "results_changed", "pairs_tested", "pairs_in_ball"]
    compiled = _records(objects, events, T)
    monkeypatch.setenv("DKMSKS_KERNEL", "numpy")
    from dkmsks.spark.bridge import WorkerSession

    session = WorkerSession(0, _initial_state(objects, events), method="dkm", space=_space(objects, events), grid=4)
    assert session.worker.kernel == "numpy" and session.worker.index.kernel == "numpy"
    reference = _records(objects, events, T)
    assert compiled.num_rows > 0
    assert reference.select(keep).equals(compiled.select(keep))


def _split(objects, events, workers):
    """The initial ``knn_state`` rows dealt to ``workers`` workers (sub i to worker i mod m) and
    a payload whose insertions go round-robin too and whose deletions go to the owner."""
    state = _initial_state(objects, events)
    owner = {int(s): i % workers for i, s in enumerate(state.column("sub_id").to_pylist())}
    base = _payload(objects, events, 3)
    ins_worker = (np.arange(base.ins_ids.shape[0]) % workers).astype(np.int32)
    del_worker = np.zeros(base.del_ids.shape[0], dtype=np.int32)
    for t in range(1, T + 1):  # a timestamp's deletions first (an id may come back at once)
        for i in np.flatnonzero(base.del_t == t).tolist():
            del_worker[i] = owner.pop(int(base.del_ids[i]))
        for i in np.flatnonzero(base.ins_t == t).tolist():
            owner[int(base.ins_ids[i])] = int(ins_worker[i])
    import dataclasses

    payload = dataclasses.replace(base, ins_worker=ins_worker, del_worker=del_worker)
    worker_of = np.arange(state.num_rows) % workers
    parts = [state.filter(pa.array(worker_of == w)) for w in range(workers)]
    return [p.set_column(p.schema.get_field_index("worker"), "worker",
                         pa.array(np.full(p.num_rows, w, np.int32))) for w, p in enumerate(parts)], payload


@pytest.mark.parametrize(("method", "seed"), [("dkm", 3), ("dkm", 8), ("kop", 5)])
def test_hosted_workers_sharing_a_round_emit_the_records_each_makes_alone(method, seed):
    """A follow task's workers share one vocabulary and each round's inputs (keyword ids, routed
    events, probe groups and the sorted probe: RoundInputs); their records are those each
    worker makes alone, with the groups kept or (keep_bytes=0) made again per worker, and the
    change records of all of them replay to the oracle at every timestamp."""
    from dkmsks.spark.bridge import RoundInputs, WorkerSession

    objects, events = adversarial_case(seed, timestamps=T)
    states, payload = _split(objects, events, 3)
    payload = __import__("dataclasses").replace(payload, method=method)
    keep = ["record", "t", "seq", "worker", "sub_id", "change", "object_ids", "d2", "x", "y", "keywords", "k",
            "registered_t", "weight", "subset", "subscriptions", "pairs_tested", "pairs_in_ball",
            "results_changed"]

    def session(w, vocab=None):
        return WorkerSession(w, states[w], method=method, space=payload.space, grid=4, vocab=vocab)

    alone = [session(w).apply(payload).select(keep) for w in range(3)]
    assert all(t.num_rows > 0 for t in alone)
    for keep_bytes in (RoundInputs.KEEP_BYTES, 0):
        vocab = Vocabulary()
        hosted = [session(w, vocab) for w in range(3)]
        inputs = RoundInputs(payload, vocab, keep_bytes=keep_bytes)
        shared = [s.apply(inputs).select(keep) for s in hosted]
        for w in range(3):
            assert shared[w].equals(alone[w]), (keep_bytes, w)
        assert (inputs.kept_bytes > 0) == (keep_bytes > 0)
    with pytest.raises(ValueError, match="another vocabulary"):
        session(0).apply(RoundInputs(payload, Vocabulary()))
    _assert_replay_is_the_oracle(states, alone, objects, events)


@pytest.mark.parametrize("seed", [3, 5, 8])
def test_a_groups_events_applied_at_once_give_the_records_of_one_timestamp_at_a_time(seed, monkeypatch):
    """A probe group's deletions and insertions go in one call each unless an id occurs twice
    among them (_events_at_once): the records, live counts included, equal those of applying
    them one timestamp at a time, for one worker and for three sharing a round; both ways are
    taken in these workloads (an adversarial case registers deleted ids again)."""
    from dkmsks.spark.bridge import RoundInputs, WorkerSession
    from dkmsks.spark.worker_records import OUTPUT_SCHEMA

    objects, events = adversarial_case(seed, timestamps=T)
    states, split = _split(objects, events, 3)
    keep = [f.name for f in OUTPUT_SCHEMA if f.name not in ("knn_ms", "insert_ms", "delete_ms")]
    taken = {"at once": 0, "one by one": 0}
    at_once = WorkerSession._events_at_once

    def counted(self, inputs, group):
        events_ = at_once(self, inputs, group)
        taken["at once" if events_ is not None else "one by one"] += 1
        return events_

    monkeypatch.setattr(WorkerSession, "_events_at_once", counted)

    def records(flag, width):
        monkeypatch.setattr(WorkerSession, "events_at_once", flag)
        single = _records(objects, events, width).select(keep)
        vocab = Vocabulary()
        payload = __import__("dataclasses").replace(split, probe_timestamps=width)
        inputs = RoundInputs(payload, vocab)
        hosted = [WorkerSession(w, states[w], method="dkm", space=payload.space, grid=4, vocab=vocab)
                  for w in range(3)]
        return [single] + [s.apply(inputs).select(keep) for s in hosted]

    for width in (3, T):
        before = dict(taken)
        one_by_one = records(False, width)
        assert taken == before  # the flag off: never tried
        for mine, theirs in zip(records(True, width), one_by_one, strict=True):
            assert mine.num_rows > 0 and mine.equals(theirs), width
    assert taken["at once"] > 0 and taken["one by one"] > 0, taken


@pytest.mark.parametrize("seed", [3, 5, 8])
def test_deletions_asked_of_every_worker_are_recorded_by_the_worker_that_held_them(seed, monkeypatch):
    """A deletion routed to worker -1 (a main server that does not track workers asks every
    worker, core/protocol.py) gives each worker the records of the same deletion routed to the
    worker holding it: one timestamp at a time and a probe group's events at once."""
    import dataclasses

    from dkmsks.spark.bridge import RoundInputs, WorkerSession
    from dkmsks.spark.worker_records import OUTPUT_SCHEMA

    objects, events = adversarial_case(seed, timestamps=T)
    states, routed = _split(objects, events, 3)
    asked_of_all = dataclasses.replace(routed, del_worker=np.full(routed.del_ids.shape[0], -1, np.int32))
    keep = [f.name for f in OUTPUT_SCHEMA if f.name not in ("knn_ms", "insert_ms", "delete_ms")]

    def records(payload, flag, width):
        monkeypatch.setattr(WorkerSession, "events_at_once", flag)
        vocab = Vocabulary()
        inputs = RoundInputs(dataclasses.replace(payload, probe_timestamps=width), vocab)
        hosted = [WorkerSession(w, states[w], method="dkm", space=payload.space, grid=4, vocab=vocab)
                  for w in range(3)]
        return [s.apply(inputs).select(keep) for s in hosted]

    deleted = 0
    for flag, width in ((False, 1), (False, 3), (True, 3), (True, T)):
        expected = records(routed, flag, width)
        deleted += sum(pa.compute.sum(pa.compute.equal(r.column("change"), "delete")).as_py() or 0 for r in expected)
        for mine, theirs in zip(records(asked_of_all, flag, width), expected, strict=True):
            assert mine.equals(theirs), (flag, width)
    assert deleted > 0
