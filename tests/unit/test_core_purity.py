"""The core stays pure: no Spark, Delta, Airflow, file or clock access (STYLE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CORE = Path(__file__).resolve().parents[2] / "lib" / "dkmsks" / "core"
# json stays allowed: plans serialise to JSON text, which is not I/O.
FORBIDDEN_MODULES = {"pyspark", "delta", "airflow", "time", "datetime", "os", "io", "pathlib",
                     "gzip", "pandas", "pyarrow", "shutil", "subprocess", "socket"}
FORBIDDEN_CALLS = {"open", "input", "print"}


def impurities(source: str) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in FORBIDDEN_MODULES:
                bad.append(node.module)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            bad.append(f"{node.func.id}() at line {node.lineno}")
    return bad


def core_files():
    files = sorted(CORE.rglob("*.py"))
    assert files, f"no core modules found under {CORE}"
    return files


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_imports_nothing_impure(path):
    assert impurities(path.read_text(encoding="utf-8")) == [], path.name


def test_the_checker_catches_an_impure_module():
    source = "import time\nfrom pyspark.sql import functions\nimport numpy as np\nopen('x')\n"
    assert impurities(source) == ["time", "pyspark.sql", "open() at line 4"]
