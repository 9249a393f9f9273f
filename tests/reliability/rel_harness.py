"""Black-box harness of the reliability tests: real entry points in subprocesses.

Nothing here imports the job code under test. Jobs run as ``python spark_apps/<app>.py`` (or
``dkm ...``) in a process group of their own, so ``kill -9`` of the group kills the driver as
a crash would: the Python driver, its JVM and the Python workers at once. What a job did is
read from the outside: the Delta commit files (``tables/*/_delta_log/*.json``), the writer
lock file (``locks/default.lock``, rewritten with its holder when a run takes it), the job's
Python worker processes and its output lines, each stamped with the time the monitor first
saw it.

A prepared warehouse is *snapshotted* (its folder copied) and *restored* for the next trial
(:func:`snapshot`, :func:`restore`); the Delta logs hold relative paths and sessions register
the tables by path, so a copy works wherever it is put.

A warehouse on object storage (:class:`Place`) is watched the same way, in the object store's
backing folder: the test's Versity S3 Gateway keeps each object of ``s3://<bucket>/<key>`` as
the plain file ``<store>/data/<bucket>/<key>`` (its ETag in an extended attribute), so the
commit files, the writer lease's object and a snapshot (copied with its extended attributes,
which the gateway then serves as they were) are there to read and copy, black box as before.

Also runnable as a script (one JVM for several entry points)::

    python rel_harness.py entry-points '[["spark_apps/ingest.py", [...]], ["dkm", [...]]]'
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
HERE = Path(__file__).resolve().parent


def job_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYSPARK_PYTHON=PYTHON, PYSPARK_DRIVER_PYTHON=PYTHON, SPARK_LOCAL_IP="127.0.0.1",
               PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def app_cmd(app: str, *args: str) -> list[str]:
    """``python spark_apps/<app>`` as a list (the spark-submit-free way to run an entry point)."""
    return [PYTHON, str(REPO / "spark_apps" / app), *args]


def dkm_cmd(*args: str) -> list[str]:
    return [str(Path(PYTHON).with_name("dkm")), *args]


# --------------------------------------------------------------------------- where a warehouse is


@dataclass(frozen=True)
class Place:
    """A test's warehouse as its jobs and the harness see it: ``arg``, what ``--warehouse`` is
    given (a folder, or ``s3://bucket/prefix``; also its ``str``); ``folder``, the local folder
    whose ``tables/`` and ``locks/`` show the warehouse's tables and locks (the warehouse
    itself, or the object store's backing folder of its prefix); ``home``, this host's process
    files (``DKMSKS_LOCAL_DIR`` of a warehouse on object storage); ``env``, what every job on it
    needs in its environment (the store's endpoint and credentials, the local home)."""

    arg: str
    folder: Path
    home: Path
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def local(cls, folder: Path) -> Place:
        return cls(str(folder), Path(folder), Path(folder))

    @classmethod
    def on_store(cls, uri: str, store_dir: Path, home: Path, settings: dict[str, str]) -> Place:
        """``uri`` (``s3://bucket/prefix``) on the test's object store, whose data folder is
        ``store_dir/data``; ``settings`` the store's ``AWS_*`` variables."""
        bucket, _, prefix = uri.partition("://")[2].partition("/")
        return cls(uri, Path(store_dir) / "data" / bucket / prefix, Path(home),
                   {**settings, "DKMSKS_LOCAL_DIR": str(home)})

    @property
    def on_object_store(self) -> bool:
        return "://" in self.arg

    def __str__(self) -> str:
        return self.arg


def folder_of(warehouse: Path | Place) -> Path:
    """Where ``warehouse``'s tables and locks can be looked at (:class:`Place`)."""
    return warehouse.folder if isinstance(warehouse, Place) else Path(warehouse)


# --------------------------------------------------------------------------- Delta log

#: The writer lease's fence (dkmsks.storage.leases.FENCE_APP): on object storage, taking the
#: writer lock commits its epoch to the journal, a commit that adds nothing.
FENCE_APP = "dkmsks-writer-fence"


def is_fence_commit(path: Path) -> bool:
    """Whether a journal commit file holds only the writer lease's fence (no data, no other
    transaction): the commit made when a job takes the writer lock on object storage."""
    actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    apps = [a["txn"]["appId"] for a in actions if "txn" in a]
    return apps == [FENCE_APP] and not any("add" in a or "remove" in a for a in actions)


def delta_commits(warehouse: Path | Place) -> dict[tuple[str, int], float]:
    """``(table, version) -> mtime`` of every Delta commit file under ``warehouse/tables``."""
    found: dict[tuple[str, int], float] = {}
    root = folder_of(warehouse) / "tables"
    if not root.is_dir():
        return found
    for table in os.scandir(root):
        log = Path(table.path) / "_delta_log"
        if not log.is_dir():
            continue
        for f in os.scandir(log):
            name = f.name
            if name.endswith(".json") and name[:-5].isdigit():
                with contextlib.suppress(FileNotFoundError):
                    found[(table.name, int(name[:-5]))] = f.stat().st_mtime
    return found


def table_versions(warehouse: Path | Place) -> dict[str, int]:
    out: dict[str, int] = {}
    for (table, version) in delta_commits(warehouse):
        out[table] = max(out.get(table, -1), version)
    return out


def leftover_files(warehouse: Path | Place) -> list[str]:
    """Files a crashed writer may leave behind (Delta temp commits, lock files), relative paths."""
    out = []
    warehouse = folder_of(warehouse)
    for p in warehouse.rglob("*"):
        name = p.name
        if (p.is_file() and "_delta_log" in p.parts and (name.endswith(".tmp") or name.startswith("."))
                and not name.endswith(".crc")):
            out.append(str(p.relative_to(warehouse)))
    return sorted(out)


def commit_info(warehouse: Path | Place, table: str, version: int) -> dict:
    """The ``commitInfo`` action of one Delta commit (operation, metrics, user metadata)."""
    path = folder_of(warehouse) / "tables" / table / "_delta_log" / f"{version:020d}.json"
    for line in path.read_text().splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            return action["commitInfo"]
    return {}


def rows_written(warehouse: Path | Place, table: str, version: int) -> int:
    """Rows a commit added (inserted or updated), from its operation metrics."""
    metrics = commit_info(warehouse, table, version).get("operationMetrics", {})
    keys = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted", "numOutputRows")
    return sum(int(metrics.get(k, 0)) for k in keys)


def snapshot(warehouse: Path | Place, snap: Path) -> None:
    """Copy the warehouse's folder (on object storage: its backing folder, each file with its
    extended attributes, where the gateway keeps the ETag) to ``snap``."""
    if snap.exists():
        shutil.rmtree(snap)
    shutil.copytree(folder_of(warehouse), snap, symlinks=True, copy_function=shutil.copy2)


def restore(snap: Path, warehouse: Path | Place) -> None:
    """Put ``snap`` back where the warehouse is; a warehouse on object storage starts with an
    empty local home, as on a host that never ran a job on it (what a job keeps there, the
    ``O_init`` statistics, it rebuilds from the tables)."""
    folder = folder_of(warehouse)
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(snap, folder, symlinks=True, copy_function=shutil.copy2)
    if isinstance(warehouse, Place) and warehouse.home != folder:
        shutil.rmtree(warehouse.home, ignore_errors=True)


# --------------------------------------------------------------------------- monitored runs


def _group_members(pgid: int) -> list[tuple[int, str]]:
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) != pgid:
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            members.append((int(entry.name), cmd))
        except (OSError, ValueError):
            continue
    return members


@dataclass
class Event:
    at: float  # seconds since the process started
    # "writer-lock", "python-workers", "commit", "fence" (the writer lease's epoch committed to
    # the journal when a job takes the lock on object storage: not one of the job's own commits),
    # "out", "exit", "killed"
    kind: str
    detail: str = ""


@dataclass
class RunRecord:
    cmd: list[str]
    started: float
    returncode: int | None = None
    killed_at: float | None = None  # seconds after start
    duration: float = 0.0
    events: list[Event] = field(default_factory=list)
    output: str = ""

    def commits(self) -> list[Event]:
        return [e for e in self.events if e.kind == "commit"]

    def first(self, kind: str) -> Event | None:
        return next((e for e in self.events if e.kind == kind), None)

    def tail(self, n: int = 3000) -> str:
        return self.output[-n:]


class Monitored:
    """A job in its own process group, watched every ``poll`` seconds until it ends."""

    def __init__(self, cmd: list[str], warehouse: Path | Place | None, *, env: dict[str, str] | None = None,
                 poll: float = 0.05, log: Path | None = None) -> None:
        self.warehouse = folder_of(warehouse) if warehouse is not None else None
        self.before = delta_commits(self.warehouse) if self.warehouse else {}
        # The writer lock's file is rewritten (holder, pid, time) when a run takes it: after the
        # session started and the tables were registered, before the run reads anything. (The
        # sessions' catalog is in memory: there is no Derby metastore lock to watch.) On object
        # storage it is the lease's object, rewritten when taken (and renewed, and given back).
        lock = self.warehouse / "locks" / "default.lock" if self.warehouse else None
        self.lock_before = lock.stat().st_mtime if lock and lock.exists() else 0.0
        self.lock = lock
        self.log = log
        self._out_lines: list[str] = []
        t0 = time.time()
        env = {**(env or job_env()), **(warehouse.env if isinstance(warehouse, Place) else {})}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=env, cwd=REPO, start_new_session=True, bufsize=1)
        self.record = RunRecord(cmd, t0)
        self._seen_commits: set[tuple[str, int]] = set()
        self._workers_seen = False
        self._lock_seen = False
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._watcher = threading.Thread(target=self._watch, args=(poll,), daemon=True)
        self._watcher.start()

    def _now(self) -> float:
        return time.time() - self.record.started

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._out_lines.append(line)
            text = line.rstrip()
            if text and " WARN " not in text and not text.startswith(("Using Spark's", "To adjust")):
                self.record.events.append(Event(self._now(), "out", text[:300]))

    def _watch(self, poll: float) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(poll)

    def _sample(self) -> None:
        now = self._now()
        if self.warehouse is not None:
            for key, mtime in delta_commits(self.warehouse).items():
                if key not in self.before and key not in self._seen_commits:
                    kind = "commit"
                    if key[0] == "journal":
                        try:
                            fence = is_fence_commit(self.warehouse / "tables" / "journal" / "_delta_log"
                                                    / f"{key[1]:020d}.json")
                        except (OSError, ValueError):
                            continue  # not readable yet: the next sample
                        kind = "fence" if fence else kind
                    self._seen_commits.add(key)
                    self.record.events.append(Event(max(0.0, mtime - self.record.started), kind,
                                                    f"{key[0]}@{key[1]}"))
            if not self._lock_seen and self.lock is not None and self.lock.exists():
                try:
                    if self.lock.stat().st_mtime > max(self.lock_before, self.record.started):
                        self._lock_seen = True
                        self.record.events.append(Event(now, "writer-lock"))
                except FileNotFoundError:
                    pass
        if not self._workers_seen and self.proc.poll() is None and any(
                "pyspark.daemon" in cmd or "pyspark/daemon" in cmd or "pyspark.worker" in cmd
                for _, cmd in _group_members(self.proc.pid)):
            self._workers_seen = True
            self.record.events.append(Event(now, "python-workers"))

    def kill(self) -> None:
        """``kill -9`` the whole process group (driver, its JVM, its Python workers)."""
        at = self._now()
        alive = self.proc.poll() is None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if alive:
            self.record.killed_at = at
            self.record.events.append(Event(at, "killed"))

    def wait(self, timeout: float) -> RunRecord:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(timeout=60)
            raise AssertionError(f"{' '.join(self.record.cmd[:3])} did not end within {timeout:.0f} s:\n"
                                 + "".join(self._out_lines)[-3000:]) from None
        finally:
            # Any survivor of the group (a JVM that outlived its driver) is killed too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._stop.set()
        self._watcher.join(timeout=5)
        self._sample()  # commits that landed in the last instant (or after the kill signal)
        self._reader.join(timeout=10)
        rec = self.record
        rec.returncode = self.proc.returncode
        rec.duration = self._now()
        rec.output = "".join(self._out_lines)
        if rec.returncode != -signal.SIGKILL:
            rec.killed_at = None  # it ended on its own before the signal
        if rec.killed_at is None:
            rec.events.append(Event(rec.duration, "exit", str(rec.returncode)))
        rec.events.sort(key=lambda e: e.at)
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            self.log.write_text(rec.output)
        return rec


def run(cmd: list[str], warehouse: Path | Place | None = None, *, timeout: float = 900, check: bool = True,
        env: dict[str, str] | None = None, log: Path | None = None) -> RunRecord:
    rec = Monitored(cmd, warehouse, env=env, log=log).wait(timeout)
    if check and rec.returncode != 0:
        # The whole output (the JVM's stderr included) is kept: the message shows only its tail.
        kept = Path(tempfile.mkstemp(prefix="failed-run-", suffix=".log")[1])
        kept.write_text(rec.output, encoding="utf-8")
        raise AssertionError(f"{' '.join(cmd[:4])} exited {rec.returncode} (whole output: {kept}):\n{rec.tail()}"
                             + error_lines(rec.output))
    return rec


#: Objects per timestamp of the workloads :func:`partitioned_at_t0` generates.
OBJECTS_PER_T = 100


def partitioned_at_t0(source: Path, root: Path, *, o_init: int, subscriptions: int, timestamps: int, workers: int,
                      seed: int) -> tuple[Path, Path, Path]:
    """A workload generated under ``root`` (:data:`OBJECTS_PER_T` objects, 10 insertions and 10 deletions per
    timestamp, k <= 5) and a warehouse holding only its ``O_init``, partitioned: t = 0 is
    processed, the stream is for the test to publish. Returns (objects, events, warehouse)."""
    workload = root / "workload"
    run(dkm_cmd("generate", "--source", str(source), "--out", str(workload), "--o-init", str(o_init),
                "--subscriptions", str(subscriptions), "--timestamps", str(timestamps),
                "--objects-per-ts", str(OBJECTS_PER_T), "--inserts-per-ts", "10", "--deletes-per-ts", "10",
                "--k-max", "5", "--seed", str(seed)))
    objects, events = workload / "objects.tsv.gz", workload / "events.tsv.gz"
    warehouse = root / "warehouse"
    run(dkm_cmd("run", "--objects", str(objects), "--events", str(events), "--warehouse", str(warehouse),
                "--workers", str(workers), "--gamma1", "40", "--grid", "256", "--until", "0"),
        warehouse, timeout=900)
    return objects, events, warehouse


_ERROR_LINE = re.compile(r"(Error|Exception|FATAL|ERROR)\b")


def error_lines(output: str, limit: int = 25) -> str:
    """The first lines of ``output`` that name an error (a JVM's OutOfMemoryError or a
    Spark ERROR log line scrolls out of the tail that the assertion shows)."""
    found = [line for line in output.splitlines() if _ERROR_LINE.search(line)][:limit]
    return ("\nerror lines of the whole output:\n" + "\n".join(found)) if found else ""


def run_and_kill(cmd: list[str], warehouse: Path | Place, delay: float, *, after_commits: int | None = None,
                 after_lock: bool = False, timeout: float = 900, env: dict[str, str] | None = None) -> RunRecord:
    """Start ``cmd`` and ``kill -9`` its group ``delay`` seconds after the start or, with
    ``after_commits=k``, ``delay`` seconds after its k-th Delta commit appeared, or with
    ``after_lock``, after it took the writer lock (the lock's file or object rewritten)."""
    job = Monitored(cmd, warehouse, env=env, poll=0.02)
    started = time.time()
    if after_commits is not None or after_lock:
        while job.proc.poll() is None and time.time() - started <= timeout:
            if after_lock and job.record.first("writer-lock") is not None:
                break
            if after_commits is not None and len(job.record.commits()) >= after_commits:
                break
            time.sleep(0.01)
    deadline = time.time() + delay
    while time.time() < deadline and job.proc.poll() is None:
        time.sleep(min(0.01, max(0.0, deadline - time.time())))
    if job.proc.poll() is None:
        job.kill()
    return job.wait(timeout)


# --------------------------------------------------------------------------- phases


@dataclass
class Timeline:
    """Where the phases of an uninterrupted run fall, from the outside."""

    duration: float
    lock_at: float | None  # the run took the writer lock
    workers_at: float | None
    commit_tables: list[str]  # in commit order
    first_commit_at: float | None
    workers_seconds: float | None  # from the job's own summary line, when it prints one

    @classmethod
    def of(cls, rec: RunRecord) -> Timeline:
        commits = rec.commits()
        m = re.search(r"workers ([0-9.]+) s", rec.output)
        ms, wk = rec.first("writer-lock"), rec.first("python-workers")
        return cls(rec.duration, ms.at if ms else None, wk.at if wk else None,
                   [c.detail.split("@")[0] for c in commits], commits[0].at if commits else None,
                   float(m.group(1)) if m else None)


_PHASE_LINE = re.compile(r"\bphase\b[\s:=]+([A-Za-z_][\w-]*)", re.IGNORECASE)


def phase_of_kill(rec: RunRecord, ref: Timeline) -> str:
    """The phase a kill hit, from what the killed run had done (commits are authoritative).

    - ``startup``: before the run took the writer lock (JVM start, session, table registration);
    - ``reading``: writer lock taken, no Python worker and no commit yet (plan, state and
      pending rows read on the driver, routing);
    - ``worker update``: Python workers running, no commit yet, within the reference run's
      worker-phase duration of the first worker;
    - ``commit:<table>``: the next commit the run had not made (its earlier commits landed);
      ``commit:<first table>`` also covers a kill after the workers, before the first commit;
    - ``after last commit``: every commit of the reference run's sequence had landed;
    - ``explicit:<name>``: the last ``phase <name>`` line the job printed, when it prints them.
    """
    assert rec.killed_at is not None
    k = rec.killed_at
    explicit = [e for e in rec.events if e.kind == "out" and e.at <= k and _PHASE_LINE.search(e.detail)]
    commits = [c.detail.split("@")[0] for c in rec.commits()]
    if commits:
        done = set(commits)
        remaining = [t for t in ref.commit_tables if t not in done]
        label = f"commit:{remaining[0]}" if remaining else "after last commit"
    else:
        ms, wk = rec.first("writer-lock"), rec.first("python-workers")
        if ms is None or ms.at > k:
            label = "startup"
        elif wk is None or wk.at > k:
            label = "reading"
        elif ref.workers_seconds is not None and k - wk.at <= ref.workers_seconds:
            label = "worker update"
        else:
            label = f"commit:{ref.commit_tables[0]}" if ref.commit_tables else "worker update"
    if explicit:
        label += f" (job said: {_PHASE_LINE.search(explicit[-1].detail).group(1)})"
    return label


# --------------------------------------------------------------------------- several entry points in one JVM


def _load_app(path: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(path).stem + "_app", REPO / path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def entry_points(steps: list[tuple[str, list[str]]]) -> int:
    """Run ``main(argv)`` of each entry point in turn in this process (one JVM for all)."""
    for target, argv in steps:
        if target == "dkm":
            from dkmsks.cli import main
        else:
            main = _load_app(target).main
        rc = main(argv)
        if rc:
            print(f"{target} {' '.join(argv)} exited {rc}", file=sys.stderr)
            return int(rc)
    return 0


def entry_points_each(steps: list[tuple[str, list[str]]]) -> int:
    """Like :func:`entry_points`, but every step runs whatever the others do; each prints one
    ``STEP {"rc": .., "error": ..}`` line (the exception a failing step raised, as a user sees it)."""
    for target, argv in steps:
        main = _load_app(target).main if target != "dkm" else __import__("dkmsks.cli", fromlist=["main"]).main
        try:
            rc, error = int(main(argv) or 0), None
        except Exception as err:  # noqa: BLE001 - reported, the next step still runs
            rc, error = 1, f"{type(err).__name__}: {err}"
        print("STEP " + json.dumps({"target": target, "argv": argv, "rc": rc, "error": error}), flush=True)
    return 0


def steps_of(output: str) -> list[dict]:
    return [json.loads(line[5:]) for line in output.splitlines() if line.startswith("STEP ")]


def entry_points_cmd(steps: list[tuple[str, list[str]]], *, each: bool = False) -> list[str]:
    return [PYTHON, str(HERE / "rel_harness.py"), "entry-points-each" if each else "entry-points", json.dumps(steps)]


if __name__ == "__main__":
    if sys.argv[1] == "entry-points":
        sys.exit(entry_points([(t, list(a)) for t, a in json.loads(sys.argv[2])]))
    if sys.argv[1] == "entry-points-each":
        sys.exit(entry_points_each([(t, list(a)) for t, a in json.loads(sys.argv[2])]))
    raise SystemExit(f"unknown command {sys.argv[1]!r}")
