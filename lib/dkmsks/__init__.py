"""dkmsks: exact distributed spatial-keyword kNN monitoring (DkM-SKS) on Spark and Delta Lake."""

__version__ = "0.1.0"

from dkmsks.numba_cache import configure as _configure_numba_cache

# Before any kernel is compiled or loaded: numba's cache keyed by the core's sources.
_configure_numba_cache()
