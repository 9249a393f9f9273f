"""The suite's xdist groups really keep their tests on one worker (tests/conftest.py).

scripts/test.sh runs two pytest-xdist workers with ``--dist loadgroup``; tests that share an
expensive fixture (a prepared warehouse, one Airflow) are put in one group by
``tests/conftest.py``. Nothing fails when the grouping stops working, the fixtures are just
built once per worker: that went unseen for as long as pytest 9.2 was pinned (pytest-xdist
issue 1386). Here a throwaway suite with the real hook runs on two workers, as the suite does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a pytest run on two xdist workers: seconds

SUITE_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

RECORDING_TEST = textwrap.dedent("""
    import os
    import time

    import pytest

    pytestmark = pytest.mark.unit  # a layer, as every test of the suite has


    @pytest.mark.parametrize("i", range(4))
    def test_records_its_worker(request, i):
        time.sleep(0.3)  # long enough that an idle worker would be handed the next test
        with open(os.environ["GROUPS_OUT"], "a") as out:
            out.write(f"{request.node.nodeid} {os.environ['PYTEST_XDIST_WORKER']}\\n")
""")


def test_a_group_of_the_suite_runs_on_one_worker(tmp_path):
    # The suite's own hook, loaded from its conftest, in a suite laid out like ours: the
    # crash tests (a group) and some tests of no group.
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import importlib.util

        _spec = importlib.util.spec_from_file_location("suite_conftest", {str(SUITE_CONFTEST)!r})
        _suite = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_suite)
        pytest_collection_modifyitems = _suite.pytest_collection_modifyitems
    """))
    for folder, name in (("tests/reliability", "test_crash.py"), ("tests/other", "test_free.py")):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / name).write_text(RECORDING_TEST)
    out = tmp_path / "groups.txt"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
         "-o", "addopts=", "--rootdir", str(tmp_path), str(tmp_path / "tests")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "GROUPS_OUT": str(out), "HOME": str(tmp_path)},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    workers: dict[str, set[str]] = defaultdict(set)
    nodeids = []
    for line in out.read_text().splitlines():
        nodeid, worker = line.rsplit(" ", 1)
        nodeids.append(nodeid)
        workers[nodeid.split("::")[0]].add(worker)
    assert len(nodeids) == 8
    # xdist groups by the suffix it gives the node ids of a group's tests.
    assert sorted(n for n in nodeids if n.endswith("@crash")) == [
        f"tests/reliability/test_crash.py::test_records_its_worker[{i}]@crash" for i in range(4)]
    assert len(workers["tests/reliability/test_crash.py"]) == 1, dict(workers)
