"""Benchmarks, one module per ``dkm bench NAME`` (each with ``main(argv)``).

- :mod:`.common` and :mod:`.stats`: what every benchmark shares: the real data, the machine and
  the commit every saved result carries, result files, subprocesses, generated doc sections;
  medians, ratios and the timing of repeated runs.
- :mod:`.paper` (with :mod:`.paper_spark`, the report's numbers, plots and prose): the paper's
  Tables 2-3 and Figures 7-10 -> ``docs/paper-reproduction.md``.
- :mod:`.core`, :mod:`.core_init`, :mod:`.partition`: the in-memory core.
- :mod:`.pipeline` (with :mod:`.naive_spark`, :mod:`.follow`), :mod:`.backlog`,
  :mod:`.spot_check`: the Spark + Delta pipeline; :mod:`.append`: a run's commit (one journal
  append) through Spark and through delta-rs.
"""
