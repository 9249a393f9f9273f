"""Lake.column_bound: a column's largest value from the Delta log's file statistics, with a
scan when a file has none."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dkmsks.storage.lake import Lake

pytestmark = pytest.mark.unit


def test_bound_from_statistics_equals_the_largest_value(tmp_path: Path) -> None:
    lake = Lake({"state": str(tmp_path / "state")})
    uri = lake.uris["state"]
    write_deltalake(uri, pa.table({"t": pa.array([], pa.int64())}), mode="append")
    assert lake.column_bound("state", "t") is None, "no data file: no bound"
    write_deltalake(uri, pa.table({"t": [3, 9, 4]}), mode="append")
    write_deltalake(uri, pa.table({"t": [-2, 7]}), mode="append")
    assert lake.column_bound("state", "t") == 9
    assert lake.column_bound("state", "t", version=0) is None
    write_deltalake(uri, pa.table({"t": [11]}), mode="append")
    assert lake.column_bound("state", "t") == 11
    assert lake.column_bound("state", "t", version=2) == 9


def test_bound_without_statistics_scans(tmp_path: Path) -> None:
    lake = Lake({"state": str(tmp_path / "state")})
    uri = lake.uris["state"]
    # A table that keeps no column statistics: the bound must come from the rows.
    write_deltalake(uri, pa.table({"t": [5, 12, 1]}), mode="append",
                    configuration={"delta.dataSkippingNumIndexedCols": "0"})
    actions = pa.RecordBatchReader.from_stream(lake.table("state").get_add_actions(flatten=True)).read_all()
    assert "max.t" not in actions.column_names or actions.column("max.t").null_count == actions.num_rows
    assert lake.column_bound("state", "t") == 12
