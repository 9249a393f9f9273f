"""Live use against the oracle: O_init ingested and partitioned on Spark, then the stream
published without Spark (dkm publish and the client), subscriptions made and deleted with
dkm subscribe / unsubscribe and the client between runs, and every way of reading results
— dkm export --as-of, Client.results, the changes of Client.watch and dkm watch — equal to
the brute-force oracle over the workload plus those subscription events.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from conftest import real_objects
from dkmsks.cli import main
from dkmsks.client import Client
from dkmsks.core.config import PartitionConfig
from dkmsks.core.model import Op, Vocabulary
from dkmsks.core.oracle import oracle_results
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.io.formats import read_events, read_objects
from dkmsks.io.writers import read_results, write_events, write_objects, write_results

pytestmark = [pytest.mark.spark, pytest.mark.realdata]

SPEC = WorkloadSpec(o_init=2000, subscriptions=200, timestamps=4, objects_per_ts=150, inserts_per_ts=10,
                    deletes_per_ts=10, k_max=5, seed=31)
T = SPEC.timestamps


def _rows(path):
    lines = path.read_text().splitlines()
    return lines[0], lines[1:]


def test_published_subscribed_and_watched_live_results_equal_the_oracle(spark, fresh_db, tmp_path, capsys):
    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.jobs.partition import run_partition
    from dkmsks.spark.ingest import ingest_files

    source, vocab = real_objects(SPEC.objects_needed)
    objects, events = generate_workload(source, SPEC)
    files = {"objects": tmp_path / "objects.tsv", "events": tmp_path / "events.tsv"}
    write_objects(files["objects"], objects, vocab)
    write_events(files["events"], events, vocab)
    wh = ["--warehouse", str(fresh_db.root), "--database", fresh_db.database]
    publish = ["publish", "--objects", str(files["objects"]), "--events", str(files["events"]), *wh]
    client = Client(fresh_db)

    # O_init and the initial subscriptions on Spark; the stream from here on without it.
    ingest_files(spark, fresh_db, objects=files["objects"], events=files["events"], run_id="live", upto=0)
    run_partition(spark, fresh_db, PartitionConfig(method="dkm", workers=3, gamma1=40, theta=4, grid=256),
                  run_id="live")
    seen: list = []
    watcher = threading.Thread(target=lambda: seen.extend(client.watch(from_t=0, until=T, poll=0.2)))
    watcher.start()

    # Our subscriptions sit where the stream's second timestamp publishes; one initial
    # subscription the workload never deletes is deleted by us.
    at = int(np.flatnonzero(objects.t == 2)[0])
    x, y, word = repr(float(objects.x[at])), repr(float(objects.y[at])), vocab.word(int(objects.keywords.row(at)[0]))
    deleted = set(events.ids[events.op == Op.DELETE].tolist())
    kept = next(int(s) for s in events.ids[events.t == 0] if int(s) not in deleted)
    mine = []  # our subscription events, as lines of an events file for the oracle

    assert main(publish) == 0  # t=1
    assert main(["subscribe", "--id", "900001", "--x", x, "--y", y, "--keywords", word, "--k", "3", *wh]) == 0
    mine.append(f"insert\t900001\t{x}\t{y}\t{word}\t3\t1")
    assert client.subscribe(900002, float(x), float(y), [word], 2, t=2) == 2
    mine.append(f"insert\t900002\t{x}\t{y}\t{word}\t2\t2")
    assert main(["unsubscribe", "--id", str(kept), "--t", "2", *wh]) == 0
    mine.append(f"delete\t{kept}\t\t\t\t\t2")
    assert main(publish) == 0  # t=2, although our events landed there first
    assert run_microbatch(spark, fresh_db, run_id="live-1").timestamps == [1, 2]

    # t=2 is processed, so closed; t=3 is published by the client, t=4 by dkm publish.
    capsys.readouterr()
    assert main(["subscribe", "--id", "900003", "--x", x, "--y", y, "--keywords", word, "--k", "4", "--t", "2",
                 *wh]) == 2
    assert capsys.readouterr().err == ("dkm subscribe: error: timestamp 2 is closed: the pipeline has taken every "
                                       "timestamp up to 2; publish at t > 2\n")
    assert main(["subscribe", "--id", "900003", "--x", x, "--y", y, "--keywords", word, "--k", "4", *wh]) == 0
    mine.append(f"insert\t900003\t{x}\t{y}\t{word}\t4\t3")
    assert client.unsubscribe(900001) == 3
    mine.append("delete\t900001\t\t\t\t\t3")
    header, event_rows = _rows(files["events"])
    at3 = [r.split("\t") for r in _rows(files["objects"])[1] if r.endswith("\t3")]
    ev3 = [r.split("\t") for r in event_rows if r.endswith("\t3")]
    report = client.publish([(int(i), float(a), float(b), kw, int(t)) for i, a, b, kw, t in at3],
                            [dict(zip(("op", "id", "x", "y", "keywords", "k", "t"), e, strict=True)) for e in ev3])
    assert (report.objects, report.events, report.refused) == (len(at3), len(ev3), [])
    assert main([*publish, "--after", "3"]) == 0  # t=3 came from another publisher
    assert run_microbatch(spark, fresh_db, run_id="live-2").timestamps == [3, 4]
    watcher.join(timeout=60)
    assert not watcher.is_alive()

    # The oracle over the workload plus our events.
    (tmp_path / "all-events.tsv").write_text("\n".join([header, *event_rows, *mine]) + "\n")
    v = Vocabulary()
    e_load = read_events(tmp_path / "all-events.tsv", v)
    assert e_load.rejections == []
    o_all = read_objects(files["objects"], v).objects
    oracle = {t: oracle_results(o_all, e_load.events, t) for t in range(T + 1)}
    assert {900001, 900002} <= set(oracle[2]) and 900001 not in oracle[3] and kept not in oracle[2]
    assert len(oracle[2][900001].object_ids) == 3

    for t in range(T + 1):
        write_results(tmp_path / f"oracle-{t}.jsonl", oracle[t], t)
        assert main(["export", "--as-of", str(t), "--out", str(tmp_path / f"export-{t}.jsonl"), *wh]) == 0
        assert read_results(tmp_path / f"export-{t}.jsonl") == read_results(tmp_path / f"oracle-{t}.jsonl"), t
    for sid in (900002, 900003, kept, min(oracle[T])):
        for t in (2, T):
            if sid in oracle[t]:
                r = client.results(sid, as_of=t)
                assert (r.object_ids, r.distances) == (oracle[t][sid].object_ids.tolist(),
                                                       oracle[t][sid].distances.tolist()), (sid, t)
            else:
                with pytest.raises(ValueError, match=f"subscription {sid} is not live at t={t}"):
                    client.results(sid, as_of=t)

    # The watched changes, applied to the results at T0, give the oracle at every timestamp.
    state = {s: (r.object_ids.tolist(), r.distances.tolist()) for s, r in oracle[0].items()}
    for t in range(1, T + 1):
        for c in (c for c in seen if c.t == t):
            if c.change == "delete":
                del state[c.sub_id]
            else:
                state[c.sub_id] = (list(c.object_ids), list(c.distances))
        assert state == {s: (r.object_ids.tolist(), r.distances.tolist()) for s, r in oracle[t].items()}, t
    capsys.readouterr()
    assert main(["watch", "--from", "0", "--until", str(T), "--json", *wh]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == [{"t": c.t, "sub_id": c.sub_id, "change": c.change, "object_ids": list(c.object_ids),
                        "distances": list(c.distances)} for c in seen]


def test_a_repeated_spark_ingestion_after_the_pipeline_took_its_timestamps_is_a_replay(spark, fresh_db, tmp_path):
    from dkmsks.spark.ingest import ingest_files
    from dkmsks.storage.lake import Lake
    from dkmsks.storage.landing import sealed_through, take_pending

    objects = tmp_path / "objects.tsv"
    objects.write_text("id\tx\ty\tkeywords\tt\n1\t0.5\t0.5\tcafe\t0\n2\t0.6\t0.6\tbar\t1\n")
    events = tmp_path / "events.tsv"
    events.write_text("op\tid\tx\ty\tkeywords\tk\tt\ninsert\t10\t0.5\t0.5\tcafe\t2\t0\ndelete\t10\t\t\t\t\t1\n")
    first = ingest_files(spark, fresh_db, objects=objects, events=events, run_id="first")
    take_pending(fresh_db, Lake.of(fresh_db), Vocabulary(), after=-1)
    assert sealed_through(fresh_db) == 1
    again = ingest_files(spark, fresh_db, objects=objects, events=events, run_id="again")
    assert [(r.accepted, r.rejected) for r in again] == [(r.accepted, 0) for r in first] == [(2, 0), (2, 0)]
    assert spark.table("quarantine").count() == 0
    # A new row for a taken timestamp is late.
    objects.write_text("id\tx\ty\tkeywords\tt\n3\t0.5\t0.5\tcafe\t1\n4\t0.5\t0.5\tcafe\t2\n")
    (late,) = ingest_files(spark, fresh_db, objects=objects, run_id="late")
    assert (late.accepted, late.rejected) == (1, 1)
    assert [r.reason for r in spark.table("quarantine").collect()] == [
        "t=1 is already processed (last processed timestamp 1): a late row is never applied"]
