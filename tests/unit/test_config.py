"""The one declaration of the tuning parameters: validation, round trips, derived flags."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from dkmsks.core.config import DEFAULTS, PARAMETERS, Method, NewCost, PartitionConfig, thread_count
from dkmsks.core.engine import build_engine
from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import KeywordSets, Objects, SubscriptionEvents
from dkmsks.core.stats import ObjectStatistics
from dkmsks.flags import add_partition_flags, config_from_args

pytestmark = pytest.mark.unit


def test_defaults_are_the_papers_and_the_projects():
    assert (DEFAULTS.method, DEFAULTS.workers, DEFAULTS.theta, DEFAULTS.gamma1, DEFAULTS.gamma2) == \
        (Method.DKM, 20, 20, 100_000, 20)
    assert DEFAULTS.new_cost is NewCost.LIVE and DEFAULTS.grid == 16384 and DEFAULTS.t0 == 0


@pytest.mark.parametrize(("changes", "message"), [
    ({"workers": 0}, "workers must be at least 1, got 0"),
    ({"workers": 2.5}, "workers must be an integer, got 2.5"),
    ({"theta": "x"}, "theta must be an integer, got 'x'"),
    ({"gamma2": -1}, "gamma2 must be at least 0, got -1"),
    ({"grid": 32769}, "grid must be at most 32768"),
    ({"method": "grid"}, "method must be one of kop, sop, dkm, ps2, got 'grid'"),
    ({"new_cost": "guess"}, "new_cost must be one of live, paper, got 'guess'"),
    ({"workers": True}, "workers must be a number, got True"),
])
def test_bad_values_are_refused_naming_the_parameter(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PartitionConfig(**changes)


def test_strings_from_forms_and_flags_are_converted():
    config = PartitionConfig(method="SOP", workers="7", new_cost="paper", gamma2="0")
    assert (config.method, config.workers, config.new_cost, config.gamma2) == (Method.SOP, 7, NewCost.PAPER, 0)


def test_json_round_trip_and_tolerant_reading_of_older_plans():
    config = PartitionConfig(method="kop", workers=3, theta=4, grid=64, t0=2, new_cost="paper")
    assert PartitionConfig.from_json(config.to_json()) == config
    # A plan written before new_cost existed: missing keys take the defaults, unknown ones are ignored.
    old = PartitionConfig.from_dict({"theta": 5, "gamma1": 7, "gamma2": 1, "grid": 8, "t0": 0, "retired": 1})
    assert (old.theta, old.gamma1, old.new_cost) == (5, 7, NewCost.LIVE)


def test_flags_are_derived_from_the_declarations():
    parser = argparse.ArgumentParser()
    add_partition_flags(parser, required=("method",))
    args = parser.parse_args(["--method", "sop", "--new-cost", "paper", "--gamma1", "9"])
    assert config_from_args(args) == PartitionConfig(method="sop", new_cost="paper", gamma1=9)
    assert {a.dest for a in parser._actions} >= {p.name for p in PARAMETERS}
    with pytest.raises(SystemExit):
        parser.parse_args([])  # --method is required here
    with pytest.raises(SystemExit):
        parser.parse_args(["--method", "grid"])  # not a choice


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "2", None])
def test_a_thread_count_is_a_whole_number_of_at_least_one_and_the_refusal_names_the_fix(bad):
    with pytest.raises(ValueError, match=r"workers must be a number of threads, at least 1; .*usable_cores\(\)"):
        thread_count(bad)


def test_the_core_takes_its_threads_from_the_caller_and_counts_none_itself():
    # -1 once meant "one per core", which the core counted by reading /proc: now the caller's.
    objects = Objects(np.arange(3), np.zeros(3), np.zeros(3), KeywordSets.from_lists([[0]] * 3), np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="workers must be a number of threads"):
        StaticKnnIndex.build(objects, 1, workers=-1)
    with pytest.raises(ValueError, match="workers must be a number of threads"):
        ObjectStatistics.build(objects, 1, workers=-1)
    with pytest.raises(ValueError, match="threads must be a number of threads"):
        none = np.zeros(0, np.int64)
        events = SubscriptionEvents(none.astype(np.int8), none, none + 0.0, none + 0.0, KeywordSets.from_lists([]),
                                    none.astype(np.int32), none)
        build_engine(DEFAULTS, objects, events, threads=0)
    assert thread_count(np.int64(3)) == 3 and StaticKnnIndex.build(objects, 1, workers=3).workers == 3
