"""Periodic repartitioning with nothing to do is skipped before Spark and updates no asset.

Uses the session's Airflow (``airflow`` fixture in ``conftest.py``). Without the check, such a
run would submit a Spark job for nothing and update ``dkmsks://plan``, which starts a
micro-batch for nothing.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_repartition_without_a_plan_is_skipped_and_updates_no_asset(airflow, tmp_path):
    api = airflow.api()
    status, run = api.call("POST", "/api/v2/dags/dkmsks_repartition/dagRuns",
                           {"logical_date": None, "conf": {"warehouse": str(tmp_path / "no-plan-yet")}})
    assert status == 200, run
    api.wait_run("dkmsks_repartition", run["dag_run_id"], timeout=300)
    assert api.task_states("dkmsks_repartition", run["dag_run_id"]) == {"check_plan": "success",
                                                                       "repartition": "skipped"}
    # The scheduled run made when Airflow started (the latest past cron point; no plan existed
    # then) was skipped the same way.
    scheduled = api.wait_run("dkmsks_repartition", run_type="scheduled", timeout=300)
    assert api.task_states("dkmsks_repartition", scheduled["dag_run_id"])["repartition"] == "skipped"
    assert api.asset_events("dkmsks_repartition") == []
