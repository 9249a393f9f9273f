"""DAG tests without a database: import errors, structure, policy, params validation."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.dags

DAGS = Path(__file__).resolve().parents[2] / "dags"
EXPECTED = {"dkmsks_ingest", "dkmsks_partition", "dkmsks_microbatch", "dkmsks_repartition", "dkmsks_maintenance"}


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
    spark_tasks = [t for t in dag.tasks if t.task_type == "SparkSubmitOperator"]
    assert len(spark_tasks) == 1
    for task in dag.tasks:
        assert task.retries >= 1
        assert task.pool == "dkmsks_writers"  # writers of the Delta tables never overlap
    for task in spark_tasks:
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
    assert "--repartition" in dagbag.dags["dkmsks_repartition"].get_task("repartition").application_args


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

    params = ParamsDict(copy.deepcopy(dagbag.dags["dkmsks_partition"].params))  # not the DAG's own
    params["method"], params["workers"] = "sop", 7  # non-default values are accepted
    assert params.validate()["method"] == "sop"
    params["method"] = "ps2"
    assert params.validate()["method"] == "ps2"
    with pytest.raises(ParamValidationError, match=message):
        params[name] = value


def test_partition_params_are_the_configs_declarations(dagbag):
    """The DAG writes its Params as plain literals (light parsing); they must say what the one
    declaration of the tuning parameters says: same names, defaults, choices and bounds."""
    from dkmsks.core.config import PARAMETERS

    params = dagbag.dags["dkmsks_partition"].params
    for p in PARAMETERS:
        schema = params.get_param(p.name).schema
        default = p.default.value if p.choices is not None else p.default
        assert params.get_param(p.name).value == default, p.name
        if p.choices is not None:
            assert schema["enum"] == p.choices, p.name
        else:
            assert schema["type"] == ("integer" if p.kind is int else "number"), p.name
            assert schema.get("minimum") == p.minimum and schema.get("maximum") == p.maximum, p.name
            assert schema.get("exclusiveMaximum") == p.below, p.name


def test_maintenance_runs_on_its_schedule_with_the_library_horizon(dagbag):
    """Daily by default; its horizon Param says what dkmsks.spark.retention says, and reaches
    the job as --retention-hours."""
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    from dkmsks.spark.retention import DEFAULT_HOURS, ENV

    dag = dagbag.dags["dkmsks_maintenance"]
    assert dag.timetable.expression == os.environ.get("AIRFLOW_VAR_DKMSKS_MAINTENANCE_SCHEDULE", "30 4 * * *")
    if ENV not in os.environ:
        assert dag.params["retention_hours"] == DEFAULT_HOURS
    job = dag.get_task("maintain")
    assert job.application_args[job.application_args.index("--retention-hours") + 1] == "{{ params.retention_hours }}"
    params = ParamsDict(copy.deepcopy(dag.params))
    with pytest.raises(ParamValidationError, match="retention_hours: 0 is less than the minimum of 1"):
        params["retention_hours"] = 0


def test_dag_files_import_nothing_heavy():
    import ast

    for path in DAGS.glob("*.py"):
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = {(n.module or "") if isinstance(n, ast.ImportFrom) else n.names[0].name for n in top}
        assert not {m for m in names if m.split(".")[0] in {"numpy", "pyspark", "pandas", "dkmsks", "scipy"}}, path


# --- periodic repartitioning: a cheap check before Spark, so a no-op never updates dkmsks://plan


def _add(path: str, rows: int | None, **max_values) -> dict:
    """An ``add`` action as Delta writes it; ``rows=None`` leaves out the statistics."""
    stats = None if rows is None else json.dumps({"numRecords": rows, "minValues": max_values,
                                                  "maxValues": max_values, "nullCount": {}})
    return {"add": {"path": path, "partitionValues": {}, "size": 100, "modificationTime": 0,
                    "dataChange": True, "stats": stats}}


def _write_log(table: Path, *commits: list[dict], checkpoint: tuple[int, list[dict]] | None = None) -> None:
    """A Delta log: commit files 0..n-1 (a metadata action first) and optionally a checkpoint."""
    log = table / "_delta_log"
    log.mkdir(parents=True)
    for version, actions in enumerate(commits):
        lines = [{"commitInfo": {"operation": "WRITE"}}, *actions]
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in lines) + "\n")
    if checkpoint is not None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        version, adds = checkpoint
        rows = [{"path": a["add"]["path"], "stats": a["add"]["stats"]} for a in adds]
        pq.write_table(pa.table({"add": pa.array([*rows, None]), "remove": pa.array([None] * (len(rows) + 1),
                                                                                    pa.struct([("path", pa.string())]))}),
                       log / f"{version:020d}.checkpoint.parquet")
        (log / "_last_checkpoint").write_text(json.dumps({"version": version, "size": len(rows) + 1}))


PLAN0 = _add("p0.parquet", 1, plan_version=0, method="dkm", workers=20, effective_t=0)
PLAN1 = _add("p1.parquet", 1, plan_version=1, method="kop", workers=3, effective_t=2)


def _ledger(*ts: int) -> list[dict]:
    return [_add(f"l{t}.parquet", 1, t=t, plan_version=0) for t in ts]


@pytest.fixture(scope="module")
def common(dagbag):
    import dkmsks_common  # on sys.path through the dagbag fixture, as in Airflow

    return dkmsks_common


def test_repartition_runs_spark_only_after_a_cheap_check(dagbag):
    from airflow.providers.standard.operators.python import ShortCircuitOperator

    dag = dagbag.dags["dkmsks_repartition"]
    check, job = dag.get_task("check_plan"), dag.get_task("repartition")
    assert isinstance(check, ShortCircuitOperator)
    assert job.upstream_task_ids == {"check_plan"}
    assert check.outlets == [] and [a.name for a in job.outlets] == ["dkmsks://plan"]


@pytest.mark.parametrize(
    ("case", "scheduled", "expected"),
    [
        ("no warehouse", True, "no partition plan yet"),
        ("empty plan table", True, "no partition plan yet"),
        ("empty plan table", False, "no partition plan yet"),
        ("plan, nothing processed since", True, "no timestamp processed since the current plan (it serves t > 0, "
                                                "last processed t = 0)"),
        ("plan, nothing processed since", False, None),  # a triggered run may bring other params
        ("plan, t=1..2 processed since", True, None),
        ("repartitioned at t=2, nothing since", True, "it serves t > 2, last processed t = 2"),
        ("checkpoint, then t=3 processed", True, None),
        ("checkpoint, nothing since", True, "it serves t > 2, last processed t = 2"),
        ("ledger file removed", True, "it serves t > 0, last processed t = 0"),
        ("statistics missing", True, None),  # cannot tell: the job runs and decides
        ("no ledger records anywhere", True, None),  # cannot tell
        ("journal, no ledger record yet", True, "it serves t > 0, last processed t = none"),
        ("journal, t=1..2 processed since", True, None),
        ("journal, nothing since the repartition", True, "it serves t > 2, last processed t = 2"),
    ],
)
def test_repartition_skip_reason_reads_the_delta_logs(common, tmp_path, case, scheduled, expected):
    plans, ledger = tmp_path / "tables" / "partition_plans", tmp_path / "tables" / "ledger"
    if case == "no warehouse":
        tmp_path = tmp_path / "absent"
    elif case == "empty plan table":
        _write_log(plans, [{"metaData": {"id": "x"}}])
    elif case == "plan, nothing processed since":
        _write_log(plans, [], [PLAN0])
        _write_log(ledger, [], _ledger(0))
    elif case == "plan, t=1..2 processed since":
        _write_log(plans, [], [PLAN0])
        _write_log(ledger, [], _ledger(0), _ledger(1, 2))
    elif case == "repartitioned at t=2, nothing since":
        _write_log(plans, [PLAN0], [PLAN1])
        _write_log(ledger, _ledger(0), _ledger(1, 2))
    elif case.startswith("checkpoint"):
        _write_log(plans, [PLAN0], [PLAN1], checkpoint=(1, [PLAN0, PLAN1]))
        later = [_ledger(3)] if case.endswith("t=3 processed") else []
        _write_log(ledger, _ledger(0), _ledger(1, 2), *later, checkpoint=(1, _ledger(0, 1, 2)))
    elif case == "ledger file removed":
        _write_log(plans, [PLAN0])
        _write_log(ledger, _ledger(0, 1), [{"remove": {"path": "l1.parquet", "dataChange": True}}])
    elif case == "statistics missing":
        _write_log(plans, [_add("p0.parquet", None)])
    elif case == "no ledger records anywhere":
        _write_log(plans, [PLAN0])
    elif case.startswith("journal"):
        journal = tmp_path / "tables" / "journal"
        _write_log(plans, [PLAN0], *([[PLAN1]] if "repartition" in case else []))
        metric = _add("m1.parquet", 4, t=7, worker=0)  # other records' timestamps do not count
        metric["add"]["partitionValues"] = {"record": "metric"}
        commits = [[{"metaData": {"id": "j", "partitionColumns": ["record"]}}], [metric]]
        if "processed" in case or "repartition" in case:
            ledger_rows = _add("j1.parquet", 2, t=2, run_through_t=2)
            ledger_rows["add"]["partitionValues"] = {"record": "ledger"}
            commits.append([ledger_rows])
        _write_log(journal, *commits)
    reason = common.repartition_skip_reason(tmp_path, scheduled=scheduled)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


def test_check_plan_short_circuits_a_scheduled_run_with_nothing_to_do(dagbag, tmp_path):
    from types import SimpleNamespace

    check = dagbag.dags["dkmsks_repartition"].get_task("check_plan")
    params = {"warehouse": str(tmp_path)}
    scheduled, manual = SimpleNamespace(run_type="scheduled"), SimpleNamespace(run_type="manual")
    assert check.python_callable(params=params, dag_run=scheduled) is False  # no plan yet
    _write_log(tmp_path / "tables" / "partition_plans", [PLAN0])
    _write_log(tmp_path / "tables" / "ledger", _ledger(0))
    assert check.python_callable(params=params, dag_run=scheduled) is False  # nothing processed since
    assert check.python_callable(params=params, dag_run=manual) is True
    (tmp_path / "tables" / "ledger" / "_delta_log" / f"{1:020d}.json").write_text(json.dumps(_ledger(1)[0]) + "\n")
    assert check.python_callable(params=params, dag_run=scheduled) is True
