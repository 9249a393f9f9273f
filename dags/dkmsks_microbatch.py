"""
### dkmsks: micro-batch (every pending timestamp, exactly once)

Processes every timestamp that has landed since the last run, with one Spark task per
worker, and commits results, change log, metrics and ledger in one idempotent journal
append: a retry or a crash cannot lose or double-apply a timestamp. Runs on its schedule (the
cron in the environment variable `AIRFLOW_VAR_DKMSKS_MICROBATCH_SCHEDULE` when the DAG file is
parsed, default every 5 minutes; on the `warehouse` Param) and whenever a plan is made (on the
warehouse named in the `dkmsks://plan` event). A scheduled run checks the Delta logs first
(`dkmsks.storage.progress`, no Spark) and skips its Spark job when there is no plan yet or no
timestamp landed after the last processed one, as on a warehouse that `dkm follow` keeps up to
date; a run triggered by hand or by a new plan always runs the job.
"""

from __future__ import annotations

import os

from airflow.sdk import Param, dag, task
from airflow.timetables.assets import AssetOrTimeSchedule
from airflow.timetables.trigger import CronTriggerTimetable

from dkmsks_common import (
    DEFAULT_ARGS,
    JOB_PARAMS,
    MACROS,
    PLAN,
    RESULTS,
    START,
    run_warehouse,
    spark_job,
)

# The schedule is read at parse time from the environment, the first place Airflow looks for
# the Variable dkmsks_microbatch_schedule; a Variable stored in the metadata database (UI, CLI)
# is not read, which would cost a database query on every parse of this file.
SCHEDULE = os.environ.get("AIRFLOW_VAR_DKMSKS_MICROBATCH_SCHEDULE", "*/5 * * * *")


@task.short_circuit(task_id="check_pending")
def check_pending(params=None, dag_run=None, triggering_asset_events=None) -> bool:
    """True unless a scheduled run finds no plan or nothing pending; then logs why and skips. The
    library reads the Delta logs (delta-rs), imported here so that parsing this file stays light."""
    from dkmsks.storage.progress import microbatch_skip_reason
    from dkmsks.warehouse import Warehouse

    reason = microbatch_skip_reason(Warehouse.at(run_warehouse(triggering_asset_events, params)),
                                    scheduled=dag_run.run_type == "scheduled")
    if reason:
        print(f"skipping the micro-batch: {reason}")
    return reason is None


@dag(
    dag_id="dkmsks_microbatch",
    doc_md=__doc__,
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable(SCHEDULE, timezone="UTC"), assets=[PLAN]),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["dkmsks", "microbatch"],
    params={
        **JOB_PARAMS,
        "max_timestamps": Param(None, type=["null", "integer"], minimum=1,
                                description="commit every N timestamps (default: all pending in one run)"),
    },
    user_defined_macros=MACROS,
)
def dkmsks_microbatch():
    """The check, then spark-submit of ``spark_apps/microbatch.py`` over the pending timestamps."""
    check_pending() >> spark_job("microbatch", "microbatch.py", [
        "--max-timestamps", "{{ params.max_timestamps or 0 }}",
    ], outlets=[RESULTS])


dkmsks_microbatch()
