"""The warehouse's storage protocol over delta-rs, without Spark: table names, reading and
appending Delta tables (:mod:`.lake`), the journal and its commit, landing and publishing, the
writer lock, the state's reads, exports and the as-of horizon. The client, the readers
(``dkm status``/``results``/``watch``/``export``), publishers and the DAGs' checks import only
this package and ``core``; nothing here imports pyspark (tests/unit/test_storage_imports.py)."""
