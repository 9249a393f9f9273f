"""KeywordSets.take against a list-of-lists reference (rows repeated, empty, negative)."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.model import KeywordSets

pytestmark = pytest.mark.unit


def test_take_equals_the_rows_taken_one_by_one() -> None:
    rng = np.random.default_rng(11)
    lists = [sorted(rng.choice(60, int(rng.integers(0, 5)), replace=False).tolist()) for _ in range(400)]
    sets = KeywordSets.from_lists(lists)
    for size in (0, 1, 7, 400, 1000):
        rows = rng.integers(-400, 400, size)
        got = sets.take(rows)
        assert len(got) == size
        assert [got.row(i).tolist() for i in range(size)] == [lists[r] for r in rows.tolist()]
        assert got.ptr[0] == 0 and got.ids.dtype == np.int32
    empty_rows = [i for i, row in enumerate(lists) if not row][:3]
    assert sets.take(empty_rows).ids.shape[0] == 0


@pytest.mark.parametrize("row", [400, -401])
def test_take_out_of_range_raises(row: int) -> None:
    sets = KeywordSets.from_lists([[1, 2]] * 400)
    with pytest.raises(IndexError):
        sets.take([0, row])
