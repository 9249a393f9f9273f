"""Shared settings of the dkmsks DAGs: paths, the Spark connection, the writers' pool, the
warehouse a run works on and the assets' events.

Kept free of heavy imports (no numpy, pyspark or dkmsks at module level) so DAG parsing stays
fast. Every Spark job goes through ``SparkSubmitOperator`` and the Airflow connection
``dkmsks_spark``: ``local[2]`` by default, a ``spark://host:7077`` cluster by changing only
that connection.

Retries: a Spark task retries (``DEFAULT_ARGS``) unless its job exited with
:data:`EXIT_INPUT_UNUSABLE`, which the jobs use for an input that no retry can fix (a truncated
gzip file, missing columns, every row rejected); :class:`FailOnUnusableInput` then fails the
task at once, and its log holds the job's one-line message.

The warehouse travels with the assets: a job's asset event carries ``{"warehouse": ...}`` in its
extra (:func:`record_warehouse`), and a run triggered by such events works on that warehouse
(:func:`run_warehouse`); manual and scheduled runs use the ``warehouse`` Param.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Asset, Param, RetryDecision, RetryPolicy

REPO = Path(os.environ.get("DKMSKS_HOME", Path(__file__).resolve().parents[1]))
SPARK_APPS = REPO / "spark_apps"
JARS_DIR = Path(os.environ.get("DKMSKS_JARS_DIR", REPO / ".cache" / "jars"))
#: S3A, the AWS SDK modules it calls and the project's LogStore (dkmsks.spark.s3.s3_jars): a job
#: on a warehouse on object storage needs them on its driver's class path, which only
#: spark-submit's --jars gives (the job's session settings come after its JVM started).
S3_JARS_DIR = Path(os.environ.get("DKMSKS_S3_JARS_DIR", REPO / ".cache" / "jars-s3"))
#: URI schemes of a warehouse on object storage (``dkmsks.warehouse.OBJECT_STORE_SCHEMES``).
OBJECT_STORE_SCHEMES = ("s3", "s3a")
WAREHOUSE = os.environ.get("DKMSKS_WAREHOUSE", str(REPO / ".cache" / "warehouse"))
SPARK_CONN_ID = "dkmsks_spark"
#: One slot: writers of the project's Delta tables never run at the same time.
WRITERS_POOL = "dkmsks_writers"
START = datetime(2026, 1, 1, tzinfo=UTC)

LANDING = Asset("dkmsks://landing")
PLAN = Asset("dkmsks://plan")
RESULTS = Asset("dkmsks://results")

#: Exit status of a job whose input is unusable as a whole (``dkmsks.io.rejections.EXIT_INPUT_UNUSABLE``;
#: the DAG files import no dkmsks code, a test checks the two agree).
EXIT_INPUT_UNUSABLE = 2
#: How SparkSubmitHook reports spark-submit's exit status in the exception it raises.
_EXIT_STATUS = re.compile(r"\. Error code is: (-?[0-9]+)\.")


class FailOnUnusableInput(RetryPolicy):
    """Fail a Spark task without its retries when its job exited with
    :data:`EXIT_INPUT_UNUSABLE`: reading the same unusable file again cannot succeed. Every
    other failure (a lost executor, a busy warehouse) retries as ``DEFAULT_ARGS`` says."""

    def evaluate(self, exception, try_number, max_tries, context=None) -> RetryDecision:
        """Fail at once when the job exited with the unusable-input status; otherwise retry as usual."""
        status = _EXIT_STATUS.search(str(exception))
        if status and int(status.group(1)) == EXIT_INPUT_UNUSABLE:
            return RetryDecision.fail(
                f"the job exited with {EXIT_INPUT_UNUSABLE}: its input is unusable (see its one-line "
                "error above); fix the input and trigger a new run")
        return RetryDecision.default()

DEFAULT_ARGS = {
    "owner": "dkmsks",
    "retries": 2,
    "retry_delay": timedelta(minutes=1),
    "pool": WRITERS_POOL,
}


def run_warehouse(triggering_asset_events: Mapping[Any, Sequence[Any]] | None, params: Mapping[str, Any]) -> str:
    """The warehouse a run works on: the one named by the asset events that triggered it (their
    extra's ``warehouse``, written by :func:`record_warehouse`), else the ``warehouse`` Param
    (manual and scheduled runs, or events from elsewhere without it).

    Used as the macro ``run_warehouse`` in templates (:data:`MACROS`) and by the Spark-free
    checks, so both see the same warehouse. A run triggered by events of several warehouses
    (several pipelines updated the asset while the DAG was busy) fails without retrying:
    a run works on one warehouse, and picking one would silently leave the others out.
    """
    named = sorted({
        event.extra["warehouse"]
        for events in (triggering_asset_events or {}).values() for event in events
        if isinstance((event.extra or {}).get("warehouse"), str) and event.extra["warehouse"]
    })
    if len(named) > 1:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(
            f"this run was triggered by asset events of {len(named)} warehouses ({', '.join(named)}); a run "
            "works on one: trigger this DAG once for each, with the warehouse Param set to it")
    return named[0] if named else str(params["warehouse"])


def spark_jars(warehouse: str) -> str:
    """spark-submit's ``--jars`` for a job on ``warehouse``: Delta's (:func:`delta_jars`) and, on
    object storage (``s3://``, ``s3a://``), those of :data:`S3_JARS_DIR`, as the job's session
    (``dkmsks.spark.session.session_conf``) lists them. A macro (:data:`MACROS`): the warehouse
    is known when the run starts, not when the file is parsed."""
    jars = [delta_jars()]
    scheme, uri, _ = str(warehouse).partition("://")
    if uri and scheme.lower() in OBJECT_STORE_SCHEMES:
        s3 = sorted(str(p) for p in S3_JARS_DIR.glob("*.jar"))
        if not s3:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"warehouse {warehouse} is on object storage, but the S3 connector's jars "
                                       f"are missing ({S3_JARS_DIR}): run scripts/bootstrap.sh")
        jars.append(",".join(s3))
    return ",".join(j for j in jars if j)


#: Template helpers of every dkmsks DAG (``user_defined_macros``).
MACROS = {"run_warehouse": run_warehouse, "spark_jars": spark_jars}
#: The ``--warehouse`` value of every job: the run's warehouse (:func:`run_warehouse`).
WAREHOUSE_ARG = "{{ run_warehouse(triggering_asset_events, params) }}"
#: The ``--jars`` of every job: for the run's warehouse (:func:`spark_jars`).
JARS_ARG = "{{ spark_jars(run_warehouse(triggering_asset_events, params)) }}"


def record_warehouse(context: Mapping[str, Any], result: object = None) -> None:
    """``post_execute`` hook of the Spark jobs: the asset events the task emits on success
    carry the warehouse it worked on, so the runs they trigger work on it too."""
    warehouse = run_warehouse(context["triggering_asset_events"], context["params"])
    for asset in context["task"].outlets:
        context["outlet_events"][asset].extra = {"warehouse": warehouse}


def spark_job(task_id: str, application: str, args: list[str], outlets: list[Asset]):
    """A ``SparkSubmitOperator`` for ``spark_apps/<application>`` with the project's jars (for
    the run's warehouse, :func:`spark_jars`), environment, connection and driver settings
    (:func:`driver_conf`).

    The job gets ``--warehouse`` (the run's warehouse, :data:`WAREHOUSE_ARG`) before ``args``
    and ``--run-id {{ run_id }}`` after them, so every write of the job carries the Airflow run
    that made it; its asset events carry the warehouse (:func:`record_warehouse`). The DAG
    needs ``user_defined_macros=MACROS`` and the Params of :data:`JOB_PARAMS`.
    An unusable input fails it without retries (:class:`FailOnUnusableInput`).
    """
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    return SparkSubmitOperator(
        task_id=task_id,
        application=str(SPARK_APPS / application),
        conn_id=SPARK_CONN_ID,
        jars=JARS_ARG,
        conf=driver_conf(),
        env_vars=spark_env(),
        name=f"dkmsks-{task_id}",
        application_args=["--warehouse", WAREHOUSE_ARG, *args, "--run-id", "{{ run_id }}"],
        outlets=outlets,
        retry_policy=FailOnUnusableInput(),
        post_execute=record_warehouse,
    )


def driver_conf() -> dict[str, str]:
    """Spark settings that must be given to spark-submit, because the driver's JVM is running
    before the job's own session settings (``dkmsks.spark.session``) apply: the heap (the
    ``driver_memory`` Param) and, as in that module, ``$DKMSKS_DRIVER_MAX_RESULT``, the log
    settings (``conf/log4j2.properties``) and ``$DKMSKS_DRIVER_JAVA_OPTS`` (read when the DAG
    is parsed)."""
    conf = {
        "spark.driver.memory": "{{ params.driver_memory }}",
        "spark.driver.maxResultSize": os.environ.get("DKMSKS_DRIVER_MAX_RESULT", "2g"),
    }
    log_config = Path(os.environ.get("DKMSKS_LOG4J", REPO / "conf" / "log4j2.properties"))
    java_opts = [f"-Dlog4j2.configurationFile={log_config.as_uri()}"] if log_config.is_file() else []
    java_opts += os.environ.get("DKMSKS_DRIVER_JAVA_OPTS", "").split()
    if java_opts:
        conf["spark.driver.extraJavaOptions"] = " ".join(java_opts)
    return conf


def delta_jars() -> str:
    """Comma-separated Delta jars fetched by scripts/bootstrap.sh (empty: Spark resolves them)."""
    return ",".join(sorted(str(p) for p in JARS_DIR.glob("*.jar")))


def spark_env() -> dict[str, str]:
    """Environment of spark-submit: the venv's Python for the driver and the executors."""
    python = os.environ.get("DKMSKS_PYTHON", str(REPO / ".venv" / "bin" / "python"))
    env = {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
    # The driver's address as dkmsks.spark.session.driver_addresses has it: loopback unless the
    # deployment says otherwise (compose: every interface, called by the container's name).
    bind = os.environ.get("DKMSKS_DRIVER_BIND_ADDRESS") or "127.0.0.1"
    if bind not in ("0.0.0.0", "::"):
        env["SPARK_LOCAL_IP"] = bind
    return env


_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
#: What the ingest DAG's ``bounds`` param accepts (``--bounds`` of spark_apps/ingest.py).
BOUNDS_PATTERN = rf"^(|none|wgs84|{_NUMBER},{_NUMBER},{_NUMBER},{_NUMBER})$"

#: Params of every DAG: where the job works (manual runs; asset-triggered runs take the warehouse
#: of their events, :func:`run_warehouse`) and the driver's heap.
JOB_PARAMS = {
    "warehouse": Param(WAREHOUSE, type="string", minLength=1,
                       description="Delta warehouse: a folder, or s3://bucket/prefix with the store's AWS_* "
                                   "variables in Airflow's environment (runs triggered by an asset use the "
                                   "asset event's)"),
    "driver_memory": Param(os.environ.get("DKMSKS_DRIVER_MEMORY", "4g"), type="string",
                           pattern="^[1-9][0-9]*[kmgtKMGT]$",
                           description="heap of the Spark driver (spark.driver.memory), e.g. 4g; |S| = 10M needs 10g"),
}

# The tuning parameters as DAG Params, written out as plain literals so DAG parsing imports
# nothing of the project; tests/dags checks them against dkmsks.core.config.PARAMETERS.
TUNING_PARAMS = {
    "method": Param("dkm", enum=["kop", "sop", "dkm", "ps2"],
                    description="partitioner: kop, sop, dkm (DkM-SKS) or ps2 (PS2Stream extended to kNN)"),
    "workers": Param(20, type="integer", minimum=1, maximum=1024, description="m, the number of workers"),
    "theta": Param(20, type="integer", minimum=1, description="SOP: split until theta * m regions"),
    "gamma1": Param(100_000, type="integer", minimum=1,
                    description="DkM-SKS: Algorithm 2 targets gamma1 * m subsets"),
    "gamma2": Param(20, type="integer", minimum=0,
                    description="DkM-SKS: subsets of at most gamma2 subscriptions also try Hybrid-Partition"),
    "grid": Param(16384, type="integer", minimum=1, maximum=32768,
                  description="DkM-SKS worker grid: G x G finest cells, plus coarser levels"),
    "t0": Param(0, type="integer", description="end of the initial phase T0"),
    "new_cost": Param("live", enum=["live", "paper"],
                      description="cost of a new subscription: its actual ball (live) or the paper's estimate"),
    "ps2_theta": Param(20, type="integer", minimum=1, description="ps2: split until ps2_theta * m leaves"),
    "ps2_rho": Param(0.75, type="number", minimum=0.5, exclusiveMaximum=1,
                     description="ps2: a balanced split's larger child holds at most rho of the load"),
    "ps2_alpha": Param(1, type="integer", minimum=0, description="ps2: count weight of an object"),
    "ps2_beta": Param(1, type="integer", minimum=0, description="ps2: count weight of a subscription"),
    "ps2_new": Param("argmin", enum=["argmin", "route"],
                     description="ps2: new subscriptions to the lowest count (argmin) or their home leaf (route)"),
}
PARTITION_PARAMS = {**TUNING_PARAMS, **JOB_PARAMS}

#: spark_apps/partition.py's tuning flags, one per Param (flags are the Params' names with dashes).
PARTITION_ARGS = [arg for name in TUNING_PARAMS
                  for arg in ("--" + name.replace("_", "-"), "{{ params.%s }}" % name)]  # noqa: UP031 (Jinja's braces)
