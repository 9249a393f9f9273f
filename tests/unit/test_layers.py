"""Imports flow one way through the library's layers (README "Layout", docs/design.md §4):
core <- io <- storage <- spark <- jobs <- commands. A module imports nothing of a layer above
its own, not even for type checking or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

LIB = Path(__file__).resolve().parents[2] / "lib" / "dkmsks"
LAYERS = ("core", "io", "storage", "spark", "jobs", "commands")


def layers_imported(source: str) -> set[str]:
    """The layers of :data:`LAYERS` that ``source`` imports from, anywhere in the module."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "dkmsks" and len(parts) > 1 and parts[1] in LAYERS:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("layer", LAYERS[:-1])
def test_no_module_imports_a_layer_above_its_own(layer):
    above = set(LAYERS[LAYERS.index(layer) + 1:])
    files = sorted((LIB / layer).rglob("*.py"))
    assert files, f"no modules under {LIB / layer}"
    wrong = {str(f.relative_to(LIB)): sorted(layers_imported(f.read_text(encoding="utf-8")) & above)
             for f in files}
    assert {name: found for name, found in wrong.items() if found} == {}


def test_the_checker_sees_imports_for_type_checking_and_inside_functions():
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dkmsks.spark.bridge import X\n"
              "def f():\n    import dkmsks.jobs.follow\nfrom dkmsks.core import model\n")
    assert layers_imported(source) == {"spark", "jobs", "core"}
