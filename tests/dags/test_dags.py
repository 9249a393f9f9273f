"""DAG tests without a database: import errors, structure, policy, params validation."""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

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
        # The run's warehouse (asset event or Param), recorded in the task's asset events.
        assert task.application_args[:2] == ["--warehouse", "{{ run_warehouse(triggering_asset_events, params) }}"]
        assert task._post_execute_hook.__name__ == "record_warehouse"
        assert task.conf["spark.driver.memory"] == "{{ params.driver_memory }}"
    assert dag.user_defined_macros["run_warehouse"].__name__ == "run_warehouse"
    assert {"warehouse", "driver_memory"} <= set(dag.params)


def test_assets_chain_ingestion_to_partitioning_to_microbatches(dagbag):
    ingest = dagbag.dags["dkmsks_ingest"].get_task("ingest")
    partition = dagbag.dags["dkmsks_partition"]
    micro = dagbag.dags["dkmsks_microbatch"]
    assert [a.name for a in ingest.outlets] == ["dkmsks://landing"]
    assert "dkmsks://landing" in str(partition.timetable.asset_condition)
    job = partition.get_task("partition")
    assert [a.name for a in job.outlets] == ["dkmsks://plan"]
    assert "dkmsks://plan" in str(micro.timetable.asset_condition)
    assert "--if-absent" in job.application_args  # a retry never re-partitions
    assert "--repartition" in dagbag.dags["dkmsks_repartition"].get_task("repartition").application_args
    # Only the Spark jobs update assets: a check that skips its job means no asset event.
    for dag in dagbag.dags.values():
        for task in dag.tasks:
            assert not task.outlets or task.task_type == "SparkSubmitOperator", (dag.dag_id, task.task_id)


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
    """Daily by default; its horizon Param says what dkmsks.storage.retention says, and reaches
    the job as --retention-hours."""
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    from dkmsks.storage.retention import DEFAULT_HOURS, ENV

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


@pytest.fixture(scope="module")
def common(dagbag):
    import dkmsks_common  # on sys.path through the dagbag fixture, as in Airflow

    return dkmsks_common



# --- the Spark-free checks before each Spark job: dkmsks.storage.progress on real Delta tables


def _warehouse(root: Path, *, plans: tuple[tuple[int, int], ...] = (), state_plan: int | None = None,
               objects: tuple[int, ...] = (), events: tuple[int, ...] = ()):
    """A warehouse's tables written with delta-rs (tests/lake_tables.py): ``plans`` as
    ``(plan_version, effective_t)``, a state row of plan ``state_plan``, and objects and
    subscription events at the given timestamps."""
    import pyarrow as pa

    from dkmsks.storage import tables
    from dkmsks.warehouse import Warehouse
    from lake_tables import create_tables

    warehouse = Warehouse(root)
    lake = create_tables(warehouse)
    for version, effective_t in plans:
        lake.append(tables.PLANS, pa.table({
            "plan_version": [version], "method": ["kop"], "workers": [1], "params": [json.dumps({"t0": 0})],
            "subsets": [1], "subscriptions": [1], "o_init": [1], "effective_t": [effective_t],
            "meta_json": [json.dumps({"space": [0.0, 0.0, 1.0, 1.0]})]}))
    if state_plan is not None:
        lake.append(tables.STATE, pa.table({
            "plan_version": [state_plan], "worker": pa.array([0], pa.int32()), "sub_id": [1], "x": [0.5], "y": [0.5],
            "keywords": [["cafe"]], "k": pa.array([1], pa.int32()), "registered_t": [0], "weight": [1], "subset": [0],
            "object_ids": pa.array([[]], pa.list_(pa.int64())), "d2": pa.array([[]], pa.list_(pa.float64())),
            "updated_t": [0]}))
    _land(warehouse, tables.OBJECTS, *objects)
    _land(warehouse, tables.EVENTS, *events)
    return warehouse


def _land(warehouse, name: str, *ts: int) -> None:
    """Rows at timestamps ``ts`` appended to landing table ``name`` (objects or subscription events)."""
    import pyarrow as pa

    from dkmsks.storage.lake import Lake

    if ts:
        n = len(ts)
        Lake.of(warehouse).append(name, pa.table({
            "op": ["insert"] * n, "id": list(ts), "x": [0.5] * n, "y": [0.5] * n, "keywords": [["cafe"]] * n,
            "k": pa.array([1] * n, pa.int32()), "t": list(ts)}))


def _processed(warehouse, *ts: int) -> None:
    """A run's journal commit (:func:`dkmsks.storage.journal.commit`): the ledger records of
    ``ts`` and a metric record of a later ``t``, which does not count as processed."""
    import pyarrow as pa

    from dkmsks.storage.journal import commit
    from dkmsks.storage.lake import Lake

    n = len(ts) + 1
    commit(Lake.of(warehouse), pa.table({"record": ["ledger"] * len(ts) + ["metric"], "t": [*ts, max(ts) + 5],
                                         "plan_version": [0] * n, "run_id": ["test"] * n}), max(ts))


def _checkpoint(warehouse, *names: str) -> None:
    """A checkpoint of each table: a reader then starts from it, not from the first commit."""
    from deltalake import DeltaTable

    for name in names:
        DeltaTable(str(warehouse.table_path(name))).create_checkpoint()


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
        ("no plan", True, "no partition plan yet"),
        ("no plan", False, "no partition plan yet"),
        ("plan, nothing processed since", True, "no timestamp processed since the current plan (it serves t > 0, "
                                                "last processed t = 0)"),
        ("plan, nothing processed since", False, None),  # a triggered run may bring other params
        ("plan, t=1..2 processed since", True, None),
        ("plan, no ledger record yet", True, "it serves t > 0, last processed t = none"),
        ("plan, no journal table", True, None),  # cannot tell: the job runs and decides
        ("repartitioned at t=2, nothing since", True, "it serves t > 2, last processed t = 2"),
        ("repartitioned at t=2, nothing since", False, None),
        ("repartitioned at t=2, t=3 processed", True, None),
        ("checkpoint, nothing since", True, "it serves t > 2, last processed t = 2"),
        ("checkpoint, then t=3 processed", True, None),
        # The new plan is written, the state not yet switched to it: the job redoes the switch.
        ("repartition interrupted before the switch", True, None),
    ],
)
def test_repartition_skip_reason_reads_the_delta_logs(tmp_path, case, scheduled, expected):
    from dkmsks.storage.progress import repartition_skip_reason
    from dkmsks.warehouse import Warehouse

    if case == "no warehouse":
        warehouse = Warehouse(tmp_path / "absent")
    elif case == "no plan":
        warehouse = _warehouse(tmp_path)
    elif case.startswith("plan"):
        warehouse = _warehouse(tmp_path, plans=((0, 0),), state_plan=0)
        if "no ledger" not in case:
            _processed(warehouse, 0)
        if "t=1..2" in case:
            _processed(warehouse, 1, 2)
        if "no journal" in case:
            shutil.rmtree(warehouse.table_path("journal"))
    else:  # a repartitioning at t = 2, switched to plan 1 unless interrupted
        warehouse = _warehouse(tmp_path, plans=((0, 0), (1, 2)), state_plan=0 if "interrupted" in case else 1)
        _processed(warehouse, 0)
        _processed(warehouse, 1, 2)
        if case.startswith("checkpoint"):
            _checkpoint(warehouse, "partition_plans", "knn_state", "journal")
        if "t=3" in case:
            _processed(warehouse, 3)
    reason = repartition_skip_reason(warehouse, scheduled=scheduled)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


def test_check_plan_short_circuits_a_scheduled_run_with_nothing_to_do(dagbag, tmp_path):
    check = dagbag.dags["dkmsks_repartition"].get_task("check_plan")
    params = {"warehouse": str(tmp_path)}
    scheduled, manual = SimpleNamespace(run_type="scheduled"), SimpleNamespace(run_type="manual")
    assert check.python_callable(params=params, dag_run=scheduled) is False  # no plan yet
    warehouse = _warehouse(tmp_path, plans=((0, 0),), state_plan=0)
    _processed(warehouse, 0)
    assert check.python_callable(params=params, dag_run=scheduled) is False  # nothing processed since
    assert check.python_callable(params=params, dag_run=manual) is True
    _processed(warehouse, 1)
    assert check.python_callable(params=params, dag_run=scheduled) is True


def test_microbatch_runs_spark_only_after_a_cheap_check(dagbag):
    from airflow.providers.standard.operators.python import ShortCircuitOperator

    dag = dagbag.dags["dkmsks_microbatch"]
    check, job = dag.get_task("check_pending"), dag.get_task("microbatch")
    assert isinstance(check, ShortCircuitOperator)
    assert job.upstream_task_ids == {"check_pending"}
    assert check.outlets == [] and [a.name for a in job.outlets] == ["dkmsks://results"]


@pytest.mark.parametrize(
    ("case", "scheduled", "expected"),
    [
        ("no warehouse", True, "no partition plan yet"),
        ("no warehouse", False, None),  # by hand or by a plan event: the job runs and decides
        ("plan, t=1..3 landed, 0 processed", True, None),
        ("plan, t=1..3 landed, 3 processed", True, "no timestamp landed after the last processed one (t = 3; "
                                                   "newest landed t = 3)"),
        ("plan, t=1..3 landed, 3 processed", False, None),
        ("plan, an event at t=4 landed, 3 processed", True, None),
        ("plan, nothing landed, 0 processed", True, "(t = 0; newest landed t = none)"),
        ("plan, no ledger record yet", True, None),  # the first run did not finish: the job decides
    ],
)
def test_microbatch_skip_reason_reads_the_delta_logs(tmp_path, case, scheduled, expected):
    from dkmsks.storage.progress import microbatch_skip_reason
    from dkmsks.warehouse import Warehouse

    if case == "no warehouse":
        warehouse = Warehouse(tmp_path / "absent")
    elif "nothing landed" in case:
        warehouse = _warehouse(tmp_path, plans=((0, 0),), state_plan=0)
        _processed(warehouse, 0)
    else:
        warehouse = _warehouse(tmp_path, plans=((0, 0),), state_plan=0, objects=(0, 1, 2, 3),
                               events=(0, 4) if "t=4" in case else (0, 2))
        if "no ledger" not in case:
            _processed(warehouse, 0)
        if "3 processed" in case:
            _processed(warehouse, 1, 2, 3)
    reason = microbatch_skip_reason(warehouse, scheduled=scheduled)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


def test_check_pending_skips_a_scheduled_run_on_an_up_to_date_warehouse(dagbag, tmp_path):
    check = dagbag.dags["dkmsks_microbatch"].get_task("check_pending")
    params = {"warehouse": str(tmp_path)}
    scheduled, manual = SimpleNamespace(run_type="scheduled"), SimpleNamespace(run_type="manual")
    assert check.python_callable(params=params, dag_run=scheduled) is False  # no plan yet
    assert check.python_callable(params=params, dag_run=manual) is True
    warehouse = _warehouse(tmp_path, plans=((0, 0),), state_plan=0, objects=(0, 1), events=(0,))
    _processed(warehouse, 0)
    _processed(warehouse, 1)
    assert check.python_callable(params=params, dag_run=scheduled) is False  # follow processed t = 1
    assert check.python_callable(params=params, dag_run=manual) is True
    _land(warehouse, "objects", 2)
    assert check.python_callable(params=params, dag_run=scheduled) is True  # t = 2 landed


# --- unusable inputs: the ingest job exits with a status its retry policy does not retry


def test_constants_shared_with_the_library_agree(common):
    from dkmsks.io.rejections import EXIT_INPUT_UNUSABLE

    assert common.EXIT_INPUT_UNUSABLE == EXIT_INPUT_UNUSABLE == 2
    from dkmsks.warehouse import OBJECT_STORE_SCHEMES

    assert common.OBJECT_STORE_SCHEMES == OBJECT_STORE_SCHEMES


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_every_spark_task_fails_without_retries_only_on_an_unusable_input(dagbag, common, dag_id):
    for task in dagbag.dags[dag_id].tasks:
        if task.task_type == "SparkSubmitOperator":
            assert isinstance(task.retry_policy, common.FailOnUnusableInput), task.task_id


@pytest.mark.parametrize(("status", "action"), [(2, "fail"), (1, "default"), (3, "default")])
def test_the_ingest_task_fails_at_once_when_its_job_exits_with_2(dagbag, tmp_path, monkeypatch, status, action):
    """The operator runs spark-submit (here a stand-in that prints the job's one-line error and
    exits like the job would); the hook's exception goes to the task's retry policy: exit 2
    (unusable input) fails the task at once, a crash (1) or a busy warehouse (3) retries."""
    from airflow.sdk.exceptions import AirflowException

    fake = tmp_path / "bin" / "spark-submit"
    fake.parent.mkdir()
    line = "dkmsks-ingest: error: /data/o.tsv.gz: the gzip data ends early, the file is truncated"
    fake.write_text(f'#!/bin/sh\necho "{line}" >&2\nexit {status}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_DKMSKS_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    task = dagbag.dags["dkmsks_ingest"].get_task("ingest")
    with pytest.raises(AirflowException) as caught:
        task.execute(context={})
    assert line in str(caught.value)  # the task log and the exception carry the job's message
    decision = task.retry_policy.evaluate(caught.value, try_number=1, max_tries=3)
    assert decision.action.value == action


@pytest.mark.parametrize(("value", "valid"), [
    ("", True), ("none", True), ("wgs84", True), ("0,0,1e6,1e6", True), ("-180,-90,180,90", True),
    ("-20037508.34,-20037508.34,20037508.34,20037508.34", True),
    ("utm", False), ("1,2,3", False), ("0,0,1_0,1", False), ("0,0,inf,1", False),
])
def test_the_ingest_bounds_param_takes_what_the_job_takes(dagbag, value, valid):
    import argparse
    import copy

    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    from dkmsks.io.formats import bounds_option

    params = copy.deepcopy(ParamsDict(dagbag.dags["dkmsks_ingest"].params))  # the DAG's own stay as they are
    params["objects"], params["events"] = "objects.tsv.gz", "events.tsv.gz"
    assert params.validate()["bounds"] == ""  # the default: no range check
    if valid:
        params["bounds"] = value
        bounds_option(value)  # the job takes it too
    else:
        with pytest.raises(ParamValidationError, match="Invalid input for param bounds"):
            params["bounds"] = value
        with pytest.raises(argparse.ArgumentTypeError):
            bounds_option(value)
    task = dagbag.dags["dkmsks_ingest"].get_task("ingest")
    assert "--bounds={{ params.bounds }}" in task.application_args  # one token: an empty value stays an argument
# --- the warehouse travels with the asset events: an asset-triggered run works where the data is


def _events(*warehouses) -> dict:
    """``triggering_asset_events`` as the task context holds them: asset -> events with ``extra``."""
    from airflow.sdk import Asset

    return {Asset("dkmsks://landing"): [SimpleNamespace(extra={} if w is None else {"warehouse": w})
                                        for w in warehouses]}


@pytest.mark.parametrize(
    ("warehouses", "expected"),
    [
        ((), "/param"),  # manual or scheduled run
        ((None,), "/param"),  # an event from elsewhere (REST API, another DAG) without a warehouse
        (("/a",), "/a"),
        (("/a", "/a", None), "/a"),
        (("",), "/param"),
    ],
)
def test_run_warehouse_is_the_triggering_events_else_the_param(common, warehouses, expected):
    assert common.run_warehouse(_events(*warehouses), {"warehouse": "/param"}) == expected
    assert common.run_warehouse(None, {"warehouse": "/param"}) == "/param"


def test_run_warehouse_refuses_events_of_several_warehouses_without_retrying(common):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match=r"asset events of 2 warehouses \(/a, /b\); a run works on one"):
        common.run_warehouse(_events("/b", "/a"), {"warehouse": "/param"})


def _rendered(dag, task_id: str, triggering: dict, **params):
    """A copy of the task with its templates rendered as a run would (no database needed)."""
    from airflow.sdk.definitions.param import ParamsDict

    # A shallow copy: rendering replaces the templated attributes, so the DAG's task keeps its
    # templates (a deep copy fails once another test has made the operator's hook, which holds a lock).
    task = copy.copy(dag.get_task(task_id))
    values = ParamsDict(copy.deepcopy(dag.params))  # validated as a run's conf is
    for name, value in params.items():
        values[name] = value
    task.render_template_fields(
        {"params": values.validate(), "triggering_asset_events": triggering, "run_id": "manual__t"},
        jinja_env=dag.get_template_env())
    return task


@pytest.mark.parametrize(("dag_id", "task_id"), [("dkmsks_ingest", "ingest"), ("dkmsks_partition", "partition"),
                                                 ("dkmsks_microbatch", "microbatch"),
                                                 ("dkmsks_repartition", "repartition"),
                                                 ("dkmsks_maintenance", "maintain")])
def test_every_job_works_on_the_runs_warehouse_and_records_it_in_its_events(dagbag, dag_id, task_id):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    dag = dagbag.dags[dag_id]
    params = {"objects": "o.tsv", "events": "e.tsv"} if dag_id == "dkmsks_ingest" else {}
    manual = _rendered(dag, task_id, {}, warehouse="/param", **params)
    assert manual.application_args[:2] == ["--warehouse", "/param"]
    assert manual.application_args[-2:] == ["--run-id", "manual__t"]
    triggered = _rendered(dag, task_id, _events("/from-event"), warehouse="/param", **params)
    assert triggered.application_args[:2] == ["--warehouse", "/from-event"]

    outlet_events = OutletEventAccessors()
    triggered._post_execute_hook({"params": {"warehouse": "/param"}, "triggering_asset_events": _events("/from-event"),
                                  "task": triggered, "outlet_events": outlet_events}, None)
    expected = [] if dag_id == "dkmsks_maintenance" else [{"warehouse": "/from-event"}]  # maintenance updates no asset
    assert [outlet_events[asset].extra for asset in triggered.outlets] == expected


# --- driver settings reach spark-submit (the driver's JVM is up before the job's session settings apply)


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_spark_submit_gets_the_s3_jars_for_a_warehouse_on_object_storage(dagbag, common, dag_id, tmp_path,
                                                                          monkeypatch):
    """The S3A connector and the LogStore are on the driver's classpath from its start when the
    run's warehouse is on object storage (the session's own spark.jars come too late under
    spark-submit), and only then."""
    delta, s3 = tmp_path / "jars", tmp_path / "jars-s3"
    for folder, names in ((delta, ["delta-spark.jar"]), (s3, ["hadoop-aws.jar", "dkmsks-logstore-1.jar"])):
        folder.mkdir()
        for name in names:
            (folder / name).write_bytes(b"")
    monkeypatch.setattr(common, "JARS_DIR", delta)
    monkeypatch.setattr(common, "S3_JARS_DIR", s3)
    dag = dagbag.dags[dag_id]
    job = next(t for t in dag.tasks if t.task_type == "SparkSubmitOperator")
    params = {"objects": "o.tsv", "events": "e.tsv"} if dag_id == "dkmsks_ingest" else {}
    local = _rendered(dag, job.task_id, {}, warehouse="/param", **params)
    assert local.jars == str(delta / "delta-spark.jar")
    on_s3 = _rendered(dag, job.task_id, {}, warehouse="s3://bucket/wh", **params)
    assert on_s3.jars.split(",") == [str(delta / "delta-spark.jar"), str(s3 / "dkmsks-logstore-1.jar"),
                                     str(s3 / "hadoop-aws.jar")]
    triggered = _rendered(dag, job.task_id, _events("S3A://bucket/wh"), warehouse="/param", **params)
    assert triggered.jars == on_s3.jars  # the run's warehouse: its triggering events'


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_spark_submit_gets_the_driver_memory_param(dagbag, dag_id, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_DKMSKS_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    dag = dagbag.dags[dag_id]
    job = next(t for t in dag.tasks if t.task_type == "SparkSubmitOperator")
    params = {"objects": "o.tsv", "events": "e.tsv"} if dag_id == "dkmsks_ingest" else {}
    for memory in (None, "10g"):
        task = _rendered(dag, job.task_id, {}, **params, **({"driver_memory": memory} if memory else {}))
        cmd = task._get_hook()._build_spark_submit_command(task.application)
        assert cmd[:3] == ["spark-submit", "--master", "local[2]"]
        conf = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--conf"]
        assert f"spark.driver.memory={memory or '4g'}" in conf
        assert "spark.driver.maxResultSize=2g" in conf


def test_driver_settings_are_the_sessions(dagbag, common, tmp_path, monkeypatch):
    """What the DAGs hand to spark-submit is what ``build_session`` sets when it starts the JVM."""
    from dkmsks.spark.session import session_conf
    from dkmsks.warehouse import Warehouse

    for name in ("DKMSKS_DRIVER_MEMORY", "DKMSKS_DRIVER_MAX_RESULT", "DKMSKS_DRIVER_JAVA_OPTS"):
        monkeypatch.delenv(name, raising=False)
    session = session_conf(Warehouse(tmp_path), master="local[2]")
    assert dagbag.dags["dkmsks_microbatch"].params["driver_memory"] == session["spark.driver.memory"]
    assert common.driver_conf()["spark.driver.maxResultSize"] == session["spark.driver.maxResultSize"]
    assert common.driver_conf()["spark.driver.extraJavaOptions"] == session["spark.driver.extraJavaOptions"]
    assert "log4j2.configurationFile=" in session["spark.driver.extraJavaOptions"]
    monkeypatch.setenv("DKMSKS_DRIVER_JAVA_OPTS", "-XX:TieredStopAtLevel=1")
    session = session_conf(Warehouse(tmp_path), master="local[2]")
    assert common.driver_conf()["spark.driver.extraJavaOptions"] == session["spark.driver.extraJavaOptions"]
    assert session["spark.driver.extraJavaOptions"].endswith(" -XX:TieredStopAtLevel=1")


@pytest.mark.parametrize(("value", "ok"), [("4g", True), ("10G", True), ("512m", True), ("4096", False),
                                           ("4gb", False), ("0g", False), ("", False)])
def test_driver_memory_param_takes_what_the_jvm_takes(dagbag, value, ok):
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    params = ParamsDict(copy.deepcopy(dagbag.dags["dkmsks_microbatch"].params))
    if ok:
        params["driver_memory"] = value
        assert params.validate()["driver_memory"] == value
    else:
        with pytest.raises(ParamValidationError, match="Invalid input for param driver_memory"):
            params["driver_memory"] = value


# --- schedules: the environment variables AIRFLOW_VAR_DKMSKS_*_SCHEDULE, read at parse time


def _cron(dag) -> str:
    import attrs

    timetable = dag.timetable
    if hasattr(timetable, "timetable"):  # asset-or-time: the time part
        return timetable.timetable._expression
    return attrs.asdict(timetable)["expression"]


def test_schedules_come_from_the_environment(dagbag, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    assert _cron(dagbag.dags["dkmsks_microbatch"]) == "*/5 * * * *"
    assert _cron(dagbag.dags["dkmsks_repartition"]) == "0 3 * * *"
    monkeypatch.setenv("AIRFLOW_VAR_DKMSKS_MICROBATCH_SCHEDULE", "*/2 * * * *")
    assert _cron(dagbag.dags["dkmsks_maintenance"]) == "30 4 * * *"
    monkeypatch.setenv("AIRFLOW_VAR_DKMSKS_REPARTITION_SCHEDULE", "30 4 * * 0")
    monkeypatch.setenv("AIRFLOW_VAR_DKMSKS_MAINTENANCE_SCHEDULE", "0 5 * * 6")
    for name, cron in (("microbatch", "*/2 * * * *"), ("repartition", "30 4 * * 0"), ("maintenance", "0 5 * * 6")):
        bag = DagBag(dag_folder=str(DAGS / f"dkmsks_{name}.py"))
        assert bag.import_errors == {}
        assert _cron(bag.dags[f"dkmsks_{name}"]) == cron


# --- the initial partitioning: a Spark-free check, so a second run updates no dkmsks://plan


def test_partition_runs_spark_only_after_a_cheap_check(dagbag):
    from airflow.providers.standard.operators.python import ShortCircuitOperator

    dag = dagbag.dags["dkmsks_partition"]
    check, job = dag.get_task("check_partition"), dag.get_task("partition")
    assert isinstance(check, ShortCircuitOperator)
    assert job.upstream_task_ids == {"check_partition"}
    assert check.outlets == [] and [a.name for a in job.outlets] == ["dkmsks://plan"]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no warehouse", None),
        ("journal, no ledger record yet", None),  # an interrupted first run: the job redoes it
        ("journal, first ledger record", "is done (ledger through t = 0)"),
        ("journal, t=1..3 processed", "is done (ledger through t = 3)"),
    ],
)
def test_partition_skip_reason_reads_the_delta_logs(tmp_path, case, expected):
    from dkmsks.storage.progress import partition_done, partition_skip_reason
    from dkmsks.warehouse import Warehouse

    warehouse = Warehouse(tmp_path / "absent") if case == "no warehouse" else _warehouse(tmp_path, plans=((0, 0),))
    if case in ("journal, first ledger record", "journal, t=1..3 processed"):
        _processed(warehouse, 0)
    if case == "journal, t=1..3 processed":
        _processed(warehouse, 1, 2, 3)
    reason = partition_skip_reason(warehouse)
    assert partition_done(warehouse) is (reason is not None)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason and str(warehouse.root) in reason


def test_check_partition_reads_the_warehouse_of_the_triggering_events(dagbag, tmp_path):
    check = dagbag.dags["dkmsks_partition"].get_task("check_partition")
    done, fresh = tmp_path / "done", tmp_path / "fresh"
    _processed(_warehouse(done, plans=((0, 0),)), 0)
    assert check.python_callable(params={"warehouse": str(fresh)}, triggering_asset_events={}) is True
    assert check.python_callable(params={"warehouse": str(done)}, triggering_asset_events={}) is False
    # An asset-triggered run checks the warehouse its event names, not the Param's.
    assert check.python_callable(params={"warehouse": str(fresh)}, triggering_asset_events=_events(str(done))) is False
    assert check.python_callable(params={"warehouse": str(done)}, triggering_asset_events=_events(str(fresh))) is True


def test_spark_submit_pins_the_local_address_to_the_drivers_bind_address(common, monkeypatch):
    """spark-submit's SPARK_LOCAL_IP follows DKMSKS_DRIVER_BIND_ADDRESS (loopback by default); a
    wildcard sets none, so Spark calls the container by its name (the compose stack)."""
    dkmsks_common = common
    monkeypatch.delenv("DKMSKS_DRIVER_BIND_ADDRESS", raising=False)
    assert dkmsks_common.spark_env()["SPARK_LOCAL_IP"] == "127.0.0.1"
    monkeypatch.setenv("DKMSKS_DRIVER_BIND_ADDRESS", "0.0.0.0")
    env = dkmsks_common.spark_env()
    assert "SPARK_LOCAL_IP" not in env and env["PYSPARK_PYTHON"]


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_spark_submit_jars_are_those_the_session_lists(dagbag, dag_id, tmp_path, monkeypatch):
    """A job's session settings come after its driver's JVM started, so S3A, the AWS SDK and the
    LogStore reach its class path only through spark-submit's --jars: for a warehouse on object
    storage they are there, as the session lists them; for a folder only Delta's."""
    from dkmsks.spark.session import session_conf
    from dkmsks.warehouse import Warehouse

    monkeypatch.setenv("AIRFLOW_CONN_DKMSKS_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    dag = dagbag.dags[dag_id]
    job = next(t for t in dag.tasks if t.task_type == "SparkSubmitOperator")
    params = {"objects": "o.tsv", "events": "e.tsv"} if dag_id == "dkmsks_ingest" else {}
    for warehouse in ("s3://bucket/pipeline", str(tmp_path / "wh")):
        task = _rendered(dag, job.task_id, {}, warehouse=warehouse, **params)
        cmd = task._get_hook()._build_spark_submit_command(task.application)
        jars = cmd[cmd.index("--jars") + 1].split(",")
        assert jars == session_conf(Warehouse(warehouse))["spark.jars"].split(","), warehouse
        assert any("hadoop-aws" in j for j in jars) is warehouse.startswith("s3://"), jars
    # An asset-triggered run: the jars follow the warehouse its event names.
    task = _rendered(dag, job.task_id, _events("s3://bucket/from-event"), warehouse=str(tmp_path), **params)
    assert any("dkmsks-logstore" in j for j in task.jars.split(",")), task.jars
