"""Every test is in a test layer (its pytest marker; the library's import layers are
tests/unit/test_layers.py): the hooks of tests/conftest.py put a collected test that carries
none of the layer markers in every layer and fail it there, naming the fix (``-m unit`` would
otherwise silently never run it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from conftest import LAYERS, pytest_collection_modifyitems, pytest_runtest_setup, without_a_layer

pytestmark = pytest.mark.unit

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


class _Item:
    """What the hooks use of a collected test: its node id, its markers (its own and those of its
    module and class) and its stash."""

    def __init__(self, nodeid: str, *marks: str) -> None:
        self.nodeid = nodeid
        self.stash = pytest.Stash()
        self._marks = [getattr(pytest.mark, name).mark for name in marks]

    def iter_markers(self):
        return iter(self._marks)

    def add_marker(self, marker) -> None:
        self._marks.append(getattr(pytest.mark, marker).mark if isinstance(marker, str) else marker.mark)


def test_a_test_without_a_layer_is_found_whatever_else_it_carries():
    items = [_Item("tests/unit/test_a.py::test_marked", "unit"),
             _Item("tests/unit/test_b.py::test_realdata_only", "realdata", "parametrize"),
             _Item("tests/spark/test_c.py::test_two_layers", "spark", "realdata"),
             _Item("tests/unit/test_d.py::test_bare")]
    assert [item.nodeid for item in without_a_layer(items)] == [
        "tests/unit/test_b.py::test_realdata_only", "tests/unit/test_d.py::test_bare"]


def test_a_test_without_a_layer_is_in_every_layer_and_fails_there_naming_the_fix():
    marked, bare = _Item("tests/unit/test_a.py::test_marked", "unit"), _Item("tests/unit/test_d.py::test_bare")
    pytest_collection_modifyitems(None, [marked, bare])
    assert {mark.name for mark in bare.iter_markers()} >= LAYERS  # whichever -m runs, it is selected
    assert [mark.name for mark in marked.iter_markers()] == ["unit"]
    with pytest.raises(pytest.fail.Exception, match=r"test_bare carries no layer marker .*pytestmark = "):
        pytest_runtest_setup(bare)
    pytest_runtest_setup(marked)  # passes


def test_every_layer_is_a_registered_marker():
    markers = tomllib.loads(PYPROJECT.read_text())["tool"]["pytest"]["ini_options"]["markers"]
    registered = {line.split(":", 1)[0].strip() for line in markers}
    assert registered >= LAYERS, sorted(LAYERS - registered)
