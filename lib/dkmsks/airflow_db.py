"""Connection arguments for Airflow's metadata database, imported by Airflow by path.

``scripts/airflow.sh`` runs Airflow on SQLite (one file in ``AIRFLOW_HOME``). SQLite lets one
writer in at a time and Python's driver gives up after 5 s by default; on a busy 2-core machine
a scheduler or task commit can hold the file that long, and the API then answers 500 to a DAG
trigger (seen in a CI run: ``INSERT INTO log`` "database is locked" after 5.02 s). Waiting
longer is the right behaviour for this single-machine setup; a production deployment uses
PostgreSQL (``docker-compose.yml``), where these settings are not used.
"""

from __future__ import annotations

#: ``[database] sql_alchemy_connect_args`` (sqlite3.connect: seconds to wait for a lock).
SQLITE_CONNECT_ARGS = {"timeout": 60}
#: ``[database] sql_alchemy_connect_args_async`` (aiosqlite accepts the same argument).
SQLITE_CONNECT_ARGS_ASYNC = {"timeout": 60}
