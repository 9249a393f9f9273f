"""The reports' prose lives in templates: every block a report asks for exists and receives
every value it names, no block is left unused, and wrapped template lines are joined."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

import pytest

from dkmsks.bench import paper_report
from dkmsks.bench.prose import Prose

pytestmark = pytest.mark.unit

REPORTS = [(paper_report, "paper")]


def prose_calls(module: ModuleType) -> list[ast.Call]:
    tree = ast.parse(inspect.getsource(module))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "prose"]


def block_names(node: ast.expr) -> list[str]:
    """The block names a ``prose(...)`` call may ask for (a constant, or either side of an ``if``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return block_names(node.body) + block_names(node.orelse)
    raise AssertionError(f"block name at line {node.lineno} is neither a constant nor a choice of constants")


@pytest.mark.parametrize(("module", "template"), REPORTS)
def test_every_block_asked_for_exists_and_every_block_is_used(module: ModuleType, template: str) -> None:
    asked = {name for call in prose_calls(module) for name in block_names(call.args[0])}
    blocks = set(Prose.load(template).blocks)
    assert asked - blocks == set(), "asked for but not in the template"
    assert blocks - asked == set(), "in the template but never used"


@pytest.mark.parametrize(("module", "template"), REPORTS)
def test_every_block_receives_the_values_it_names(module: ModuleType, template: str) -> None:
    prose = Prose.load(template)
    for call in prose_calls(module):
        if any(kw.arg is None for kw in call.keywords):
            continue  # values passed as **mapping: checked when the report renders
        given = {kw.arg for kw in call.keywords}
        for name in block_names(call.args[0]):
            assert set(prose.blocks[name].get_identifiers()) <= given, (name, call.lineno)


def test_wrapped_lines_are_joined_and_elements_kept_apart() -> None:
    prose = Prose("preamble\n<!-- block: a -->\nOne $x\n  two.\n\n- a bullet\n  continued\n- another\n"
                  "| a | b |\n|---|---|\n| 1 | 2\n  more |\n<!-- block: b -->\n$$5\n")
    assert prose("a", x=1) == "One 1 two.\n\n- a bullet continued\n- another\n| a | b |\n|---|---|\n| 1 | 2 more |"
    assert prose("b") == "$5"
    with pytest.raises(KeyError, match="missing"):
        prose("c")
