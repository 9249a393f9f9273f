"""
### dkmsks: partition the subscriptions (KOP, SOP or DkM-SKS)

Runs after O_init is ingested (asset `dkmsks://landing`) or when triggered: computes the
O_init statistics and the initial subscriptions' exact kNN with Spark, builds the plan with
the chosen method and writes the plan and the per-worker state. A plan that already exists is
left alone (safe to retry; use `dkmsks_repartition` for a new plan). Updates `dkmsks://plan`.
"""

from __future__ import annotations

from airflow.sdk import dag

from dkmsks_common import DEFAULT_ARGS, LANDING, PARTITION_ARGS, PARTITION_PARAMS, PLAN, START, spark_job


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
)
def dkmsks_partition():
    spark_job("partition", "partition.py", [*PARTITION_ARGS, "--if-absent"], outlets=[PLAN])


dkmsks_partition()
