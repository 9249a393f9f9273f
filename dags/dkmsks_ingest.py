"""
### dkmsks: ingest O_init and subscription events

Validates an objects file and a subscription-events file (TSV/CSV, `.gz`, or Parquet) and
merges their good rows into the Delta landing tables; bad rows go to `quarantine` with their
line and reason. Re-running with the same files changes nothing. Updates the asset
`dkmsks://landing`, which triggers partitioning.
"""

from __future__ import annotations

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag

from dkmsks_common import DEFAULT_ARGS, LANDING, SPARK_CONN_ID, START, WAREHOUSE, app, delta_jars, spark_env


@dag(
    dag_id="dkmsks_ingest",
    doc_md=__doc__,
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["dkmsks", "ingest"],
    params={
        "objects": Param("", type="string", minLength=1, description="objects file (TSV/CSV/.gz/Parquet)"),
        "events": Param("", type="string", minLength=1, description="subscription events file"),
        "warehouse": Param(WAREHOUSE, type="string", minLength=1, description="Delta warehouse folder"),
    },
)
def dkmsks_ingest():
    SparkSubmitOperator(
        task_id="ingest",
        application=app("ingest.py"),
        conn_id=SPARK_CONN_ID,
        jars=delta_jars(),
        env_vars=spark_env(),
        name="dkmsks-ingest",
        application_args=[
            "--warehouse", "{{ params.warehouse }}",
            "--objects", "{{ params.objects }}",
            "--events", "{{ params.events }}",
            "--run-id", "{{ run_id }}",
        ],
        outlets=[LANDING],
    )


dkmsks_ingest()
