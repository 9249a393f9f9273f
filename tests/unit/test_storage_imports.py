"""The storage protocol, the client and the JVM-free commands import without pyspark.

Publishers, readers and the DAGs' checks run where no JVM or Spark installation is wanted
(docs/design.md §4, "Spark-free access"); :mod:`dkmsks.storage` holds what they need. Each
check runs in a fresh interpreter whose import system refuses pyspark and Delta's Spark package,
as if they were not installed."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

LIB = Path(__file__).resolve().parents[2] / "lib" / "dkmsks"
#: The reading and publishing commands that run without Spark (dkmsks.cli.ARROW_ONLY_COMMANDS and
#: the publishers).
SPARK_FREE_COMMANDS = ("status", "results", "watch", "export", "publish", "subscribe", "unsubscribe", "serve", "token")

REFUSE_SPARK = textwrap.dedent("""
    import importlib.abc, sys

    class NoSpark(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname.split(".")[0] in ("pyspark", "delta", "py4j"):
                raise ModuleNotFoundError(f"{fullname} is not installed here", name=fullname)
            return None

    sys.meta_path.insert(0, NoSpark())
""")


def storage_modules() -> list[str]:
    names = [f"dkmsks.storage.{m.name}" for m in pkgutil.iter_modules([str(LIB / "storage")])]
    assert len(names) >= 10, f"the storage package looks empty: {names}"
    return names


def import_without_spark(modules: list[str]) -> subprocess.CompletedProcess[str]:
    body = REFUSE_SPARK + "\nimport importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    body += "assert not [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'delta', 'py4j')]\n"
    return subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, timeout=120)


def service_modules() -> list[str]:
    names = [f"dkmsks.service.{m.name}" for m in pkgutil.iter_modules([str(LIB / "service")])]
    assert {"app", "auth", "events", "publisher", "registry"} <= {n.rsplit(".", 1)[1] for n in names}, names
    return names


def test_storage_client_service_and_spark_free_commands_import_without_pyspark():
    modules = storage_modules() + ["dkmsks.client"] + service_modules() \
        + [f"dkmsks.commands.{c}" for c in SPARK_FREE_COMMANDS]
    done = import_without_spark(modules)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_service_app_starts_and_serves_without_pyspark(tmp_path):
    """Not only imports: an app made, its lifespan run and a request answered, with pyspark refused."""
    body = REFUSE_SPARK + textwrap.dedent(f"""
        from pathlib import Path
        from fastapi.testclient import TestClient
        from dkmsks.service.app import ServiceConfig, create_app
        from dkmsks.warehouse import Warehouse
        wh = Warehouse({str(tmp_path)!r})
        app = create_app(ServiceConfig(wh, Path({str(tmp_path / "tokens.json")!r}), Path({str(tmp_path / "r.db")!r})))
        with TestClient(app) as c:
            assert c.get("/healthz").json() == {{"ok": True, "events": False}}
            assert c.get("/openapi.json").status_code == 200
        assert not [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'delta', 'py4j')]
    """)
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", body], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_service_imports_nothing_of_spark_jobs_or_commands():
    from test_layers import layers_imported

    files = sorted((LIB / "service").rglob("*.py"))
    wrong = {f.name: sorted(layers_imported(f.read_text(encoding="utf-8")) & {"spark", "jobs", "commands"})
             for f in files}
    assert {name: found for name, found in wrong.items() if found} == {}


def test_the_check_fails_for_a_module_that_needs_pyspark():
    done = import_without_spark(["dkmsks.spark.delta_io"])
    assert done.returncode != 0
    assert "pyspark" in done.stderr and "is not installed here" in done.stderr
