"""dkmsks: exact distributed spatial-keyword kNN monitoring (DkM-SKS) on Spark and Delta Lake."""

__version__ = "0.1.0"
