"""The reports' prose lives in templates: every block a report asks for exists and receives
every value it names, no block is left unused, and wrapped template lines are joined; every
generated section of the docs names a benchmark that still writes it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from dkmsks.bench.prose import Prose
from dkmsks.commands.bench import BENCHMARKS

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PACKAGE, SCRIPTS = REPO / "lib" / "dkmsks" / "bench", REPO / "bench"
#: Report code (read, not imported: the pipeline's imports Spark) and its template: the
#: package's benchmarks, then the scripts in bench/.
REPORTS = [(PACKAGE / f"{module}.py", PACKAGE / "templates" / f"{template}.md")
           for module, template in (("paper_report", "paper"), ("core", "core"), ("pipeline", "pipeline"),
                                     ("freshness", "freshness"), ("serve", "serve"),
                                     ("connect", "connect"))]
REPORTS += [(SCRIPTS / f"{name}.py", SCRIPTS / "templates" / f"{name}.md") for name in ("kernel", "memory", "rust")]
IDS = [source.stem for source, _ in REPORTS]


#: Reports written by more than one module: the others, read with it.
PARTS = {"paper_report.py": ("paper_notes.py",)}


def source_tree(module: Path) -> ast.Module:
    files = [module, *(module.with_name(name) for name in PARTS.get(module.name, ()))]
    return ast.Module(body=[stmt for f in files for stmt in ast.parse(f.read_text()).body], type_ignores=[])


def prose_calls(module: Path) -> list[ast.Call]:
    return [n for n in ast.walk(source_tree(module))
            if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "prose"]


def block_names(node: ast.expr) -> list[str]:
    """The block names a ``prose(...)`` call asks for: a constant, or either side of an ``if``;
    none when the name is a variable (a loop over pairs of constants)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return block_names(node.body) + block_names(node.orelse)
    return []


def string_constants(module: Path) -> set[str]:
    return {n.value for n in ast.walk(source_tree(module)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def status_blocks(module: Path) -> set[str]:
    """The blocks ``prose.status(ok)`` names, when the report calls it."""
    calls = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "status"
                and getattr(n.func.value, "id", "") == "prose" for n in ast.walk(source_tree(module)))
    return {"status.met", "status.not_met"} if calls else set()


@pytest.mark.parametrize(("module", "template"), REPORTS, ids=IDS)
def test_every_block_asked_for_exists_and_every_block_is_used(module: Path, template: Path) -> None:
    asked = {name for call in prose_calls(module) for name in block_names(call.args[0])} | status_blocks(module)
    blocks = set(Prose.read(template).blocks)
    assert asked - blocks == set(), "asked for but not in the template"
    assert blocks - string_constants(module) - status_blocks(module) == set(), \
        "in the template but never named by the report"


@pytest.mark.parametrize(("module", "template"), REPORTS, ids=IDS)
def test_every_block_receives_the_values_it_names(module: Path, template: Path) -> None:
    prose = Prose.read(template)
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


def test_every_generated_section_of_the_docs_names_a_benchmark_that_writes_it() -> None:
    """A section between ``<!-- begin: WRITER (generated ...) -->`` markers is rewritten by
    ``dkm bench NAME`` (``freshness-10m``: the freshness benchmark at another size) or by a
    script in bench/; a section whose benchmark is gone is a record, without markers."""
    sections = [(doc.name, writer) for doc in sorted((REPO / "docs").glob("*.md"))
                for writer in re.findall(r"<!-- begin: (\S+(?: \S+)*?) \(generated", doc.read_text())]
    assert sections
    for doc, writer in sections:
        name = writer.removeprefix("dkm bench ")
        if name != writer:
            assert re.sub(r"-\d+[km]$", "", name) in BENCHMARKS, (doc, writer)
        else:
            assert writer.startswith("bench/") and (REPO / writer).is_file(), (doc, writer)
