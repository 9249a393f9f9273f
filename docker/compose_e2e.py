"""End-to-end check of a running docker-compose stack, from the host (scripts/compose_smoke.sh).

1. A small workload from the real data (``dkm generate`` on the host) in the input folder the
   containers mount read-only (``$DKMSKS_INPUT``, /data/input), plus a copy cut at ``--first``
   timestamps.
2. Airflow's REST API on 127.0.0.1:8080: sign in as ``admin`` (the generated password is read
   from the api-server container and never printed), trigger ``dkmsks_ingest`` with the cut
   copy, wait for the asset-triggered ``dkmsks_partition`` and ``dkmsks_microbatch`` runs on
   the Spark cluster until the ledger reaches ``--first``.
3. The ``follow`` service (stopped during step 2, so the DAG runs do that part): start it, land
   the remaining timestamps one by one with ``dkm publish``, wait until it has processed them,
   read ``knn_results`` with ``dkm spark-sql`` while it runs, then stop it and check that
   SIGTERM ended it with exit status 0.
4. ``dkm export`` at ``--first`` (Delta time travel) and at the last timestamp, each compared
   with ``dkm oracle`` on the host (``cmp`` of the sorted JSON lines).
5. The warehouse is on the object store only: no container mounts a warehouse or the store's
   data volume but the gateway (``docker inspect``), the gateway's volume holds the tables, the
   credentials file is mode 600, and its secret is in no container's environment and no log.

Every ``dkm`` command in the stack (publish, the ledger's reads, spark-sql, export) runs in a
one-off container of the ``client`` service, which reaches the warehouse as the services do:
over the compose network, with the store's credentials file mounted read-only.

Before step 2, the project's image under ``docker run --cpus 1`` and ``--cpuset-cpus 0``: follow
mode's default number of worker tasks counts the container's one core (dkmsks.cores).

Only the standard library: it runs with any Python 3 next to the host's ``.venv`` (used for
``dkm generate`` and ``dkm oracle``). Prints one line per step with its duration; exits non-zero
at the first failed check.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
API = f"http://127.0.0.1:{os.environ.get('DKMSKS_AIRFLOW_PORT', '8080')}"  # as docker-compose.yml publishes it
PASSWORDS = "/opt/airflow/simple_auth_manager_passwords.json.generated"
IMAGE = "dkmsks:0.1.0"  # every dkmsks service's image (docker-compose.yml)
#: The warehouse of every service (docker-compose.yml: DKMSKS_WAREHOUSE).
WAREHOUSE = f"s3://{os.environ.get('DKMSKS_BUCKET', 'dkmsks')}/warehouse"
#: Where the gateway keeps its objects (docker/objectstore: a bucket is a folder) and the credentials.
STORE_DATA = "/var/lib/versitygw/data"
CREDENTIALS = "/etc/dkmsks/objectstore/credentials"
STARTED = time.monotonic()


def say(text: str) -> None:
    elapsed = int(time.monotonic() - STARTED)
    print(f"[{elapsed // 60:02d}:{elapsed % 60:02d}] {text}", flush=True)


def compose(*args: str, capture: bool = True, check: bool = True, timeout: float = 900) -> str:
    done = subprocess.run(["docker-compose", *args], check=False, cwd=REPO, text=True, timeout=timeout,
                          stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if capture else None)
    if check and done.returncode != 0:
        raise SystemExit(f"docker-compose {' '.join(args)} exited {done.returncode}:\n{(done.stderr or '')[-3000:]}")
    return done.stdout or ""


def in_container(command: str, timeout: float = 900) -> str:
    """A one-off container of the ``client`` service (the store's address and credentials, the
    input folder; no Airflow secret), removed afterwards."""
    return compose("run", "--rm", "--no-deps", "-T", "client", "bash", "-c", command, timeout=timeout)


def cut(source: Path, target: Path, last_t: int) -> None:
    """Copy a workload TSV(.gz) keeping the rows with t <= last_t (t is the last column)."""
    with gzip.open(source, "rt", newline="") as src, gzip.open(target, "wt", newline="") as dst:
        rows, out = csv.reader(src, delimiter="\t"), csv.writer(dst, delimiter="\t", lineterminator="\n")
        header = next(rows)
        out.writerow(header)
        at = header.index("t")
        out.writerows(row for row in rows if int(row[at]) <= last_t)


class Airflow:
    def __init__(self) -> None:
        password = json.loads(compose("exec", "-T", "airflow-api-server", "cat", PASSWORDS))["admin"]
        status, body = self.call("POST", "/auth/token", {"username": "admin", "password": password}, token=None)
        if status not in (200, 201):
            raise SystemExit(f"sign-in as admin failed with HTTP {status}")
        self.token = body["access_token"]

    def call(self, method: str, path: str, body: dict | None = None, *, token: str | None | bool = True):
        req = urllib.request.Request(API + path, method=method, data=None if body is None else json.dumps(body).encode())
        req.add_header("Content-Type", "application/json")
        bearer = self.token if token is True else token
        if bearer:
            req.add_header("Authorization", f"Bearer {bearer}")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, {}

    def runs(self, dag_id: str) -> list[dict]:
        status, body = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=50")
        assert status == 200, (dag_id, status)
        return body["dag_runs"]

    def wait_dags(self, timeout: float) -> None:
        """Until every DAG file of the image (dags/dkmsks_*.py but the shared module) is
        registered, unpaused."""
        expected = {f.stem for f in (REPO / "dags").glob("dkmsks_*.py")} - {"dkmsks_common"}
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.call("GET", "/api/v2/dags?dag_id_pattern=dkmsks_")
            found = {d["dag_id"]: d["is_paused"] for d in body.get("dags", [])} if status == 200 else {}
            if set(found) == expected:
                assert not any(found.values()), f"paused DAGs: {found}"
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"the dag-processor did not register {sorted(expected)} within {timeout:.0f} s: {found}")
            time.sleep(3)

    def wait_run(self, dag_id: str, *, after: str, timeout: float, run_id: str | None = None) -> dict:
        """The first run queued after ``after`` (or ``run_id``) once it succeeded; fail on failure."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            mine = [r for r in self.runs(dag_id) if (r["dag_run_id"] == run_id if run_id else r["queued_at"] > after)]
            mine.sort(key=lambda r: r["queued_at"])
            if mine:
                if mine[0]["state"] == "success":
                    return mine[0]
                if mine[0]["state"] == "failed":
                    raise SystemExit(f"{dag_id} run {mine[0]['dag_run_id']} failed")
            time.sleep(5)
        raise SystemExit(f"{dag_id}: no successful run within {timeout:.0f} s")


def seconds(run: dict) -> float:
    """How long a DAG run took, or has been running: its ledger record can be committed before
    the run itself is marked finished (end_date still null)."""
    from datetime import UTC, datetime

    start = datetime.fromisoformat(run["start_date"])
    end = datetime.fromisoformat(run["end_date"]) if run.get("end_date") else datetime.now(UTC)
    return (end - start).total_seconds()


LEDGER = ("import json; from deltalake import DeltaTable; from dkmsks.warehouse import Warehouse; "
          "from dkmsks.storage.lake import storage_options; uri = Warehouse.at().table_uri('journal'); "
          "t = DeltaTable(uri, storage_options=storage_options(uri)).to_pyarrow_table("
          "columns=['t', 'run_id'], filters=[('record', '=', 'ledger')]); "
          "print(json.dumps(sorted(zip(t['t'].to_pylist(), t['run_id'].to_pylist()))))")


def ledger() -> list[tuple[int, str]]:
    """(t, run id) of every processed timestamp, from the journal's Delta log on the object
    store (delta-rs)."""
    out = in_container(f'python -c "{LEDGER}" 2>/dev/null || echo "[]"')
    return [tuple(x) for x in json.loads(out.strip().splitlines()[-1])]


def wait_ledger(last_t: int, timeout: float) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = ledger()
        if rows and max(t for t, _ in rows) >= last_t:
            return rows
        time.sleep(10)
    raise SystemExit(f"the ledger did not reach t={last_t} within {timeout:.0f} s")


def stack_memory() -> str:
    """Each running container's memory (``docker stats``) and their sum, as one line."""
    ids = compose("ps", "-q").split()
    out = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.Name}}\t{{.MemUsage}}", *ids],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "kB": 1e3, "MB": 1e6, "GB": 1e9}
    used = {}
    for line in out.splitlines():
        name, usage = line.split("\t")
        value = usage.split("/")[0].strip()
        number = value.rstrip("KMGiBk")
        used[name.split("_")[-2] if "_" in name else name] = float(number) * units[value[len(number):]]
    parts = ", ".join(f"{n} {b / 2**20:.0f} MiB" for n, b in sorted(used.items(), key=lambda kv: -kv[1]))
    return f"{sum(used.values()) / 2**30:.2f} GiB in all ({parts})"


#: What a container may mount (its service, the target) besides nothing: Airflow's home, the
#: read-only input and data folders, the store's credentials read-only, and each stateful
#: service its own volume. A warehouse folder is not among them.
ALLOWED_MOUNTS = {"/opt/airflow", "/data/input", "/data/shared", "/etc/dkmsks/objectstore"}
OWN_VOLUMES = {"objectstore": {"/var/lib/versitygw", "/etc/dkmsks/objectstore"},
               "postgres": {"/var/lib/postgresql/data"}}
READ_ONLY = {"/data/input", "/data/shared", "/etc/dkmsks/objectstore"}


def containers() -> dict[str, str]:
    """Container id -> service of every container of the stack, running or exited (the one-shot
    inits, follow once stopped)."""
    ids = compose("ps", "-q").split()
    out = subprocess.run(["docker", "inspect", "-f", '{{.Id}} {{index .Config.Labels "com.docker.compose.service"}}',
                          *ids], capture_output=True, text=True, check=True, timeout=120).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def no_warehouse_mounts() -> str:
    """No container mounts a warehouse (``docker inspect``): the store's data volume is the
    gateway's alone, and the others mount only what :data:`ALLOWED_MOUNTS` names."""
    seen = {}
    for cid, service in containers().items():
        mounts = json.loads(subprocess.run(["docker", "inspect", "-f", "{{json .Mounts}}", cid], capture_output=True,
                                           text=True, check=True, timeout=60).stdout)
        for m in mounts:
            target, writable = m["Destination"], m["RW"]
            if target in OWN_VOLUMES.get(service, ()):
                continue
            if target not in ALLOWED_MOUNTS or (target in READ_ONLY and writable):
                raise SystemExit(f"{service} mounts {m.get('Name') or m.get('Source')} at {target} "
                                 f"({'read-write' if writable else 'read-only'}): not the object store's way")
            if (m.get("Name") or "").endswith("_objectstore-data"):
                raise SystemExit(f"{service} mounts the object store's data volume")
        seen[service] = sorted(m["Destination"] for m in mounts)
    assert "objectstore" in seen and "follow" in seen and "spark-worker-1" in seen, seen
    return (f"no container mounts a warehouse ({len(seen)} containers inspected): the store's data volume is the "
            "gateway's alone; Spark's workers mount " + ", ".join(seen["spark-worker-1"])
            + "; follow " + ", ".join(seen["follow"]))


def tables_in_the_store() -> str:
    """The gateway's volume holds the warehouse's tables (a bucket is a folder, an object a file)."""
    root = f"{STORE_DATA}/{WAREHOUSE.removeprefix('s3://')}"
    tables = set(compose("exec", "-T", "objectstore", "ls", f"{root}/tables").split())
    expected = {"objects", "subscription_events", "partition_plans", "knn_state", "journal"}
    assert expected <= tables, f"the object store's volume lacks tables: {sorted(expected - tables)} ({sorted(tables)})"
    commits = compose("exec", "-T", "objectstore", "bash", "-c",
                      f"ls {root}/tables/journal/_delta_log | grep -c '[.]json$'").strip()
    size = compose("exec", "-T", "objectstore", "du", "-sh", root).split()[0]
    return (f"the object store's volume holds the warehouse: {len(tables)} tables ({', '.join(sorted(tables))}), "
            f"{size}; the journal's log {commits} commits")


def credentials_kept() -> str:
    """The store's credentials file is the gateway's, mode 600, and its secret is in no
    container's environment and no service's log (the secret is read here, never printed)."""
    mode = compose("exec", "-T", "objectstore", "stat", "-c", "%a %U", CREDENTIALS).strip()
    assert mode == "600 dkmsks", f"{CREDENTIALS}: mode and owner {mode}"
    secret = compose("exec", "-T", "objectstore", "sed", "-n", "s/^aws_secret_access_key *= *//p",
                     CREDENTIALS).strip()
    assert len(secret) >= 32, "no secret in the credentials file"
    for cid, service in containers().items():
        env = subprocess.run(["docker", "inspect", "-f", "{{json .Config.Env}}", cid], capture_output=True, text=True,
                             check=True, timeout=60).stdout
        if secret in env:
            raise SystemExit(f"the object store's secret is in the environment of {service}")
    if secret in compose("logs", "--no-color"):
        raise SystemExit("the object store's secret is in a service's log")
    permissions, owner = mode.split()
    return (f"the store's credentials: {CREDENTIALS} (mode {permissions}, owner {owner}), the secret in no "
            "environment and no log")


def compare(export: Path, oracle: Path) -> None:
    a, b = (sorted(p.read_text().splitlines()) for p in (export, oracle))
    if a != b:
        raise SystemExit(f"{export} differs from {oracle} ({len(a)} vs {len(b)} lines)")
    subprocess.run(f"cmp <(sort {export}) <(sort {oracle})", shell=True, executable="/bin/bash", check=True)


def cpu_limited_container() -> None:
    """The project's image under ``--cpus 1`` (a cgroup quota) and ``--cpuset-cpus 0`` (an
    affinity): follow mode's default worker tasks count the container's one core, not the
    host's (dkmsks.cores)."""
    for limit in (["--cpus", "1"], ["--cpuset-cpus", "0"]):
        done = subprocess.run(["docker", "run", "--rm", "--network", "none", *limit, "--entrypoint", "python",
                               IMAGE, "-c", "from dkmsks.jobs.follow import default_processes; "
                               "print(default_processes(20))"], capture_output=True, text=True, timeout=300,
                              check=False)
        if done.returncode != 0 or done.stdout.strip() != "1":
            raise SystemExit(f"docker run {' '.join(limit)}: follow's default worker tasks "
                             f"{done.stdout.strip()!r}, expected 1\n{done.stderr[-2000:]}")
    say("a container limited to one CPU (--cpus 1, --cpuset-cpus 0) runs one follow worker task by default")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", type=Path, default=Path(os.environ.get("DKMSKS_INPUT", REPO / ".cache/compose/input")),
                   help="host folder mounted at /data/input")
    p.add_argument("--source", default=os.environ.get("DKMSKS_SMOKE_SOURCE",
                                                      "/work/shared/data/wof_simplegeo_us/objects.tsv.gz"))
    p.add_argument("--o-init", type=int, default=5000)
    p.add_argument("--subscriptions", type=int, default=500)
    p.add_argument("--timestamps", type=int, default=5)
    p.add_argument("--first", type=int, default=3, help="timestamps the DAGs process; follow does the rest")
    p.add_argument("--out", type=Path, default=REPO / ".cache/compose/smoke", help="exports and oracles (host)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds for each wait")
    args = p.parse_args(argv)
    dkm = REPO / ".venv/bin/dkm"
    args.out.mkdir(parents=True, exist_ok=True)

    name = f"smoke-o{args.o_init}-s{args.subscriptions}-t{args.timestamps}"
    work = args.input / name
    objects, events = work / "objects.tsv.gz", work / "events.tsv.gz"
    if not objects.exists():
        subprocess.run([dkm, "generate", "--source", args.source, "--out", work, "--o-init", str(args.o_init),
                        "--subscriptions", str(args.subscriptions), "--timestamps", str(args.timestamps)], check=True)
    first = {kind: work / f"{kind}-upto{args.first}.tsv.gz" for kind in ("objects", "events")}
    for kind, path in first.items():
        cut(work / f"{kind}.tsv.gz", path, args.first)
    in_box = f"/data/input/{name}"
    say(f"workload {work}: |O_init|={args.o_init}, |S|={args.subscriptions}, T={args.timestamps}")

    cpu_limited_container()

    airflow = Airflow()
    airflow.wait_dags(args.timeout)
    say("signed in to Airflow's REST API as admin; the DAGs are registered and unpaused")

    compose("stop", "follow")  # the DAGs process the first timestamps; follow the rest
    now = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    status, run = airflow.call("POST", "/api/v2/dags/dkmsks_ingest/dagRuns", {"logical_date": None, "conf": {
        "objects": f"{in_box}/objects-upto{args.first}.tsv.gz", "events": f"{in_box}/events-upto{args.first}.tsv.gz",
        "warehouse": WAREHOUSE}})
    assert status == 200, f"trigger dkmsks_ingest: HTTP {status}"
    t = time.monotonic()
    ingest = airflow.wait_run("dkmsks_ingest", after=now, run_id=run["dag_run_id"], timeout=args.timeout)
    say(f"dkmsks_ingest {ingest['dag_run_id']} succeeded ({seconds(ingest):.0f} s run, {time.monotonic() - t:.0f} s "
        "from the trigger)")
    t = time.monotonic()
    partition = airflow.wait_run("dkmsks_partition", after=now, timeout=args.timeout)
    say(f"dkmsks_partition {partition['dag_run_id']} ({partition['run_type']}) succeeded ({seconds(partition):.0f} s)")
    t = time.monotonic()
    rows = wait_ledger(args.first, args.timeout)
    by_dags = {run_id for t_, run_id in rows if 1 <= t_ <= args.first}
    micro = [r for r in airflow.runs("dkmsks_microbatch") if r["dag_run_id"] in by_dags]
    say(f"ledger at t={args.first} {time.monotonic() - t:.0f} s after the partition run; t=1..{args.first} committed by "
        + ", ".join(f"dkmsks_microbatch {r['dag_run_id']} ({r['run_type']}, {seconds(r):.0f} s)" for r in micro))
    assert micro and by_dags <= {r["dag_run_id"] for r in micro}, f"not the micro-batch DAG: {rows}"

    t = time.monotonic()
    compose("up", "-d", "--no-deps", "follow")
    deadline = time.monotonic() + args.timeout
    while "following: plan" not in compose("logs", "--no-color", "--tail", "20", "follow"):
        assert time.monotonic() < deadline, "follow did not pick up the plan"
        time.sleep(5)
    say(f"follow is following the plan ({time.monotonic() - t:.0f} s after its start)")
    for ts in range(args.first + 1, args.timestamps + 1):
        t = time.monotonic()
        in_container(f"dkm publish --objects {in_box}/objects.tsv.gz --events {in_box}/events.tsv.gz "
                     f"--warehouse {WAREHOUSE} --timestamps 1 2>/dev/null")
        published = time.monotonic() - t
        rows = wait_ledger(ts, args.timeout)
        say(f"published t={ts} ({published:.1f} s); processed by "
            f"{dict(rows)[ts]!r} {time.monotonic() - t - published:.0f} s later")
    followed = [t_ for t_, run_id in rows if run_id == "follow"]
    assert followed, f"the follow service processed no timestamp: {rows}"

    oracles: dict[int, Path] = {}

    def oracle_at(as_of: int) -> Path:
        """``dkm oracle`` on the host at ``as_of`` (run once per timestamp)."""
        if as_of not in oracles:
            oracles[as_of] = args.out / f"oracle-t{as_of}.jsonl"
            subprocess.run([dkm, "oracle", "--objects", objects, "--events", events, "--as-of", str(as_of),
                            "--out", oracles[as_of]], check=True, capture_output=True)
        return oracles[as_of]

    # A reader while follow runs: Spark's own spark-sql shell in a one-off container of the stack
    # (local master, the warehouse's tables and views registered by path), not blocked by the writer.
    t = time.monotonic()
    oracle = oracle_at(args.timestamps)
    expected = {(r["sub_id"], rank, oid) for r in map(json.loads, oracle.read_text().splitlines())
                for rank, oid in enumerate(r["object_ids"], start=1)}
    out = in_container(f"dkm spark-sql --warehouse {WAREHOUSE} -e "
                       "'SELECT sub_id, rank, object_id FROM knn_results' 2>/dev/null")
    got = {tuple(int(v) for v in line.split("\t")) for line in out.splitlines() if line.strip()}
    assert got == expected, f"knn_results differs from the oracle at t={args.timestamps}: " \
                            f"{len(got - expected)} rows extra, {len(expected - got)} missing"
    say(f"spark-sql in the stack: knn_results equals the oracle at t={args.timestamps}, {len(got)} rows, "
        f"while follow runs ({time.monotonic() - t:.0f} s)")

    say(f"memory of the running stack: {stack_memory()}")
    t = time.monotonic()
    compose("stop", "follow")
    state = subprocess.run(["docker", "inspect", "-f", "{{.State.ExitCode}}",
                            compose("ps", "-q", "follow").strip()], capture_output=True, text=True, check=True)
    tail = compose("logs", "--no-color", "--tail", "3", "follow")
    assert state.stdout.strip() == "0" and "stopped" in tail, (state.stdout, tail)
    say(f"follow stopped on SIGTERM in {time.monotonic() - t:.1f} s with exit status 0")

    for as_of in (args.first, args.timestamps):
        t = time.monotonic()
        export = args.out / f"export-t{as_of}.jsonl"
        export.write_text(in_container(f"dkm export --warehouse {WAREHOUSE} --as-of {as_of} "
                                       "--out /tmp/export.jsonl >&2 && cat /tmp/export.jsonl"))
        compare(export, oracle_at(as_of))
        say(f"export at t={as_of} equals the oracle: {len(export.read_text().splitlines())} subscriptions "
            f"({time.monotonic() - t:.0f} s)")
    say(no_warehouse_mounts())
    say(tables_in_the_store())
    say(credentials_kept())
    say("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
