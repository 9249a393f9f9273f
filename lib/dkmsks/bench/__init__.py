"""Benchmarks: shared measurement helpers and the paper's experiments (``dkm bench paper``)."""
