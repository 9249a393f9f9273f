"""The freshness benchmark's own logic: the memory of several process trees summed in one
sampler (against processes started here), the report's start-up and memory rows with their
targets, and the section of the docs a run at another size goes to."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from dkmsks.bench.common import TreeMemory
from dkmsks.bench.freshness import report, section

pytestmark = pytest.mark.unit

MIB = 2**20

#: A child holding ``argv[1]`` MiB of written (resident) memory, with a grandchild holding
#: ``argv[2]`` MiB when that is not 0; it prints ``ready`` once both hold theirs.
HOLDER = """
import subprocess, sys, time
data = b"x" * (int(sys.argv[1]) * 2**20)
child = None
if int(sys.argv[2]):
    child = subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[2], "0", ""], stdout=subprocess.PIPE)
    child.stdout.readline()
print("ready", flush=True)
time.sleep(120)
"""


def hold(mib: int, grandchild_mib: int = 0) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(mib), str(grandchild_mib), HOLDER],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        import psutil

        with_children = [*psutil.Process(p.pid).children(recursive=True)] if p.poll() is None else []
        p.kill()
        p.wait()
        for c in with_children:
            c.kill()


def test_each_tree_is_summed_as_its_own_party(procs) -> None:
    a, b = hold(200), hold(20, grandchild_mib=150)
    procs += [a, b]
    parts = TreeMemory({"a": a.pid, "b": b.pid}).sample()
    assert set(parts) == {"a", "b"}
    assert 200 * MIB <= parts["a"] < 300 * MIB
    assert 170 * MIB <= parts["b"] < 300 * MIB  # the child and its grandchild


def test_a_root_inside_another_tree_is_counted_once_under_the_nearest_root(procs) -> None:
    a = hold(200)
    procs.append(a)
    whole = TreeMemory({"me": os.getpid()}).sample()["me"]  # this process and the child
    parts = TreeMemory({"me": os.getpid(), "child": a.pid}).sample()
    assert parts["child"] >= 200 * MIB
    assert parts["me"] <= whole - 180 * MIB
    assert abs(parts["me"] + parts["child"] - whole) < 50 * MIB


def test_the_peak_keeps_each_partys_share_and_a_party_added_later_counts(procs) -> None:
    a = hold(30)
    procs.append(a)
    mem = TreeMemory({"a": a.pid}, interval=0.05).start()
    time.sleep(0.3)
    b = hold(250)
    procs.append(b)
    mem.add("b", b.pid)
    time.sleep(0.3)
    b.kill()
    b.wait()
    time.sleep(0.3)
    peak = mem.stop()
    assert peak >= 280 * MIB
    assert mem.at_peak["b"] >= 250 * MIB and 30 * MIB <= mem.at_peak["a"] < 100 * MIB
    assert mem.sample()["b"] == 0  # exited: nothing, no error


def test_proportional_sampling_reads_pss_when_memory_grows_and_otherwise_seldom(procs) -> None:
    a = hold(30)
    procs.append(a)
    mem = TreeMemory({"a": a.pid}, interval=0.05, proportional=True, pss_every=60)
    pss_reads = []
    resident_only = mem.sample

    def counted(proportional=None):
        if proportional is not False:
            pss_reads.append(time.monotonic())
        return resident_only(proportional)

    mem.sample = counted
    mem.start()
    time.sleep(0.6)  # flat: ~12 resident samples
    flat = len(pss_reads)
    b = hold(250)
    procs.append(b)
    mem.add("b", b.pid)
    time.sleep(0.4)
    peak = mem.stop()
    assert 1 <= flat <= 3  # the first sample, and a resident high or two while a settles
    assert len(pss_reads) > flat  # b's arrival is a new resident high
    assert peak >= 280 * MIB and mem.at_peak["b"] >= 250 * MIB


#: A child holding ``argv[1]`` MiB of written memory that it then forks: parent and child share the pages.
FORKER = """
import os, sys, time
data = b"x" * (int(sys.argv[1]) * 2**20)
if os.fork() == 0:
    time.sleep(120)
    os._exit(0)
time.sleep(0.5)
print("ready", flush=True)
time.sleep(120)
"""


def test_proportional_sizes_count_pages_shared_by_forked_processes_once(procs) -> None:
    proc = subprocess.Popen([sys.executable, "-c", FORKER, "300"], stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    resident = TreeMemory({"forked": proc.pid}).sample()["forked"]
    proportional = TreeMemory({"forked": proc.pid}, proportional=True).sample()["forked"]
    assert resident >= 600 * MIB  # the 300 MiB in each of the two processes
    assert 300 * MIB <= proportional < 400 * MIB


def measurement(**steps) -> dict:
    per_t = [{"t": t, "call_s": 0.2, "fresh_commit_s": 0.5, "fresh_sql_s": 1.5} for t in range(1, 10)]
    reader = [{"ledger_s": 0.5, "results_s": 0.5} for _ in range(5)]
    return {"commit": "abcdef0123456789", "date": "2026-11-27 18:00 UTC", "machine": {"cpu": "test cpu"},
            "load_avg": [1.0, 2.0],
            "params": {"o_init": 1_000_000, "subscriptions": 10_000_000, "workers": 20, "interval": 2.0,
                       "burst": 100, "poll": 0.1},
            "steps": {"per_timestamp": per_t, "reader": reader,
                      "burst": {"objects": 100_000, "seconds": 10.0, "objects_per_s": 10_000.0}, **steps}}


def test_the_report_shows_start_up_and_peaks_against_their_targets() -> None:
    text = report(measurement(follow_startup_s=412.3, startup_peak_gib=9.04, peak_gib=12.34, memory_measure="pss",
                              peak_parts_gib={"publisher": 1.0, "follow": 10.0, "SQL reader": 1.34},
                              initial_phase_s=700.0, initial_peak_gib=17.5, initial_phase_commit="1234567abc"))
    assert "## Freshness of a live warehouse at |S| = 10M" in text
    assert "| follow start-up (s) | 412 | ≤ 300 | not met |" in text
    assert "| peak memory, all parties (GiB, PSS) | 12.3 | ≤ 16 | met |" in text
    assert "publisher 1.0, follow 10.0, SQL reader 1.3" in text
    assert "| peak by the end of start-up (GiB) | 9.0 |" in text
    assert "(s; at `1234567`) | 700 |" in text
    assert "| peak memory of the initial phase (GiB, PSS) | 17.5 | ≤ 16 | not met |" in text
    assert "proportional set size" in text and "overstates" not in text


def test_a_run_that_summed_resident_sizes_says_so() -> None:
    text = report(measurement(follow_startup_s=83.0, startup_peak_rss_gib=25.6, peak_rss_gib=25.6,
                              peak_rss_parts_gib={"publisher": 2.3, "follow": 23.3},
                              initial_phase_s=1371.0, initial_peak_rss_gib=13.3))
    assert "| peak memory, all parties (GiB, RSS) | 25.6 | ≤ 16 | not met |" in text
    assert "| peak memory of the initial phase (GiB, RSS) | 13.3 | ≤ 16 | met |" in text
    assert "overstates" in text


def test_a_measurement_without_them_renders_as_before() -> None:
    d = measurement()
    d["params"]["subscriptions"] = 1_000_000
    text = report(d)
    assert "## Freshness of a live warehouse\n" in text
    assert "start-up" not in text and "resident memory" not in text


def test_a_run_at_another_size_goes_to_a_section_of_its_own() -> None:
    assert section({"subscriptions": 1_000_000}) == "freshness"
    assert section({"subscriptions": 10_000_000}) == "freshness-10m"
    assert section({"subscriptions": 20_000}) == "freshness-20k"
    assert section({"subscriptions": 10_000_000, "section": "mine"}) == "mine"


@pytest.mark.parametrize(("last", "refused"), [(None, False), (0, False), (160, True)])
def test_keep_refuses_a_warehouse_that_processed_the_stream(monkeypatch, tmp_path, last, refused) -> None:
    """--keep reuses a warehouse only at the end of its initial phase: one that processed the
    stream would see every publish as a replay, visible at once (a freshness of 0 s and a
    negative catch-up were reported before this check)."""
    from dkmsks.bench import freshness
    from dkmsks.storage import journal, lake
    from dkmsks.warehouse import Warehouse

    monkeypatch.setattr(lake.Lake, "of", staticmethod(lambda warehouse: warehouse))
    monkeypatch.setattr(journal, "last_processed", lambda _lake: last)
    why = freshness.stream_already_processed(Warehouse(tmp_path))
    assert (why is not None) == refused
    if refused:
        assert "t=160" in why and "initial phase" in why
