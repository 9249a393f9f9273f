"""DAG tests without a database: import errors, structure, policy, params validation."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.dags

DAGS = Path(__file__).resolve().parents[2] / "dags"
EXPECTED = {"dkmsks_ingest", "dkmsks_partition", "dkmsks_microbatch", "dkmsks_repartition"}


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    os.environ["AIRFLOW_HOME"] = str(tmp_path_factory.mktemp("airflow_home"))
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
    # Airflow 3's bundle-aware DagBag puts the bundle (dags folder) on sys.path the same way,
    # which is what lets the DAG files share dags/dkmsks_common.py.
    sys.path.insert(0, str(DAGS))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    yield bag
    sys.path.remove(str(DAGS))


def test_no_import_errors_and_every_dag_is_there(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dags) == EXPECTED


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_policy(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert dag.catchup is False
    assert dag.max_active_runs == 1
    assert "dkmsks" in dag.tags
    assert dag.doc_md and dag.doc_md.strip().startswith("###")
    assert dag.start_date.tzinfo is not None
    for task in dag.tasks:
        assert task.retries >= 1
        assert task.pool == "dkmsks_writers"  # writers of the Delta tables never overlap
        assert task._conn_id == "dkmsks_spark"  # local[2] or spark://, by changing only the connection
        assert Path(task.application).is_file(), task.application
        assert Path(task.application).parent.name == "spark_apps"
        assert "--run-id" in task.application_args and "{{ run_id }}" in task.application_args


def test_assets_chain_ingestion_to_partitioning_to_microbatches(dagbag):
    ingest = dagbag.dags["dkmsks_ingest"].tasks[0]
    partition = dagbag.dags["dkmsks_partition"]
    micro = dagbag.dags["dkmsks_microbatch"]
    assert [a.name for a in ingest.outlets] == ["dkmsks://landing"]
    assert "dkmsks://landing" in str(partition.timetable.asset_condition)
    assert [a.name for a in partition.tasks[0].outlets] == ["dkmsks://plan"]
    assert "dkmsks://plan" in str(micro.timetable.asset_condition)
    assert "--if-absent" in partition.tasks[0].application_args  # a retry never re-partitions
    assert "--repartition" in dagbag.dags["dkmsks_repartition"].tasks[0].application_args


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("method", "quadtree", "Invalid input for param method: 'quadtree' is not one of"),
        ("workers", 0, "Invalid input for param workers: 0 is less than the minimum of 1"),
        ("gamma2", -1, "Invalid input for param gamma2: -1 is less than the minimum of 0"),
        ("new_cost", "free", "Invalid input for param new_cost: 'free' is not one of"),
        ("workers", "many", "Invalid input for param workers: 'many' is not of type 'integer'"),
    ],
)
def test_partition_params_refuse_bad_values_with_clear_messages(dagbag, name, value, message):
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    params = ParamsDict(dagbag.dags["dkmsks_partition"].params)
    params["method"], params["workers"] = "sop", 7  # non-default values are accepted
    assert params.validate()["method"] == "sop"
    with pytest.raises(ParamValidationError, match=message):
        params[name] = value


def test_dag_files_import_nothing_heavy():
    import ast

    for path in DAGS.glob("*.py"):
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = {(n.module or "") if isinstance(n, ast.ImportFrom) else n.names[0].name for n in top}
        assert not {m for m in names if m.split(".")[0] in {"numpy", "pyspark", "pandas", "dkmsks", "scipy"}}, path
