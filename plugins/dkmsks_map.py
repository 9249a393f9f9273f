"""The live map of ``dkm serve`` in Airflow's UI: an entry "Live map" in the navigation's Browse
menu that opens the service's ``/map`` page inside Airflow (an Airflow 3 *external view* with a
``url_route``, which the UI shows in a frame at ``/plugin/dkmsks-map``).

The page is the service's own, served from its origin: it asks for a token of the service (``dkm
token create``), not for Airflow's login, and the service must let Airflow frame it (``dkm serve
--frame-ancestor <Airflow's origin>``). Where the service is: ``$DKMSKS_MAP_URL`` when the
api-server starts (default ``http://127.0.0.1:8750/map``, ``scripts/serve.sh``'s port), an
address the operator's browser can reach. ``scripts/airflow.sh`` puts this folder in
``AIRFLOW__CORE__PLUGINS_FOLDER``. Nothing of dkmsks is imported: the api-server only reads this
file.
"""

from __future__ import annotations

import os

from airflow.plugins_manager import AirflowPlugin

MAP_URL = os.environ.get("DKMSKS_MAP_URL", "http://127.0.0.1:8750/map")


class DkmsksMapPlugin(AirflowPlugin):
    """The "Live map" entry of Airflow's Browse menu (module doc)."""

    name = "dkmsks_map"
    external_views = [
        {
            "name": "Live map",
            "href": MAP_URL,
            "url_route": "dkmsks-map",
            "destination": "nav",
            "category": "browse",
        },
    ]
