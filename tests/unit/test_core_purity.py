"""The core stays pure (STYLE.md; README, "Layout"): no Spark, Delta, Airflow, file, clock or
machine access, checked over everything an import of the core runs, not its own lines alone.

From every module of ``dkmsks.core`` every ``dkmsks.*`` import is followed, at any depth and
inside functions too, with the packages above each module reached (importing
``dkmsks.core.stats`` runs ``dkmsks/__init__.py`` and ``dkmsks/core/__init__.py`` first). Each
module reached must be in ``dkmsks.core`` or on :data:`ALLOWED_OUTSIDE`, which says why. In
every module reached, third-party imports are limited to :data:`THIRD_PARTY`, and the standard
library's file, clock, environment and process modules (:data:`FORBIDDEN_STDLIB`) and the calls
in :data:`FORBIDDEN_CALLS` are refused; a module on :data:`ALLOWED_OUTSIDE` is exempt from
those two rules (that is what it is allowed for), not from the others.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

LIB = Path(__file__).resolve().parents[2] / "lib"
CORE = "dkmsks.core"

#: The third-party packages the core may import: arrays, the KD-tree, the kernels' compiler.
THIRD_PARTY = frozenset({"numpy", "scipy", "numba", "llvmlite"})
#: Standard-library modules that read or write files, the clock, the environment or processes.
#: json stays allowed: plans serialise to JSON text, which is not I/O; concurrent.futures too
#: (threads over arrays, as many as the caller says).
FORBIDDEN_STDLIB = frozenset({"time", "datetime", "os", "sys", "io", "pathlib", "gzip", "shutil", "subprocess",
                              "socket", "tempfile", "glob", "fcntl", "signal", "multiprocessing", "resource",
                              "platform", "logging", "zipfile", "tarfile", "sqlite3", "urllib", "http"})
FORBIDDEN_CALLS = frozenset({"open", "input", "print"})
#: Modules outside the core that importing it runs, and why each may.
ALLOWED_OUTSIDE: dict[str, str] = {
    "dkmsks": "the package's __init__, run by every import of the core; it only calls dkmsks.numba_cache",
    "dkmsks.numba_cache": (
        "names numba's cache directory by a digest of the core's sources before any kernel compiles "
        "(numba keys a cached function by its own file alone and would load stale kernels): it reads the "
        "core's sources and sets NUMBA_CACHE_DIR once, when the package is imported, so that the core "
        "itself reads no file and no environment"),
}


def package_sources(lib: Path = LIB, package: str = "dkmsks") -> tuple[dict[str, str], set[str]]:
    """Every module of ``package`` under ``lib``: its source by dotted name, and which are packages."""
    sources, packages = {}, set()
    for path in sorted((lib / package).rglob("*.py")):
        parts = path.relative_to(lib).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
            packages.add(".".join(parts))
        sources[".".join(parts)] = path.read_text(encoding="utf-8")
    return sources, packages


def _imports(name: str, tree: ast.AST, is_package: bool, known: Mapping[str, str]) -> Iterator[tuple[str, int]]:
    """The modules a module's source imports (with their line), submodules of ``from X import y`` included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, up level - 1
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield module, node.lineno
            yield from ((f"{module}.{alias.name}", node.lineno) for alias in node.names
                        if f"{module}.{alias.name}" in known)


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def impurities(sources: Mapping[str, str], packages: Iterable[str], core: str = CORE,
               allowed: Mapping[str, str] = ALLOWED_OUTSIDE) -> tuple[list[str], dict[str, str | None]]:
    """What breaks the rule of the module docstring in the import graph of ``sources`` (a
    package's modules by name), walked from every module of ``core``; and every module reached,
    with the one that first reached it (None for the core's own)."""
    packages = set(packages)
    top = core.split(".")[0]
    roots = sorted(m for m in sources if m == core or m.startswith(core + "."))
    via: dict[str, str | None] = dict.fromkeys(roots)
    queue = list(roots)
    bad: list[str] = []

    def chain(module: str) -> str:
        steps = [module]
        while (step := via.get(steps[-1])) is not None:
            steps.append(step)
        return " <- ".join(steps)

    while queue:
        module = queue.pop(0)
        for parent in _parents(module):  # importing a module runs its packages' __init__ first
            if parent not in via:
                via[parent] = module
                queue.append(parent)
        inside = module == core or module.startswith(core + ".")
        if not inside and module not in allowed:
            bad.append(f"{module}: outside the core and not allowed ({chain(module)})")
        if module not in sources:
            bad.append(f"{module}: no such module in the package ({chain(module)})")
            continue
        tree = ast.parse(sources[module])
        exempt = module in allowed
        for imported, line in _imports(module, tree, module in packages, sources):
            first = imported.split(".")[0]
            if first == top:
                if imported not in via:
                    via[imported] = module
                    queue.append(imported)
            elif first in sys.stdlib_module_names:
                if first in FORBIDDEN_STDLIB and not exempt:
                    bad.append(f"{module}: imports {imported} at line {line} (file, clock or process access)")
            elif first not in THIRD_PARTY:
                bad.append(f"{module}: imports {imported} at line {line}, a third-party module the core may not use")
        if not exempt:
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
                    bad.append(f"{module}: calls {node.func.id}() at line {node.lineno}")
    return bad, via


def test_everything_an_import_of_the_core_runs_is_pure_or_allowed_with_a_reason():
    sources, packages = package_sources()
    bad, reached = impurities(sources, packages)
    assert bad == [], "\n".join(bad)
    # The walk saw what it should: all of the core, and the package __init__ with what it calls.
    assert {m for m in sources if m == CORE or m.startswith(CORE + ".")} <= reached.keys()
    assert set(ALLOWED_OUTSIDE) <= reached.keys(), "an allowance no longer needed: remove it"


def test_the_checker_catches_a_transitive_impurity():
    # The core's stats import a helper outside the core inside a function; the helper reads
    # /proc with os and brings pandas: three findings, with the chain of imports that led there.
    sources = {
        "dkmsks": "",
        "dkmsks.core": "",
        "dkmsks.core.model": "import numpy as np\nfrom dkmsks.core import stats\n",
        "dkmsks.core.stats": "def threads():\n    from dkmsks.machine import cores\n    return cores()\n",
        "dkmsks.machine": "import os\nimport pandas as pd\n\ndef cores():\n    return len(os.sched_getaffinity(0))\n",
    }
    bad, reached = impurities(sources, {"dkmsks", "dkmsks.core"}, allowed={"dkmsks": "the package's __init__"})
    assert bad == [
        "dkmsks.machine: outside the core and not allowed (dkmsks.machine <- dkmsks.core.stats)",
        "dkmsks.machine: imports os at line 1 (file, clock or process access)",
        "dkmsks.machine: imports pandas at line 2, a third-party module the core may not use",
    ]
    assert reached["dkmsks"] == "dkmsks.core"  # the package's __init__, run before the core's


def test_the_package_init_is_walked_and_an_allowance_exempts_only_from_the_io_rules():
    sources = {
        "dkmsks": "from . import setup\n",  # a relative import in the package's __init__
        "dkmsks.setup": "import os\nimport time\nimport pyarrow\nprint('x')\nfrom dkmsks import clock\n",
        "dkmsks.clock": "import time\n",
        "dkmsks.core": "",
        "dkmsks.core.a": "from dkmsks.core import missing\nopen('f')\n",
    }
    packages = {"dkmsks", "dkmsks.core"}
    bad, _ = impurities(sources, packages, allowed={"dkmsks": "", "dkmsks.setup": "sets things up"})
    assert bad == [
        "dkmsks.core.a: calls open() at line 2",
        "dkmsks.setup: imports pyarrow at line 3, a third-party module the core may not use",
        "dkmsks.clock: outside the core and not allowed (dkmsks.clock <- dkmsks.setup <- dkmsks <- dkmsks.core)",
        "dkmsks.clock: imports time at line 1 (file, clock or process access)",
    ]
    # `from dkmsks.core import missing` names a module only when one exists: here an attribute.
    bad, _ = impurities({**sources, "dkmsks.core.a": "import dkmsks.core.missing\n"}, packages,
                        allowed={"dkmsks": "", "dkmsks.setup": ""})
    assert "dkmsks.core.missing: no such module in the package (dkmsks.core.missing <- dkmsks.core.a)" in bad
