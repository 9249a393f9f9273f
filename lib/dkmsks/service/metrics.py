"""The service's metrics, in Prometheus' text format at ``/metrics`` (``prometheus_client``).

Each service has a registry of its own (not the library's global one), so several apps in one
process — tests — count apart. What is measured:

- requests by route template and status, and their latency (``dkm_request_seconds``);
- publishing: rows accepted and refused, the publisher's appends (how many requests and rows
  each grouped, and how long each took), and each publish request's latency from arrival to
  its answer (``dkm_publish_seconds``);
- event streams: open streams, frames delivered, streams dropped by reason, resets and replays
  read from the journal, the fan-out's duration per commit and the delay from a journal commit
  to its fan-out (``dkm_event_delay_seconds``);
- the pipeline: last processed timestamp, pending timestamps and lag, refreshed with ``/v1/status``
  and by the status task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

_log = logging.getLogger("dkmsks.service")

CONTENT_TYPE = CONTENT_TYPE_LATEST
_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """The service's counters, gauges and histograms (module doc)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("dkm_requests", "HTTP requests by route and status", ["route", "status"], registry=r)
        self.request_seconds = Histogram("dkm_request_seconds", "HTTP request latency by route (streams: until "
                                         "their headers)", ["route"], buckets=_FAST, registry=r)
        self.rows = Counter("dkm_published_rows", "published object rows by outcome (accepted, refused)",
                            ["outcome"], registry=r)
        self.publish_seconds = Histogram("dkm_publish_seconds", "publish requests, arrival to answer",
                                         buckets=_FAST, registry=r)
        self.appends = Counter("dkm_publish_appends", "grouped landing appends (publish_rows calls)", registry=r)
        self.append_seconds = Histogram("dkm_publish_append_seconds", "one grouped append", buckets=_FAST,
                                        registry=r)
        self.append_requests = Histogram("dkm_publish_append_requests", "requests grouped into one append",
                                         buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000), registry=r)
        self.streams = Gauge("dkm_streams", "open event streams", registry=r)
        self.events = Counter("dkm_stream_events", "frames handed to event streams", registry=r)
        self.changes = Counter("dkm_result_changes", "result changes read from the journal", registry=r)
        self.dropped = Counter("dkm_streams_dropped", "event streams ended by the service, by reason", ["reason"],
                               registry=r)
        self.resets = Counter("dkm_stream_resets", "streams that began with a reset", registry=r)
        self.replays = Counter("dkm_stream_journal_replays", "resumes read from the journal (beyond the ring)",
                               registry=r)
        self.fanout_seconds = Histogram("dkm_fanout_seconds", "fan-out of one journal commit to every stream",
                                        buckets=_FAST, registry=r)
        self.event_delay = Histogram("dkm_event_delay_seconds", "journal commit to its fan-out", buckets=_FAST,
                                     registry=r)
        self.tail_errors = Counter("dkm_tail_errors", "failed looks at the journal (retried)", registry=r)
        self.events_through = Gauge("dkm_events_through", "last timestamp fanned out to the streams", registry=r)
        self.last_processed = Gauge("dkm_last_processed", "the pipeline's last processed timestamp", registry=r)
        self.pending = Gauge("dkm_pending_timestamps", "timestamps landed and not processed", registry=r)
        self.lag = Gauge("dkm_lag_seconds", "seconds since the journal's last commit while timestamps are pending",
                         registry=r)

    def render(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)

    # ------------------------------------------------------------------ the hub's hooks
    def tail_error(self, err: Exception) -> None:
        """A look at the journal failed (it is retried at the next poll)."""
        self.tail_errors.inc()
        _log.warning("journal tail: %s: %s", type(err).__name__, err)

    def fanned_out(self, changes: int, delivered: int, seconds: float) -> None:
        """A commit's changes went out."""
        self.changes.inc(changes)
        self.events.inc(delivered)
        self.fanout_seconds.observe(seconds)

    def stream_dropped(self, reason: str) -> None:
        """A stream was ended by the service."""
        self.dropped.labels(reason).inc()

    def stream_reset(self) -> None:
        """A stream began with a reset."""
        self.resets.inc()

    def journal_replay(self) -> None:
        """A resume read the journal."""
        self.replays.inc()

    def publish_append(self) -> Callable[[int, int, float], None]:
        """The publisher's hook: ``(rows, requests, seconds)`` of each grouped append."""
        def observe(rows: int, requests: int, seconds: float) -> None:
            self.appends.inc()
            self.append_seconds.observe(seconds)
            self.append_requests.observe(requests)
        return observe
