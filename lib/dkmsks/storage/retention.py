"""The as-of horizon: how long every table keeps the history ``dkm export --as-of`` reads.

``--as-of T`` rebuilds the results from an earlier ``knn_state`` version plus the journal
(DESIGN §9), so it is exact only while that version's log entry and data files exist. Delta
drops both on its own schedule: ``VACUUM`` deletes files removed longer ago than
``delta.deletedFileRetentionDuration``, and each checkpoint deletes log entries older than
``delta.logRetentionDuration``. The project sets both to one documented horizon (hours,
``$DKMSKS_AS_OF_RETENTION_HOURS``, default a week), on every table, in each maintenance run
(:mod:`dkmsks.jobs.maintain`); equal values, because Delta refuses a log retention shorter than
the file retention, and a longer one would keep log entries whose files are gone.
"""

from __future__ import annotations

import os

#: The environment variable that sets the horizon, and its default (Delta's own default for files).
ENV = "DKMSKS_AS_OF_RETENTION_HOURS"
DEFAULT_HOURS = 168
LOG_RETENTION = "delta.logRetentionDuration"
FILE_RETENTION = "delta.deletedFileRetentionDuration"
#: Below this, Delta's own VACUUM safety check would refuse the retention (its default file retention).
DELTA_SAFETY_HOURS = 168


def horizon_hours(hours: int | None = None) -> int:
    """``hours``, else ``$DKMSKS_AS_OF_RETENTION_HOURS``, else :data:`DEFAULT_HOURS`; checked."""
    if hours is None:
        text = os.environ.get(ENV, "").strip()
        if not text:
            return DEFAULT_HOURS
        try:
            hours = int(text)
        except ValueError:
            raise ValueError(f"{ENV}={text!r}: give a whole number of hours, e.g. {DEFAULT_HOURS}") from None
    if int(hours) < 0:
        raise ValueError(f"the as-of horizon must be at least 0 hours, got {hours}")
    return int(hours)


def retention_properties(hours: int) -> dict[str, str]:
    """The table properties that make a table keep ``hours`` of history (log and files alike)."""
    interval = f"interval {int(hours)} hours"
    return {LOG_RETENTION: interval, FILE_RETENTION: interval}


def describe_retention(configuration: dict[str, str]) -> str:
    """What a table's configuration keeps, in words, for error messages and reports."""
    files = configuration.get(FILE_RETENTION)
    logs = configuration.get(LOG_RETENTION)
    if files is None and logs is None:
        return "Delta's defaults (removed files 1 week, log 30 days; no maintenance run has set a horizon)"
    return f"removed files '{files or 'interval 1 week'}', log '{logs or 'interval 30 days'}'"
