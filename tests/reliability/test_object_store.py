"""A warehouse on S3-compatible object storage (the Versity S3 Gateway the session starts):
the Spark-free paths (client, publishers, readers) give what they give on a local folder; the
writer lock is a lease that a ``kill -9`` frees within its lease; a holder stopped past its
lease cannot commit over its successor (the fence at the commit); a store that cannot be used
is one line and exit status 2, with nothing written.

docs/design.md §8, "Writers on object storage"; the Spark and follow paths on the store:
tests/reliability/test_s3_pipeline.py; kill -9 at every commit point on the store:
tests/reliability/test_crash_points.py and test_crash.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import OBJECTSTORE_VARIABLES
from dkmsks.client import Client
from dkmsks.core.model import Vocabulary
from dkmsks.storage import tables
from dkmsks.storage.journal import commit
from dkmsks.storage.lake import Lake
from dkmsks.storage.landing import take_pending
from dkmsks.storage.objectstore import ObjectStore
from dkmsks.warehouse import Warehouse
from lake_tables import create_tables, partitioned_warehouse

from . import rel_harness as h

pytestmark = pytest.mark.reliability

O_INIT = [(1, 0.0, 0.0, ["cafe"], 0), (2, 3.0, 4.0, ["cafe"], 0), (3, 1.0, 0.0, ["bar", "cafe"], 0)]
LIVE = [(100, 0.0, 0.0, ["cafe"], 2), (101, 1.0, 1.0, ["bar"], 1)]
#: Seconds of a writer lease in these tests (DKMSKS_LEASE_SECONDS of the processes they start).
LEASE = 2.0


def client_session(warehouse: Warehouse) -> dict:
    """One publisher's afternoon through the client — subscriptions, objects, refusals, the
    pipeline taking timestamps, a run's commit — and everything a reader then sees."""
    client = Client(warehouse)
    seen: dict = {"open": [client.next_open_timestamp()]}
    seen["subscribe"] = [client.subscribe(102, 0.5, 0.5, ["cafe", "bar"], 3), client.unsubscribe(101)]
    report = client.publish(objects=[(10, 0.1, 0.0, ["cafe"], 1), (11, 2.0, 2.0, ["bar"], 1),
                                     (12, float("nan"), 0.0, ["cafe"], 1)])
    seen["publish"] = (report.objects, report.events, report.quarantined, [r.reason for _, r in report.refused])
    try:
        client.unsubscribe(999)
    except ValueError as err:
        seen["refused"] = str(err)
    taken = take_pending(warehouse, Lake.of(warehouse), Vocabulary(), after=0)
    seen["taken"] = taken.timestamps
    seen["open"].append(client.next_open_timestamp())
    lake = Lake.of(warehouse)
    seen["landed"] = sorted(map(str, lake.read(tables.EVENTS, columns=["op", "id", "t", "k"]).to_pylist()))
    seen["objects"] = sorted(map(str, lake.read(tables.OBJECTS, columns=["id", "t"]).to_pylist()))
    seen["quarantine"] = sorted(r["reason"] for r in lake.read(tables.QUARANTINE, columns=["reason"]).to_pylist())
    return seen


def test_the_client_on_object_storage_sees_what_it_sees_on_a_folder(tmp_path, s3_warehouse):
    local = partitioned_warehouse(tmp_path / "wh", objects=O_INIT, subscriptions=LIVE)
    remote = partitioned_warehouse(s3_warehouse, objects=O_INIT, subscriptions=LIVE)
    assert not remote.is_local
    on_folder, on_store = client_session(local), client_session(remote)
    assert on_store == on_folder
    assert on_store["taken"] == [1] and on_store["open"] == [1, 2] and "not live" in on_store["refused"]
    # The seal and the locks are objects of the store; nothing of the warehouse went to a local folder.
    store = ObjectStore.of(remote.location)
    assert store.get(remote.lock_key("sealed"))[0].strip() == b"1"
    assert json.loads(store.get(remote.lock_key("landing.lock"))[0])["state"] == "free"
    assert not (remote.root / "tables").exists() and not (remote.root / "locks").exists()


def test_the_dags_checks_read_the_store_and_name_the_warehouse_by_its_uri(s3_warehouse):
    """The DAGs' Spark-free checks (dkmsks.storage.progress) on object storage: they read the
    Delta logs on the store, and their messages name the warehouse's URI (they named its local
    home, a folder of this host that holds no table)."""
    from dkmsks.storage.progress import microbatch_skip_reason, partition_skip_reason, repartition_skip_reason

    empty = Warehouse(s3_warehouse + "/empty")
    for reason in (microbatch_skip_reason(empty, scheduled=True), repartition_skip_reason(empty, scheduled=True)):
        assert reason is not None and f"no partition plan yet in {empty.uri}:" in reason, reason
    warehouse = partitioned_warehouse(s3_warehouse, objects=O_INIT, subscriptions=LIVE)
    reason = partition_skip_reason(warehouse)
    assert reason is not None and reason.startswith(f"the initial partitioning of {s3_warehouse} is done"), reason
    assert str(warehouse.root) not in reason
    assert microbatch_skip_reason(warehouse, scheduled=True).startswith("no timestamp landed after")


# --------------------------------------------------------------------------- the writer lease

HOLDER = """
import json, sys, time
from dkmsks.storage.journal import commit
from dkmsks.storage.lake import Lake
from dkmsks.storage.writer_lock import writer_lock
from dkmsks.warehouse import Warehouse
import pyarrow as pa

warehouse = Warehouse(sys.argv[1])
with writer_lock(warehouse, "holder", timeout=60) as lease:
    print(json.dumps({"epoch": lease.epoch}), flush=True)
    line = sys.stdin.readline()  # the test says when to commit (or closes stdin)
    if line.strip() == "commit":
        try:
            rows = pa.table({"record": ["ledger"], "t": [7], "plan_version": [0], "run_id": ["stale"]})
            done = commit(Lake.of(warehouse), rows, 7)
            print(json.dumps({"committed": done}), flush=True)
        except Exception as err:
            print(json.dumps({"refused": type(err).__name__, "why": str(err)}), flush=True)
"""


def start_holder(uri: str) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "DKMSKS_LEASE_SECONDS": str(LEASE)}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, uri], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return proc, json.loads(line)["epoch"]


def take_writer_lock(warehouse: Warehouse, monkeypatch) -> tuple[object, float]:
    """This process takes the writer lock (waiting as long as it must); the context and the
    seconds it waited."""
    from dkmsks.storage import leases
    from dkmsks.storage.writer_lock import writer_lock

    monkeypatch.setattr(leases, "LEASE_SECONDS", LEASE)
    started = time.monotonic()
    lock = writer_lock(warehouse, "successor", timeout=60)
    lease = lock.__enter__()
    return (lock, lease), time.monotonic() - started


def test_a_holder_killed_with_kill_9_frees_the_writer_lock_within_its_lease(s3_warehouse, monkeypatch):
    warehouse = Warehouse(s3_warehouse)
    create_tables(warehouse)
    holder, epoch = start_holder(s3_warehouse)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    killed = time.monotonic()
    (lock, lease), _ = take_writer_lock(warehouse, monkeypatch)
    waited = time.monotonic() - killed
    try:
        assert lease.epoch == epoch + 1
        # Within one lease of the last renewal (at most a lease before the kill), plus polling.
        assert waited <= LEASE + 1.0, f"the lock came free {waited:.1f} s after the kill"
        # Taking it committed the new epoch to the journal as its fence.
        assert Lake.of(warehouse).table(tables.JOURNAL).transaction_version("dkmsks-writer-fence") == lease.epoch
    finally:
        lock.__exit__(None, None, None)


def test_a_waiter_that_gives_up_names_the_lease_object_and_its_holder(s3_warehouse):
    """WriterBusy names the lock's object once (its URI had the warehouse's prefix twice:
    ``s3://dkmsks/p/p/locks/default.lock``) and who holds it."""
    from dkmsks.storage.writer_lock import WriterBusy, writer_lock

    warehouse = Warehouse(s3_warehouse)
    create_tables(warehouse)
    holder, _ = start_holder(s3_warehouse)
    try:
        with pytest.raises(WriterBusy) as busy, writer_lock(warehouse, "waiter", timeout=0.5):
            pass
    finally:
        holder.kill()
        holder.wait()
    message = str(busy.value)
    assert f"another job holds {s3_warehouse}/locks/default.lock (holder: holder on " in message, message
    assert f"pid {holder.pid}" in message and "\n" not in message, message


def test_a_holder_stopped_past_its_lease_cannot_commit_over_its_successor(s3_warehouse, monkeypatch):
    warehouse = Warehouse(s3_warehouse)
    lake = create_tables(warehouse)
    holder, epoch = start_holder(s3_warehouse)
    try:
        holder.send_signal(signal.SIGSTOP)
        (lock, lease), waited = take_writer_lock(warehouse, monkeypatch)  # waits out the stopped holder's lease
        assert lease.epoch == epoch + 1 and waited >= LEASE * 0.9
        assert commit(lake, pa.table({"record": ["ledger"], "t": [5], "plan_version": [0], "run_id": ["successor"]}), 5)
        holder.send_signal(signal.SIGCONT)
        holder.stdin.write("commit\n")
        holder.stdin.flush()
        answer = json.loads(holder.stdout.readline())
        lock.__exit__(None, None, None)
    finally:
        holder.kill()
        holder.wait()
    assert answer.get("refused") in ("Fenced", "LeaseLost"), answer
    rows = lake.read(tables.JOURNAL, columns=["run_id", "t"]).to_pylist()
    assert rows == [{"run_id": "successor", "t": 5}]


def test_a_commit_that_lost_the_race_to_a_newer_fence_is_refused(s3_warehouse):
    """The other path of the fence: the stale holder's snapshot predates the successor's fence
    commit, so only the store's refusal of the concurrent transaction id stops it."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    from dkmsks.storage.lake import storage_options
    from dkmsks.storage.leases import FENCE_APP, Fence, Fenced, set_fence

    warehouse = Warehouse(s3_warehouse)
    lake = create_tables(warehouse)
    uri = lake.uris[tables.JOURNAL]
    lake.append(tables.JOURNAL, pa.table({}), app_id=FENCE_APP, version=1)
    empty = _empty_journal(lake)
    stale = DeltaTable(uri, storage_options=storage_options(uri))  # the stale holder's snapshot: fence 1
    successor = DeltaTable(uri, storage_options=storage_options(uri))
    write_deltalake(successor, empty, mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction(FENCE_APP, 2)]))
    set_fence(Fence(uri, 1), uri)
    try:
        fence = Transaction(FENCE_APP, 1)
        with pytest.raises(Fenced, match="committed first"), lake._fenced(tables.JOURNAL, fence):
            write_deltalake(stale, empty, mode="append",
                            commit_properties=CommitProperties(app_transactions=[fence]))
        # And with a fresh snapshot the newer fence is seen before anything is written.
        with pytest.raises(Fenced, match="taken over"):
            commit(lake, pa.table({"record": ["ledger"], "t": [3], "plan_version": [0], "run_id": ["stale"]}), 3)
    finally:
        set_fence(None, uri)
    assert lake.read(tables.JOURNAL).num_rows == 0


def _empty_journal(lake: Lake) -> pa.Table:
    from dkmsks.storage.lake import conform

    return conform(pa.table({}), pa.schema(lake.table(tables.JOURNAL).schema().to_arrow()))


# --------------------------------------------------------------------------- a store that cannot be used

def dkm(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dkmsks.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.parametrize("problem", ["wrong secret", "no such bucket", "unreachable endpoint"])
def test_a_store_that_cannot_be_used_is_one_line_and_exit_2_with_nothing_written(problem, objectstore, s3_warehouse,
                                                                                tmp_path):
    warehouse = Warehouse(s3_warehouse)
    env = {**os.environ, **{key: objectstore[key] for key in OBJECTSTORE_VARIABLES}}
    uri = s3_warehouse
    if problem == "wrong secret":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    elif problem == "no such bucket":
        uri = "s3://no-such-bucket-here/warehouse"
    else:
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"
    events = tmp_path / "events.tsv"
    events.write_text("op\tid\tx\ty\tkeywords\tk\tt\ninsert\t1\t0\t0\tcafe\t1\t1\n")
    reason = {"wrong secret": "refused the credentials", "no such bucket": "bucket no-such-bucket-here does not exist",
              "unreachable endpoint": "cannot reach the object store"}[problem]
    for args in (["subscribe", "--id", "5", "--x", "0", "--y", "0", "--keywords", "cafe", "--k", "1"],
                 ["publish", "--events", str(events)], ["status"], ["export", "--out", str(tmp_path / "r.jsonl")],
                 ["run", "--objects", str(events), "--events", str(events)]):
        done = dkm(*args, "--warehouse", uri, env=env)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (args, done.stderr)
        assert len(lines) == 1 and reason in lines[0] and uri in lines[0], (args, done.stderr)
        assert objectstore["AWS_SECRET_ACCESS_KEY"] not in done.stderr + done.stdout
        assert "not-the-secret" not in done.stderr + done.stdout
    # Nothing was written, under the test's prefix or anywhere a wrong bucket could have sent it.
    assert not ObjectStore.of(warehouse.location).has_prefix(warehouse.location.key() + "/")
    assert not Path(warehouse.root, "run").exists()


def test_a_lease_given_back_keeps_its_epoch_and_only_a_takeover_fences_the_journal(s3_warehouse, monkeypatch):
    """A clean hand-over (a given-back lease taken by anyone) keeps the epoch and commits
    nothing, so scheduled jobs that take the lock and find nothing to do leave the journal
    alone; a takeover after a kill raises the epoch and commits a fence, which a reader tells
    from a round's commit (Lake.only_fences_since: what follow mode checks before restarting)."""
    from dkmsks.storage.writer_lock import writer_lock

    warehouse = Warehouse(s3_warehouse)
    lake = create_tables(warehouse)
    with writer_lock(warehouse, "round 1") as lease:
        first = lease.epoch
    version = lake.version(tables.JOURNAL)
    holder, epoch = start_holder(s3_warehouse)  # another process, given back cleanly
    holder.stdin.close()
    holder.wait()
    with writer_lock(warehouse, "round 2") as lease:
        assert epoch == first and lease.epoch == first
    assert lake.version(tables.JOURNAL) == version
    holder, epoch = start_holder(s3_warehouse)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    (lock, lease), _ = take_writer_lock(warehouse, monkeypatch)
    lock.__exit__(None, None, None)
    assert lease.epoch == first + 1
    assert lake.table(tables.JOURNAL).transaction_version("dkmsks-writer-fence") == first + 1
    assert lake.version(tables.JOURNAL) == version + 1 and lake.only_fences_since(tables.JOURNAL, version)
    commit(lake, pa.table({"record": ["ledger"], "t": [5], "plan_version": [0], "run_id": ["r"]}), 5)
    assert not lake.only_fences_since(tables.JOURNAL, version)


def test_a_lease_this_process_failed_to_give_back_is_taken_back_at_once(s3_warehouse):
    """A give-back the store did not answer leaves the lock object saying 'held by this
    process': the process's next take is immediate and keeps the epoch, not a takeover a lease
    later (seen in compose under load: follow waited out its own lease and fenced the journal)."""
    from dkmsks.storage.leases import Lease

    warehouse = Warehouse(s3_warehouse)
    store, key = ObjectStore.of(warehouse.location), warehouse.lock_key("lock")
    first = Lease(store, key, "a round", lease_seconds=30)
    epoch = first.acquire(timeout=10)
    first._stop.set()  # the keeper stops and the give-back never reaches the store
    assert json.loads(store.get(key)[0])["state"] == "held"
    started = time.monotonic()
    again = Lease(store, key, "the next round", lease_seconds=30)
    assert again.acquire(timeout=10) == epoch
    assert time.monotonic() - started < 5
    again.release()
    assert json.loads(store.get(key)[0])["state"] == "free"


def test_the_follow_service_keeps_its_files_in_the_local_home(s3_warehouse, tmp_path):
    """scripts/follow.sh on a warehouse on object storage: its PID, log and status files in this
    host's local home, and dkm follow given the URI (it made a local folder named ``s3:`` and
    followed that, an empty warehouse, waiting for a plan for ever)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "follow.sh"
    home = Warehouse(s3_warehouse).run_dir
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}

    def follow(action: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(script), action, "--warehouse", s3_warehouse, "--slots", "3", "--nice", "0"],
                              capture_output=True, text=True, env=env, timeout=300)

    started = follow("start")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        pid = int((home / "follow-default.pid").read_text())
        assert f"--warehouse {s3_warehouse} " in Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
        deadline = time.monotonic() + 180
        status = home / "follow-default.status.json"
        while not (status.exists() and json.loads(status.read_text())["state"] == "waiting for a plan"):
            assert time.monotonic() < deadline and follow("status").returncode == 0, follow("status").stdout
            time.sleep(0.5)
    finally:
        stopped = follow("stop")
    assert stopped.returncode == 0 and json.loads(status.read_text())["state"] == "stopped", stopped.stdout
    assert not (script.parents[1] / "s3:").exists()


def test_a_copy_of_the_stores_backing_folder_is_served_as_it_was(objectstore, s3_warehouse):
    """The crash tests snapshot and restore a warehouse on the store by copying the gateway's
    backing folder of its prefix (tests/reliability/rel_harness.py): copied with their extended
    attributes, the objects come back with their ETags (a lease's If-Match still holds), and the
    Delta tables read as before."""
    warehouse = partitioned_warehouse(s3_warehouse, objects=O_INIT, subscriptions=LIVE)
    store = ObjectStore.of(warehouse.location)
    lock = warehouse.lock_key("lock")
    assert store.create(lock, b'{"epoch": 1}') is not None
    root = Path(objectstore["DKMSKS_OBJECTSTORE_DIR"])
    place = h.Place.on_store(s3_warehouse, root, warehouse.root, {})
    copy = h.Place.on_store(s3_warehouse + "-copy", root, warehouse.root.with_name("copy"), {})
    h.snapshot(place, place.folder.with_name("snapshot"))
    h.restore(place.folder.with_name("snapshot"), copy)
    copied = Warehouse(copy.arg)
    body, etag = store.get(lock)
    assert store.get(copied.lock_key("lock")) == (body, etag)
    assert store.replace(copied.lock_key("lock"), b'{"epoch": 2}', etag) is not None
    assert Lake.of(copied).read(tables.OBJECTS).sort_by("id").to_pylist() == \
        Lake.of(warehouse).read(tables.OBJECTS).sort_by("id").to_pylist()
