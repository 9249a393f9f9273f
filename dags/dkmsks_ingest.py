"""
### dkmsks: ingest O_init and subscription events

Validates an objects file and a subscription-events file (TSV/CSV, `.gz`, or Parquet) and
merges their good rows into the Delta landing tables; bad rows go to `quarantine` with their
line and reason. Re-running with the same files changes nothing. Updates the asset
`dkmsks://landing` with the warehouse in the event, which triggers partitioning of that
warehouse.

Coordinates may be in any finite units (degrees, projected metres); `bounds` turns on a range
check (`wgs84` or `xmin,ymin,xmax,ymax`). A file that cannot be used as a whole (truncated
gzip, missing columns, every row rejected) fails the task at once, without retries: its log
names the file and the problem, and nothing is loaded (the rejected rows of a file whose every
row was refused are in `quarantine`).
"""

from __future__ import annotations

from airflow.sdk import Param, dag

from dkmsks_common import BOUNDS_PATTERN, DEFAULT_ARGS, JOB_PARAMS, LANDING, MACROS, START, spark_job


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
        **JOB_PARAMS,
        "bounds": Param("", type="string", pattern=BOUNDS_PATTERN,
                        description="optional coordinate range check: empty (none, the default), "
                                    "'wgs84', or 'xmin,ymin,xmax,ymax'"),
    },
    user_defined_macros=MACROS,
)
def dkmsks_ingest():
    """One task: spark-submit of ``spark_apps/ingest.py`` on the run's files."""
    spark_job("ingest", "ingest.py", [
        "--objects", "{{ params.objects }}",
        "--events", "{{ params.events }}",
        "--bounds={{ params.bounds }}",  # one token: an empty value stays an argument
    ], outlets=[LANDING])


dkmsks_ingest()
