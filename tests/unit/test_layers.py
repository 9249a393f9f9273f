"""Every test is in a layer: the collection hook of tests/conftest.py refuses a suite in which
a collected test carries none of the layer markers (``-m unit`` would silently never run it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from conftest import LAYERS, pytest_collection_modifyitems, without_a_layer

pytestmark = pytest.mark.unit

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


class _Item:
    """What the hook reads of a collected test: its node id and its markers (its own and
    those of its module and class)."""

    def __init__(self, nodeid: str, *marks: str) -> None:
        self.nodeid = nodeid
        self._marks = [getattr(pytest.mark, name) for name in marks]

    def iter_markers(self):
        return iter(mark.mark for mark in self._marks)

    def add_marker(self, marker) -> None:
        self._marks.append(marker)


def test_a_test_without_a_layer_is_found_whatever_else_it_carries():
    items = [_Item("tests/unit/test_a.py::test_marked", "unit"),
             _Item("tests/unit/test_b.py::test_realdata_only", "realdata", "parametrize"),
             _Item("tests/spark/test_c.py::test_two_layers", "spark", "realdata"),
             _Item("tests/unit/test_d.py::test_bare")]
    assert without_a_layer(items) == ["tests/unit/test_b.py::test_realdata_only", "tests/unit/test_d.py::test_bare"]


def test_the_collection_hook_refuses_a_suite_with_an_unmarked_test_and_names_it():
    with pytest.raises(pytest.UsageError, match=r"1 collected tests carry no layer marker(.|\n)*test_bare"):
        pytest_collection_modifyitems(None, [_Item("tests/unit/test_a.py::test_marked", "unit"),
                                             _Item("tests/unit/test_d.py::test_bare")])
    pytest_collection_modifyitems(None, [_Item("tests/unit/test_a.py::test_marked", "unit")])  # passes


def test_every_layer_is_a_registered_marker():
    markers = tomllib.loads(PYPROJECT.read_text())["tool"]["pytest"]["ini_options"]["markers"]
    registered = {line.split(":", 1)[0].strip() for line in markers}
    assert registered >= LAYERS, sorted(LAYERS - registered)
