"""Shared settings of the dkmsks DAGs: paths, the Spark connection, the writers' pool.

Kept free of heavy imports (no numpy, pyspark or dkmsks at module level) so DAG parsing stays
fast. Every Spark job goes through ``SparkSubmitOperator`` and the Airflow connection
``dkmsks_spark``: ``local[2]`` by default, a ``spark://host:7077`` cluster by changing only
that connection.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow.sdk import Asset, Param

REPO = Path(os.environ.get("DKMSKS_HOME", Path(__file__).resolve().parents[1]))
SPARK_APPS = REPO / "spark_apps"
JARS_DIR = Path(os.environ.get("DKMSKS_JARS_DIR", REPO / ".cache" / "jars"))
WAREHOUSE = os.environ.get("DKMSKS_WAREHOUSE", str(REPO / ".cache" / "warehouse"))
SPARK_CONN_ID = "dkmsks_spark"
#: One slot: writers of the project's Delta tables never run at the same time.
WRITERS_POOL = "dkmsks_writers"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)

LANDING = Asset("dkmsks://landing")
PLAN = Asset("dkmsks://plan")
RESULTS = Asset("dkmsks://results")

DEFAULT_ARGS = {
    "owner": "dkmsks",
    "retries": 2,
    "retry_delay": timedelta(minutes=1),
    "pool": WRITERS_POOL,
}


def spark_job(task_id: str, application: str, args: list[str], outlets: list[Asset]):
    """A ``SparkSubmitOperator`` for ``spark_apps/<application>`` with the project's jars,
    environment and connection; ``--run-id {{ run_id }}`` is appended so every write of the
    job carries the Airflow run that made it."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    return SparkSubmitOperator(
        task_id=task_id,
        application=str(SPARK_APPS / application),
        conn_id=SPARK_CONN_ID,
        jars=delta_jars(),
        env_vars=spark_env(),
        name=f"dkmsks-{task_id}",
        application_args=[*args, "--run-id", "{{ run_id }}"],
        outlets=outlets,
    )


def delta_jars() -> str:
    """Comma-separated Delta jars fetched by scripts/bootstrap.sh (empty: Spark resolves them)."""
    return ",".join(sorted(str(p) for p in JARS_DIR.glob("*.jar")))


def spark_env() -> dict[str, str]:
    """Environment of spark-submit: the venv's Python for the driver and the executors."""
    python = os.environ.get("DKMSKS_PYTHON", str(REPO / ".venv" / "bin" / "python"))
    return {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1"}


PARTITION_PARAMS = {
    "method": Param("dkm", enum=["kop", "sop", "dkm"], description="partitioner: KOP, SOP or DkM-SKS"),
    "workers": Param(20, type="integer", minimum=1, maximum=1024, description="m, number of workers"),
    "theta": Param(20, type="integer", minimum=1, description="SOP: theta (regions = theta * m)"),
    "gamma1": Param(100_000, type="integer", minimum=1, description="DkM-SKS: gamma1 (subsets = gamma1 * m)"),
    "gamma2": Param(20, type="integer", minimum=0, description="DkM-SKS: gamma2 (hybrid split size)"),
    "grid": Param(16384, type="integer", minimum=1, maximum=1 << 20, description="DkM-SKS worker grid G"),
    "new_cost": Param("live", enum=["live", "paper"], description="cost of new subscriptions"),
    "warehouse": Param(WAREHOUSE, type="string", minLength=1, description="Delta warehouse folder"),
}

PARTITION_ARGS = [
    "--warehouse", "{{ params.warehouse }}",
    "--method", "{{ params.method }}",
    "--workers", "{{ params.workers }}",
    "--theta", "{{ params.theta }}",
    "--gamma1", "{{ params.gamma1 }}",
    "--gamma2", "{{ params.gamma2 }}",
    "--grid", "{{ params.grid }}",
    "--new-cost", "{{ params.new_cost }}",
]
