"""
### dkmsks: Delta maintenance (small files, VACUUM, the as-of horizon)

Per table of the warehouse: sets `delta.logRetentionDuration` and
`delta.deletedFileRetentionDuration` to the as-of horizon, compacts small files (OPTIMIZE) and
deletes files older than the horizon that the current versions do not need (VACUUM). Holds the
writer lock and the writers' pool, so it never runs beside a micro-batch or a repartitioning.
`dkm export --as-of T` stays exact for every `T` processed within the horizon.

Schedule: the environment variable `AIRFLOW_VAR_DKMSKS_MAINTENANCE_SCHEDULE`, read when the
DAG is parsed (default daily at 04:30 UTC, after the repartitioning). Horizon: the
`retention_hours` Param, whose default is `DKMSKS_AS_OF_RETENTION_HOURS` (168 h when unset),
read when the DAG is parsed.
"""

from __future__ import annotations

import os

from airflow.sdk import Param, dag

from dkmsks_common import DEFAULT_ARGS, JOB_PARAMS, MACROS, START, spark_job

SCHEDULE = os.environ.get("AIRFLOW_VAR_DKMSKS_MAINTENANCE_SCHEDULE", "30 4 * * *")
#: The horizon's default, as dkmsks.storage.retention reads it (tests/dags checks they agree).
RETENTION_HOURS = int(os.environ.get("DKMSKS_AS_OF_RETENTION_HOURS") or 168)


@dag(
    dag_id="dkmsks_maintenance",
    doc_md=__doc__,
    schedule=SCHEDULE,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["dkmsks", "maintenance"],
    params={
        **JOB_PARAMS,
        "retention_hours": Param(RETENTION_HOURS, type="integer", minimum=1,
                                 description="the as-of horizon: hours of history every table keeps "
                                             "(dkm export --as-of reaches this far back)"),
    },
    user_defined_macros=MACROS,
)
def dkmsks_maintenance():
    """One task: spark-submit of ``spark_apps/maintain.py`` with the run's horizon."""
    spark_job("maintain", "maintain.py", [
        "--retention-hours", "{{ params.retention_hours }}",
    ], outlets=[])


dkmsks_maintenance()
