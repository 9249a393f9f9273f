"""What needs Spark or runs in Spark tasks: sessions and the catalog, the Spark readers and ingestion,
the initial state, compaction, the Arrow <-> core bridge of the worker tasks and the main server.
The storage protocol that needs no JVM is :mod:`dkmsks.storage`."""
