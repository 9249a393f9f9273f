"""
### dkmsks: periodic repartitioning

Makes a new plan from the current subscriptions and their current balls and switches the
per-worker state to it in one Delta commit; results stay exact across the switch. Shares the
writers' pool with the micro-batch, so the two never run at the same time. Schedule: the cron in
the environment variable `AIRFLOW_VAR_DKMSKS_REPARTITION_SCHEDULE` when the DAG file is parsed
(default daily at 03:00 UTC). Updates `dkmsks://plan` with the warehouse in the event, which
starts a micro-batch on that warehouse.

A cheap first task (`check_plan`, no Spark) reads the Delta logs through
`dkmsks.storage.progress` (delta-rs) and short-circuits when there is nothing to do: no plan
yet, or (scheduled runs) no timestamp processed since the current plan. The Spark job is then
skipped and `dkmsks://plan` is not updated, so no micro-batch is started for nothing.
"""

from __future__ import annotations

import os

from airflow.sdk import dag, task

from dkmsks_common import (
    DEFAULT_ARGS,
    MACROS,
    PARTITION_ARGS,
    PARTITION_PARAMS,
    PLAN,
    START,
    run_warehouse,
    spark_job,
)

# Read at parse time from the environment, as the micro-batch's schedule (see there).
SCHEDULE = os.environ.get("AIRFLOW_VAR_DKMSKS_REPARTITION_SCHEDULE", "0 3 * * *")


@task.short_circuit(task_id="check_plan")
def check_plan(params=None, dag_run=None, triggering_asset_events=None) -> bool:
    """True when the repartitioning has work; otherwise logs why and skips it. The library reads
    the Delta logs (delta-rs), imported here so that parsing this file stays light."""
    from dkmsks.storage.progress import repartition_skip_reason
    from dkmsks.warehouse import Warehouse

    reason = repartition_skip_reason(Warehouse.at(run_warehouse(triggering_asset_events, params)),
                                     scheduled=dag_run.run_type == "scheduled")
    if reason:
        print(f"skipping the repartition: {reason}")
    return reason is None


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
    user_defined_macros=MACROS,
)
def dkmsks_repartition():
    """The check, then spark-submit of ``spark_apps/partition.py --repartition`` when there is work."""
    check_plan() >> spark_job("repartition", "partition.py", [*PARTITION_ARGS, "--repartition"], outlets=[PLAN])


dkmsks_repartition()
