"""Pure Python/numpy core: cost models, partitioners, indexes, kNN update, oracle.

Nothing in this package touches Spark, Delta, Airflow, files or the clock; a test enforces it.
"""
