"""``dkm serve``: the pipeline's publish/subscribe interface over HTTP, without a JVM.

Apps on other machines publish objects, register subscriptions and receive their results'
changes through this ASGI service (FastAPI on uvicorn) instead of reaching the warehouse's
storage themselves. It is a process beside the pipeline, like a publisher and a reader at
once (docs/design.md §10, "The service"): every write goes through the landing protocol of
:mod:`dkmsks.storage.landing`, every read through the Delta logs (delta-rs), and it imports
nothing of Spark (a test imports the package with pyspark refused).

One job per module:

- :mod:`~dkmsks.service.app`: the routes and the application's wiring;
- :mod:`~dkmsks.service.auth`: bearer tokens with scopes (``dkm token``), per-token rate limits;
- :mod:`~dkmsks.service.registry`: who owns which subscription, and idempotency keys (SQLite);
- :mod:`~dkmsks.service.schemas`: the request and response bodies;
- :mod:`~dkmsks.service.problems`: errors as RFC 9457 problem details naming the field;
- :mod:`~dkmsks.service.bodies`: request bodies read and validated, each broken rule a problem;
- :mod:`~dkmsks.service.middleware`: the body-size limit and the requests' metrics (pure ASGI);
- :mod:`~dkmsks.service.publisher`: concurrent publishes grouped into few Delta commits;
- :mod:`~dkmsks.service.events`: one tailer of the journal fanned out to every event stream;
- :mod:`~dkmsks.service.metrics`: the Prometheus metrics;
- :mod:`~dkmsks.service.livemap`: the live map at ``/map`` and the reads it makes (its page in
  ``web/``, the vendored Swagger UI, Leaflet and outlines in ``static/``: scripts/vendor_web.sh).
"""
