"""The Spark settings every session gets: quiet expected warnings, UI and event logs on request."""

from __future__ import annotations

from pathlib import Path

import pytest

from dkmsks.spark.session import LOG_CONFIG, session_conf, spark_submit_conf_args
from dkmsks.warehouse import Warehouse

pytestmark = pytest.mark.unit


def test_by_default_no_ui_no_event_logs_and_the_projects_log_settings(tmp_path):
    conf = session_conf(Warehouse(tmp_path))
    assert conf["spark.ui.enabled"] == "false" and "spark.eventLog.enabled" not in conf
    assert f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}" in conf["spark.driver.extraJavaOptions"]
    assert conf["spark.sql.catalogImplementation"] == "in-memory"
    assert conf["spark.sql.warehouse.dir"] == str(tmp_path / "tables")


def test_the_log_settings_quiet_only_named_expected_warnings():
    text = LOG_CONFIG.read_text()
    assert "rootLogger.level = warn" in text  # every other warning still shows
    quieted = {line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("logger.")
               and ".name" in line}
    assert "org.apache.hadoop.util.NativeCodeLoader" in quieted and "org.apache.spark" not in quieted


def test_the_ui_on_request_binds_to_loopback_and_keeps_event_logs(tmp_path):
    warehouse = Warehouse(tmp_path)
    conf = session_conf(warehouse, ui=True)
    assert conf["spark.ui.enabled"] == "true" and conf["spark.ui.host"] == "127.0.0.1"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.eventLog.enabled"] == "true"
    assert Path(conf["spark.eventLog.dir"].removeprefix("file://")) == tmp_path / "run" / "spark-events"
    assert (tmp_path / "run" / "spark-events").is_dir()
    args = spark_submit_conf_args(warehouse, ui=True)
    assert "spark.ui.host=127.0.0.1" in args


def test_the_driver_listens_on_loopback_unless_a_deployment_names_its_addresses(tmp_path, monkeypatch):
    import socket

    monkeypatch.delenv("DKMSKS_DRIVER_BIND_ADDRESS", raising=False)
    monkeypatch.delenv("DKMSKS_DRIVER_HOST", raising=False)
    conf = session_conf(Warehouse(tmp_path))
    assert (conf["spark.driver.bindAddress"], conf["spark.driver.host"]) == ("127.0.0.1", "127.0.0.1")
    # A driver in a container whose executors run in others: all interfaces, called by name.
    monkeypatch.setenv("DKMSKS_DRIVER_BIND_ADDRESS", "0.0.0.0")
    conf = session_conf(Warehouse(tmp_path))
    assert (conf["spark.driver.bindAddress"], conf["spark.driver.host"]) == ("0.0.0.0", socket.gethostname())
    monkeypatch.setenv("DKMSKS_DRIVER_HOST", "scheduler")
    assert session_conf(Warehouse(tmp_path))["spark.driver.host"] == "scheduler"
    assert "spark.driver.host=scheduler" in spark_submit_conf_args(Warehouse(tmp_path))
