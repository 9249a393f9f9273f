"""Shared fixtures: real-data slices (skipped, with the reason, when ../shared/data is absent)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dkmsks.core.model import KeywordSets, Objects, Vocabulary

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("DKMSKS_DATA_DIR", REPO.parent / "shared" / "data"))
PLACE_FILE = DATA_DIR / "wof_simplegeo_us" / "objects.tsv.gz"
NAMES_FILE = DATA_DIR / "wof_simplegeo_us" / "objects_with_names.tsv.gz"


def require_real_data(path: Path = PLACE_FILE) -> Path:
    if not path.exists():
        pytest.skip(f"real data file {path} is absent (set DKMSKS_DATA_DIR to the shared data folder)")
    return path


@lru_cache(maxsize=4)
def _head(path: str, n: int) -> pd.DataFrame:
    return pd.read_csv(path, sep="\t", nrows=n, dtype={"id": np.int64, "keywords": str})


def real_objects(n: int, path: Path = PLACE_FILE) -> tuple[Objects, Vocabulary]:
    """The first ``n`` rows of a real objects file, in stream order, as core columns."""
    require_real_data(path)
    df = _head(str(path), n)
    vocab = Vocabulary()
    rows = [[vocab.id_of(w) for w in kws.split(" ")] for kws in df["keywords"]]
    objects = Objects(
        df["id"].to_numpy(np.int64),
        df["x"].to_numpy(np.float64),
        df["y"].to_numpy(np.float64),
        KeywordSets.from_lists(rows),
        df["t"].to_numpy(np.int64),
    )
    return objects, vocab


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261125)



@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from dkmsks.spark.session import build_session

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = build_session(warehouse, app_name="dkmsks-tests", master="local[2]", shuffle_partitions=4)
    yield session
    session.stop()


@pytest.fixture
def fresh_db(spark, request):
    """A database of its own per test, dropped afterwards, selected as current."""
    name = "t_" + request.node.name.lower().replace("[", "_").replace("]", "").replace("-", "_")[:60]
    spark.sql("CREATE DATABASE IF NOT EXISTS IDENTIFIER(:db)", args={"db": name})
    spark.catalog.setCurrentDatabase(name)
    yield name
    spark.catalog.setCurrentDatabase("default")
    spark.sql("DROP DATABASE IF EXISTS IDENTIFIER(:db) CASCADE", args={"db": name})
