"""
### dkmsks: periodic repartitioning

Makes a new plan from the current subscriptions and their current balls and switches the
per-worker state to it in one Delta commit; results stay exact across the switch. Shares the
writers' pool with the micro-batch, so the two never run at the same time. Schedule: Airflow
Variable `dkmsks_repartition_schedule` (default daily at 03:00 UTC).
"""

from __future__ import annotations

import os

from airflow.sdk import dag

from dkmsks_common import DEFAULT_ARGS, PARTITION_ARGS, PARTITION_PARAMS, PLAN, START, spark_job


SCHEDULE = os.environ.get("AIRFLOW_VAR_DKMSKS_REPARTITION_SCHEDULE", "0 3 * * *")


@dag(
    dag_id="dkmsks_repartition",
    doc_md=__doc__,
    schedule=SCHEDULE,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["dkmsks", "partition"],
    params=PARTITION_PARAMS,
)
def dkmsks_repartition():
    spark_job("repartition", "partition.py", [*PARTITION_ARGS, "--repartition"], outlets=[PLAN])


dkmsks_repartition()
