"""
### dkmsks: partition the subscriptions (KOP, SOP, DkM-SKS or PS2Stream)

Runs after O_init is ingested (asset `dkmsks://landing`, on the warehouse named in the asset
event) or when triggered: computes the O_init statistics and the initial subscriptions' exact
kNN with Spark, builds the plan with the chosen method and writes the plan and the per-worker
state. Updates `dkmsks://plan`, with the warehouse in the event, which starts a micro-batch.

The first plan only: a cheap first task (`check_partition`, no Spark) reads the Delta logs
through `dkmsks.storage.progress` (delta-rs) and short-circuits when the initial partitioning is
done already (a later ingestion, a second trigger). The Spark job is then skipped and
`dkmsks://plan` is not updated, so no micro-batch is started for nothing. `dkmsks_repartition`
makes new plans.
"""

from __future__ import annotations

from airflow.sdk import dag, task

from dkmsks_common import (
    DEFAULT_ARGS,
    LANDING,
    MACROS,
    PARTITION_ARGS,
    PARTITION_PARAMS,
    PLAN,
    START,
    run_warehouse,
    spark_job,
)


@task.short_circuit(task_id="check_partition")
def check_partition(params=None, triggering_asset_events=None) -> bool:
    """True when the run's warehouse has no initial plan yet; otherwise logs why and skips the job.
    The library reads the Delta logs (delta-rs), imported here so that parsing this file stays light."""
    from dkmsks.storage.progress import partition_skip_reason
    from dkmsks.warehouse import Warehouse

    reason = partition_skip_reason(Warehouse.at(run_warehouse(triggering_asset_events, params)))
    if reason:
        print(f"skipping the partitioning: {reason}")
    return reason is None


@dag(
    dag_id="dkmsks_partition",
    doc_md=__doc__,
    schedule=[LANDING],
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["dkmsks", "partition"],
    params=PARTITION_PARAMS,
    user_defined_macros=MACROS,
)
def dkmsks_partition():
    # --if-absent stays: a retry of a job that committed before it failed does nothing twice.
    """The check, then spark-submit of ``spark_apps/partition.py`` when no plan exists yet."""
    check_partition() >> spark_job("partition", "partition.py", [*PARTITION_ARGS, "--if-absent"], outlets=[PLAN])


dkmsks_partition()
