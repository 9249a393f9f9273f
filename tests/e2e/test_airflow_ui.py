"""The Airflow UI in headless Chromium: log in, trigger ``dkmsks_partition`` from its form with
non-default Params, and watch the run succeed.

Drives Debian's ``/usr/bin/chromium`` with Playwright (never a downloaded browser build;
``scripts/install_test_deps.sh`` installs the package). Uses the session's Airflow (``airflow``
fixture in ``conftest.py``). The form sets ``method=sop``, ``workers=3``, ``theta=4`` and a
warehouse of the test's own, where O_init was ingested beforehand by ``spark_apps/ingest.py``,
so the triggered run really partitions with those values; the test then reads the new plan from
the Delta log (delta-rs).

Screenshots go to ``$DKMSKS_SCREENSHOTS`` (the README's are made with
``DKMSKS_SCREENSHOTS=docs/img scripts/test.sh tests/e2e/test_airflow_ui.py``), else to the
test's temporary folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from conftest import REPO, missing_prerequisite, real_objects
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.io.writers import write_events, write_objects
from dkmsks.storage import tables
from dkmsks.storage.lake import Lake
from dkmsks.storage.progress import repartition_skip_reason
from dkmsks.warehouse import Warehouse

pytestmark = pytest.mark.e2e

CHROMIUM = Path(os.environ.get("DKMSKS_CHROMIUM", "/usr/bin/chromium"))
try:
    from playwright import sync_api
except ImportError:  # reported by the fixture below
    sync_api = None


@pytest.fixture(autouse=True, scope="module")
def browser_prerequisites():
    """Skip on a developer's machine without a browser; fail under CI=true."""
    if not CHROMIUM.is_file():
        missing_prerequisite(f"headless Chromium is missing: no {CHROMIUM} (scripts/install_test_deps.sh "
                             "installs Debian's chromium package with apt-get)")
    if sync_api is None:
        missing_prerequisite("the Python package playwright is missing (pinned in requirements.lock; "
                             "scripts/bootstrap.sh installs it)")

#: O_init and the initial subscriptions only: partitioning is all the UI run has to do.
SPEC = WorkloadSpec(o_init=1000, subscriptions=60, timestamps=0, objects_per_ts=0,
                    inserts_per_ts=0, deletes_per_ts=0, k_max=5, seed=11)
FORM = {"method": "sop", "workers": 3, "theta": 4}  # defaults: dkm, 20, 20


def start_ingest(tmp_path: Path, warehouse: Path) -> subprocess.Popen:
    """O_init into the test's own warehouse with spark-submit, outside Airflow (no asset event)."""
    from dkmsks.spark.session import spark_submit_conf_args

    source, vocab = real_objects(SPEC.objects_needed)
    objects, events = generate_workload(source, SPEC)
    write_objects(tmp_path / "objects.tsv.gz", objects, vocab)
    write_events(tmp_path / "events.tsv.gz", events, vocab)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    cmd = [str(Path(sys.executable).with_name("spark-submit")), *spark_submit_conf_args(Warehouse(warehouse)),
           str(REPO / "spark_apps" / "ingest.py"), "--warehouse", str(warehouse),
           "--objects", str(tmp_path / "objects.tsv.gz"), "--events", str(tmp_path / "events.tsv.gz"),
           "--run-id", "ui-test"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def shot(page, folder: Path, name: str) -> Path:
    path = folder / f"airflow-{name}.png"
    page.screenshot(path=str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def test_trigger_partition_from_the_ui_with_non_default_params(airflow, tmp_path):
    shots = Path(os.environ.get("DKMSKS_SCREENSHOTS", tmp_path / "shots"))
    shots.mkdir(parents=True, exist_ok=True)
    warehouse = tmp_path / "ui-warehouse"
    ingest = start_ingest(tmp_path, warehouse)  # runs while the browser logs in
    api = airflow.api()  # also waits until the DAGs are registered
    try:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(60_000)

            # Unauthenticated: the UI sends us to the login form.
            page.goto(airflow.url + "/dags")
            page.wait_for_url("**/auth/login**")
            page.get_by_label("Username").fill("admin")
            shot(page, shots, "login")
            page.get_by_label("Password").fill(airflow.password())
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url("**/dags")
            page.get_by_role("link", name="dkmsks_partition").wait_for()
            for dag_id in ("dkmsks_ingest", "dkmsks_microbatch", "dkmsks_repartition"):
                assert page.get_by_role("link", name=dag_id).count() >= 1, dag_id
            page.wait_for_load_state("networkidle")
            shot(page, shots, "dags")

            # The trigger form, generated from the DAG's typed Params.
            page.get_by_role("link", name="dkmsks_partition").first.click()
            page.wait_for_url("**/dags/dkmsks_partition")
            page.get_by_role("heading", name="dkmsks_partition").wait_for()
            page.get_by_role("button", name="Trigger Dag").click()
            form = page.get_by_role("dialog")
            assert form.locator("input[name=element_workers]").input_value() == "20"
            form.get_by_role("combobox").first.click()
            page.get_by_role("option", name=FORM["method"], exact=True).click()
            for name in ("workers", "theta"):
                form.locator(f"input[name=element_{name}]").fill(str(FORM[name]))
            form.locator("input[name=element_warehouse]").fill(str(warehouse))
            assert form.locator("input[name=element_method]").input_value() == FORM["method"]
            form.get_by_text("Single Run", exact=True).scroll_into_view_if_needed()  # title and first Params
            shot(page, shots, "trigger-form")

            out, _ = ingest.communicate(timeout=600)
            assert ingest.returncode == 0, out[-3000:]
            assert "objects: 1,000 accepted" in out and "subscription events: 60 accepted" in out

            form.get_by_role("button", name="Trigger", exact=True).click()
            page.wait_for_url("**/dags/dkmsks_partition/runs/manual__*")
            run_id = unquote(page.url.rsplit("/runs/", 1)[1])
            run = api.wait_run("dkmsks_partition", run_id, timeout=900)
            # What the form sent is what the run got.
            assert {k: run["conf"][k] for k in FORM} == FORM
            assert run["conf"]["warehouse"] == str(warehouse)
            assert run["conf"]["gamma1"] == 100_000  # untouched fields keep their defaults

            page.reload()
            page.get_by_text("Success", exact=True).first.wait_for()
            page.get_by_role("link", name="partition", exact=True).first.wait_for()
            page.wait_for_load_state("networkidle")
            shot(page, shots, "run-success")
            browser.close()
    finally:
        if ingest.poll() is None:
            ingest.kill()
            ingest.wait()

    # The run partitioned with the form's values (read from the Delta log with delta-rs).
    lake = Lake.of(Warehouse(warehouse))
    plans = lake.read(tables.PLANS, columns=["plan_version", "method", "workers"]).to_pylist()
    assert [(p["plan_version"], p["method"], p["workers"]) for p in plans] == [(0, "sop", 3)]
    # The repartition DAG's Spark-free check reads this real warehouse the same way: a plan,
    # nothing processed after it, so a scheduled repartitioning would be skipped.
    assert "last processed t = 0" in repartition_skip_reason(Warehouse(warehouse), scheduled=True)
    assert repartition_skip_reason(Warehouse(warehouse), scheduled=False) is None
    # The plan's asset event names the form's warehouse and starts a micro-batch there; let it
    # finish so that stopping Airflow never interrupts a Spark job.
    assert api.asset_events("dkmsks_partition")[-1]["extra"] == {"warehouse": str(warehouse)}
    api.wait_run("dkmsks_microbatch", run_type="asset_triggered", after=run["queued_at"], timeout=600)
    assert api.asset_events("dkmsks_microbatch")[-1]["extra"] == {"warehouse": str(warehouse)}
