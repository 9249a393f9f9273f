"""The pipeline's jobs, each over the Spark/Delta adapters in :mod:`dkmsks.spark`.

``partition`` (the first plan and repartitions), ``microbatch`` (every pending timestamp,
exactly once) and ``follow`` (warm workers, each new timestamp as it lands). Siblings do not
import each other; what they share (the journal, the main server, compaction, plans) lives in
:mod:`dkmsks.spark`. ``spark_apps/`` and the ``dkm`` commands call them.
"""
