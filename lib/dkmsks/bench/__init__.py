"""Benchmarks, one module per ``dkm bench NAME`` (each with ``main(argv)``).

- :mod:`.common`, :mod:`.stats` and :mod:`.prose`: what every benchmark shares: the real data
  and its workloads, the machine and the commit every saved result carries, result files,
  subprocesses, the workload flags and the end of every ``main``, generated doc sections;
  medians, percentiles and ratios; the reports' sentences, in templates.
- :mod:`.paper` (with :mod:`.paper_spark`, the report's numbers, plots and prose): the paper's
  Tables 2-3 and Figures 7-10 -> ``docs/paper-reproduction.md``.
- :mod:`.core`: the in-memory core.
- :mod:`.pipeline` (with :mod:`.naive_spark`, :mod:`.follow`), :mod:`.backlog`,
  :mod:`.freshness`, :mod:`.spot_check`: the Spark + Delta pipeline and a live warehouse.

The measurements behind decisions already made that are worth re-running are scripts in the
repository's ``bench/`` folder, not modules of this package: ``kernel.py``, ``memory.py``,
``rust.py``; they use :mod:`.common` as these do.
"""
