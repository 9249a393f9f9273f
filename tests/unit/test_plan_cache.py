"""The kept O_init statistics (storage/plan_cache.py) are used only when they are what they say:
the same objects table, the same O_init count, the same format; otherwise rebuilt, never trusted."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.model import Objects, Vocabulary
from dkmsks.core.stats import ObjectStatistics
from dkmsks.storage import plan_cache

pytestmark = pytest.mark.unit


def _saved(tmp_path, rng):
    objects = Objects.build(np.arange(50), rng.uniform(0, 1, 50), rng.uniform(0, 1, 50),
                            [[int(rng.integers(0, 3))] for _ in range(50)], np.zeros(50, np.int64))
    stats = ObjectStatistics.build(objects, 3, workers=2)
    path = tmp_path / "oinit-stats-t0_0.npz"
    plan_cache._save(path, stats, ["cafe", "bar", "park"], "table-1")
    return path, stats


def test_a_kept_file_loads_with_its_words_numbered_as_saved(tmp_path, rng):
    path, stats = _saved(tmp_path, rng)
    vocab = Vocabulary()
    got = plan_cache._load(path, vocab, ("table-1", 50))
    assert got is not None and vocab.words == ["cafe", "bar", "park"]
    np.testing.assert_array_equal(got.keyword_counts([0, 1, 2]), stats.keyword_counts([0, 1, 2]))
    assert not list(tmp_path.glob("*.tmp"))  # written aside, then renamed


@pytest.mark.parametrize("identity, reason", [
    (("table-2", 50), "built for another O_init"),  # the table was dropped and created again
    (("table-1", 51), "built for another O_init"),  # more objects with t <= t0
])
def test_a_file_for_another_oinit_is_refused(tmp_path, rng, capsys, identity, reason):
    path, _ = _saved(tmp_path, rng)
    vocab = Vocabulary()
    assert plan_cache._load(path, vocab, identity) is None
    assert reason in capsys.readouterr().err and len(vocab) == 0


def test_a_damaged_or_foreign_format_file_is_refused(tmp_path, rng, capsys):
    path, _ = _saved(tmp_path, rng)
    with np.load(path, allow_pickle=False) as saved:
        arrays = dict(saved)
    np.savez(path, **{**arrays, "format": np.array(plan_cache.FORMAT + 1)})
    assert plan_cache._load(path, Vocabulary(), ("table-1", 50)) is None
    path.write_bytes(b"PK\x03\x04 truncated")
    assert plan_cache._load(path, Vocabulary(), ("table-1", 50)) is None
    np.save(path.with_suffix(".npy"), np.array([object()], dtype=object), allow_pickle=True)
    path.with_suffix(".npy").rename(path)  # pickled objects are never loaded
    assert plan_cache._load(path, Vocabulary(), ("table-1", 50)) is None
    assert capsys.readouterr().err.count("plan cache: ignoring") == 3
