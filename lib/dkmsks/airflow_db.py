"""Connection arguments for Airflow's metadata database, imported by Airflow by path.

``scripts/airflow.sh`` runs Airflow on SQLite (one file in ``AIRFLOW_HOME``). SQLite lets one
writer in at a time and Python's driver gives up after 5 s by default; on a busy 2-core machine
a scheduler or task commit can hold the file that long, and the API then answers 500 to a DAG
trigger (seen in a CI run: ``INSERT INTO log`` "database is locked" after 5.02 s). Waiting
longer is the right behaviour for this single-machine setup; a production deployment uses
PostgreSQL (``docker-compose.yml``), where these settings are not used.

One stall no timeout fixes (seen once in CI, in Airflow's code, not ours): the api-server commits
its audit-log row (``api_fastapi/logging/decorators.py``, an ``async`` dependency using a sync
session) inside its event loop. If a task's request to the same process holds the write lock
then, its session is only closed by the blocked loop, so both wait until the timeout and the
trigger answers after a minute. The tests therefore trigger nothing while a task is running
(``tests/e2e/conftest.py``); the README tells users.
"""

from __future__ import annotations

#: ``[database] sql_alchemy_connect_args`` (sqlite3.connect: seconds to wait for a lock).
SQLITE_CONNECT_ARGS = {"timeout": 60}
#: ``[database] sql_alchemy_connect_args_async`` (aiosqlite accepts the same argument).
SQLITE_CONNECT_ARGS_ASYNC = {"timeout": 60}
