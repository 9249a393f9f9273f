"""Benchmarks, one module per ``dkm bench NAME`` (each with ``main(argv)``).

- :mod:`.common` and :mod:`.stats`: what every benchmark shares: the real data, the machine and
  the commit every saved result carries, result files, subprocesses, generated doc sections;
  medians, percentiles and ratios.
- :mod:`.paper` (with :mod:`.paper_spark`, the report's numbers, plots and prose): the paper's
  Tables 2-3 and Figures 7-10 -> ``docs/paper-reproduction.md``.
- :mod:`.core`: the in-memory core.
- :mod:`.pipeline` (with :mod:`.naive_spark`, :mod:`.follow`), :mod:`.backlog`,
  :mod:`.spot_check`: the Spark + Delta pipeline.
"""
