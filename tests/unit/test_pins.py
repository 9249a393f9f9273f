"""One version of each package: pyproject.toml's requirements agree with requirements.lock, the
exact pins (the ``dev`` and ``airflow`` extras) equal the lock's and its ranges admit them. The
``dev`` extra once pinned pytest 9.2.0 beside the lock's 9.1.1, the version the suite's xdist
groups need (tests/conftest.py; tests/unit/test_xdist_groups.py checks that they hold)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _locked() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {}).values()
    return [Requirement(text) for text in [*project["dependencies"], *(r for extra in extras for r in extra)]]


def test_every_requirement_of_pyproject_admits_the_locked_version():
    locked = _locked()
    wrong = {}
    for req in _requirements():
        version = locked.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            wrong[str(req)] = version
    assert wrong == {}, f"pyproject.toml and requirements.lock disagree (requirement: locked version): {wrong}"

