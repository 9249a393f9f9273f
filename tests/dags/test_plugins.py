"""The Airflow plugin of plugins/: Airflow's plugin manager loads it without import errors and
its "Live map" entry is an external view the api-server's UI accepts, pointing at dkm serve's
/map (``$DKMSKS_MAP_URL``). Run in a fresh interpreter: the plugin manager caches what it
loaded for the life of a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.dags

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"

PROBE = """
import json
from airflow import plugins_manager
from airflow.api_fastapi.core_api.datamodels.plugins import PluginResponse
plugins, errors = plugins_manager._get_plugins()
info = plugins_manager.get_plugin_info()
ours = [PluginResponse.model_validate(p).model_dump() for p in info if p["name"] == "dkmsks_map"]
views, _ = plugins_manager._get_ui_plugins()
print(json.dumps({"errors": errors, "plugins": ours, "ui_routes": [v.get("url_route") for v in views]}))
"""


def probe(tmp_path: Path, **env: str) -> dict:
    inherited = {k: v for k, v in os.environ.items() if k != "DKMSKS_MAP_URL"}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, env={
        **inherited, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS), **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_live_map_is_an_external_view_in_the_browse_menu(tmp_path):
    found = probe(tmp_path, DKMSKS_MAP_URL="https://dkm.example.org:8750/map")
    assert found["errors"] == {}
    [plugin] = found["plugins"]
    [view] = plugin["external_views"]
    assert view == {"name": "Live map", "href": "https://dkm.example.org:8750/map", "url_route": "dkmsks-map",
                    "destination": "nav", "category": "browse", "icon": None, "icon_dark_mode": None,
                    "nav_top_level": False}
    assert "dkmsks-map" in found["ui_routes"]


def test_the_default_is_scripts_serve_sh_s_port(tmp_path):
    found = probe(tmp_path)
    assert found["plugins"][0]["external_views"][0]["href"] == "http://127.0.0.1:8750/map"


def test_the_plugin_imports_nothing_of_the_project():
    text = (PLUGINS / "dkmsks_map.py").read_text()
    assert "import dkmsks" not in text and "from dkmsks" not in text
