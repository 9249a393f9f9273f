"""Shared fixtures: real-data slices (skipped with the reason when ../shared/data is absent, and
failed under ``CI=true``)."""

from __future__ import annotations

import fnmatch
import os
import shutil
import signal
import socket
import subprocess
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dkmsks.core.model import KeywordSets, Objects, Vocabulary

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("DKMSKS_DATA_DIR", REPO.parent / "shared" / "data"))
PLACE_FILE = DATA_DIR / "wof_simplegeo_us" / "objects.tsv.gz"
NAMES_FILE = DATA_DIR / "wof_simplegeo_us" / "objects_with_names.tsv.gz"


def missing_prerequisite(reason: str) -> None:
    """A test cannot run because something it needs is absent: it skips with ``reason`` on a
    developer's machine, and fails under ``CI=true`` (a CI run that passes by skipping proves
    nothing)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"prerequisite missing under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def require_real_data(path: Path = PLACE_FILE) -> Path:
    if not path.exists():
        missing_prerequisite(f"real data file {path} is absent (set DKMSKS_DATA_DIR to the shared data folder)")
    return path


@lru_cache(maxsize=4)
def _head(path: str, n: int) -> pd.DataFrame:
    return pd.read_csv(path, sep="\t", nrows=n, dtype={"id": np.int64, "keywords": str})


def real_objects(n: int, path: Path = PLACE_FILE) -> tuple[Objects, Vocabulary]:
    """The first ``n`` rows of a real objects file, in stream order, as core columns."""
    require_real_data(path)
    df = _head(str(path), n)
    vocab = Vocabulary()
    rows = [[vocab.id_of(w) for w in kws.split(" ")] for kws in df["keywords"]]
    objects = Objects(
        df["id"].to_numpy(np.int64),
        df["x"].to_numpy(np.float64),
        df["y"].to_numpy(np.float64),
        KeywordSets.from_lists(rows),
        df["t"].to_numpy(np.int64),
    )
    return objects, vocab


def web_mercator(lon: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """WGS84 degrees -> EPSG:3857 metres (spherical Web Mercator, R = 6,378,137 m): the
    projected coordinates users bring instead of degrees (``x = 10687020.661`` and the like)."""
    radius = 6_378_137.0
    x = radius * np.radians(lon)
    y = radius * np.log(np.tan(np.pi / 4 + np.radians(lat) / 2))
    return x, y


def projected_workload(folder: Path, spec) -> tuple[Path, Path]:
    """The paper's workload (``spec``, a WorkloadSpec) generated from a real-data slice, then
    moved to EPSG:3857 metres, written as ``objects.tsv.gz`` and ``events.tsv.gz``."""
    from dkmsks.core.model import Objects, SubscriptionEvents
    from dkmsks.core.workload import generate_workload
    from dkmsks.io.writers import write_events, write_objects

    source, vocab = real_objects(spec.objects_needed)
    objects, events = generate_workload(source, spec)
    ox, oy = web_mercator(objects.x, objects.y)
    ex, ey = web_mercator(events.x, events.y)  # deletions carry NaN and are written without coordinates
    objects = Objects(objects.ids, ox, oy, objects.keywords, objects.t)
    events = SubscriptionEvents(events.op, events.ids, ex, ey, events.keywords, events.k, events.t)
    folder.mkdir(parents=True, exist_ok=True)
    write_objects(folder / "objects.tsv.gz", objects, vocab)
    write_events(folder / "events.tsv.gz", events, vocab)
    return folder / "objects.tsv.gz", folder / "events.tsv.gz"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261125)



@pytest.fixture(scope="session")
def spark_warehouse(tmp_path_factory):
    """The test session's warehouse (its default database)."""
    from dkmsks.warehouse import Warehouse

    return Warehouse(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="session")
def spark(spark_warehouse):
    from dkmsks.spark.session import build_session

    session = build_session(spark_warehouse, app_name="dkmsks-tests", master="local[2]", shuffle_partitions=4)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def objectstore(tmp_path_factory):
    """A private S3-compatible object store for the test run: ``scripts/objectstore.sh start``
    with its data in a temp folder and on a free port; yields the client's settings of its env
    file (``AWS_*``, ``DKMSKS_WAREHOUSE``) and its folder (``DKMSKS_OBJECTSTORE_DIR``: the objects
    are plain files under its ``data/<bucket>/``) as a dict, and stops the server by its PID at the end."""
    if shutil.which("curl") is None:
        missing_prerequisite("curl is absent (scripts/objectstore.sh signs its requests with it)")
    folder = tmp_path_factory.mktemp("objectstore")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DKMSKS_OBJECTSTORE_DIR": str(folder), "DKMSKS_OBJECTSTORE_PORT": str(port)}
    started = subprocess.run([str(REPO / "scripts" / "objectstore.sh"), "start"], env=env,
                             capture_output=True, text=True, timeout=900)
    if started.returncode != 0:
        if "go not found" in started.stderr:
            missing_prerequisite(f"the object store cannot be built: {started.stderr.strip()}")
        pytest.fail(f"scripts/objectstore.sh start failed ({started.returncode}): {started.stderr}", pytrace=False)
    pid = int((folder / "versitygw.pid").read_text())
    try:
        lines = (folder / "env").read_text().splitlines()
        yield {**dict(line.split("=", 1) for line in lines if "=" in line), "DKMSKS_OBJECTSTORE_DIR": str(folder)}
    finally:
        _stop(pid)


def _stop(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM to ``pid``, SIGKILL after ``timeout`` s; a zombie counts as stopped."""
    def alive() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    if not alive():
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive():
        os.kill(pid, signal.SIGKILL)


def database_name(prefix: str, request) -> str:
    return prefix + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:58]


@pytest.fixture
def fresh_db(spark, spark_warehouse, request):
    """A database of its own per test with every table and view registered, selected as
    current; its :class:`~dkmsks.warehouse.Warehouse`."""
    from dkmsks.spark.catalog import register

    warehouse = spark_warehouse.with_database(database_name("t_", request))
    register(spark, warehouse)
    yield warehouse
    spark.catalog.setCurrentDatabase("default")
    spark.sql("DROP DATABASE IF EXISTS IDENTIFIER(:db) CASCADE", args={"db": warehouse.database})


# --------------------------------------------------------------------------- two workers (xdist)

#: scripts/test.sh runs the suite on two pytest-xdist workers (``--dist loadgroup``). Tests that
#: share an expensive fixture stay on one worker: one Airflow (tests/e2e's package fixture; the
#: security test's own Airflow joins them so two never run at once), one SparkSession and its
#: landing tables (tests/spark), one prepared warehouse per group. Groups are listed heaviest
#: first and queued in this order, so the two workers finish together (the rest fills in); the
#: compose stack, the longest single test, is queued first on its own.
#:
#: pytest 9.2 broke this without a word: xdist 3.8 groups by a suffix it writes into the
#: node id, which pytest 9.2's structured node ids ignore, so every test went out on its own
#: and each worker built the groups' fixtures again (pytest-xdist issue 1386). requirements.lock
#: and pyproject's ``dev`` extra pin pytest 9.1.1 until xdist follows (tests/unit/test_pins.py
#: keeps the two pins equal); tests/unit/test_xdist_groups.py checks the grouping holds.
XDIST_GROUPS: list[tuple[str, str]] = [
    ("tests/e2e/test_compose_stack.py", "compose-stack"),
    # The crash tests on the object store share its prepared warehouse, not the folder's.
    ("tests/reliability/test_crash*.py::*[[]s3]", "crash-s3"),
    ("tests/reliability/test_crash.py", "crash"),
    ("tests/reliability/test_crash_points.py", "crash"),
    ("tests/reliability/test_replay.py", "replay"),
    ("tests/e2e/test_airflow", "airflow"),
    ("tests/reliability/test_security.py::test_airflow", "airflow"),
    ("tests/spark/", "spark"),
    ("tests/reliability/test_bad_input.py::test_bad_rows", "bad-input"),
    ("tests/reliability/test_bench_follow.py", "bench-follow"),
]


def _xdist_group(nodeid: str) -> tuple[int, str | None]:
    """The rank and group of the first entry of :data:`XDIST_GROUPS` that ``nodeid`` starts
    with (an entry is a prefix with ``fnmatch``'s wildcards; ``[[]`` is a literal ``[``)."""
    for rank, (prefix, group) in enumerate(XDIST_GROUPS):
        if fnmatch.fnmatchcase(nodeid, prefix + "*"):
            return rank, group
    return len(XDIST_GROUPS), None


# --------------------------------------------------------------------------- layers

#: Every test belongs to a layer, its marker (pyproject.toml registers them): ``-m unit`` and
#: the others select by these alone, so a test without one runs in no layer's selection.
LAYERS = frozenset({"unit", "slow", "spark", "dags", "e2e", "reliability"})
_NO_LAYER = pytest.StashKey[bool]()


def without_a_layer(items) -> list:
    """The items that carry none of the :data:`LAYERS` markers."""
    return [item for item in items if not LAYERS & {mark.name for mark in item.iter_markers()}]


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups' marks
def pytest_collection_modifyitems(config, items):
    # Before ``-m`` deselects: a test without a layer is put in every layer and fails there
    # (pytest_runtest_setup), so that whichever layer runs reports it, on one process or many.
    for item in without_a_layer(items):
        for layer in sorted(LAYERS):
            item.add_marker(layer)
        item.stash[_NO_LAYER] = True
    ranked = sorted(enumerate(items), key=lambda pair: (_xdist_group(pair[1].nodeid)[0], pair[0]))
    items[:] = [item for _, item in ranked]
    for item in items:
        group = _xdist_group(item.nodeid)[1]
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_runtest_setup(item):
    if item.stash.get(_NO_LAYER, False):
        pytest.fail(f"{item.nodeid} carries no layer marker ({', '.join(sorted(LAYERS))}): mark its module "
                    "(pytestmark = pytest.mark.unit) or the test, or it runs in no layer's selection", pytrace=False)


# --------------------------------------------------------------------------- the object store

#: The client settings of the object store's env file that tests put into the environment of
#: whatever they run against it (not its DKMSKS_WAREHOUSE: each test has a prefix of its own).
OBJECTSTORE_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION")


@pytest.fixture
def s3_warehouse(objectstore, monkeypatch, request, tmp_path):
    """A warehouse URI of its own on the test session's object store (``s3://dkmsks/<test>-<n>``),
    with the store's settings in this process's environment (and so in every child's), and its
    local home (``DKMSKS_LOCAL_DIR``: run files, caches, spools) in the test's ``tmp_path/local``
    rather than the project's ``.cache/local``."""
    import uuid

    for key in OBJECTSTORE_VARIABLES:
        monkeypatch.setenv(key, objectstore[key])
    monkeypatch.setenv("DKMSKS_LOCAL_DIR", str(tmp_path / "local"))
    name = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    return f"s3://dkmsks/{name}-{uuid.uuid4().hex[:8]}"
