#!/usr/bin/env bash
# The test suite, as CI runs it: every layer (unit, spark, dags, e2e). Services a test needs
# are started by its fixture on 127.0.0.1 and stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
# Arguments go to pytest; without a test path among them the whole suite (tests/) runs, and
# the static checks (scripts/lint.sh, also `make lint`) come first: the suite does not start
# when they fail.
paths=()
for arg in "$@"; do [[ "$arg" == tests* ]] && paths+=("$arg"); done
if [ ${#paths[@]} -eq 0 ]; then
  scripts/lint.sh || { echo "test.sh: lint failed (ruff/mypy, above); the tests did not run" >&2; exit 1; }
  set -- tests "$@"
fi
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export SPARK_LOCAL_IP=127.0.0.1
# The suite starts ~100 short-lived Spark drivers: C1-only JIT starts each ~3 s sooner
# (measured: empty micro-batch 11.3 -> 8.2 s). Benchmarks and real runs keep the default JIT.
# C1-only also shrinks the JVM's default code cache from 240 to 48 MB, which a long ingest
# filled ("Out of space in CodeCache for adapters" killed the SparkContext mid-job, one CI run
# in four): the cache keeps its usual size.
export DKMSKS_DRIVER_JAVA_OPTS=${DKMSKS_DRIVER_JAVA_OPTS:--XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m}
# A class-data-sharing archive of Spark's classes (built once per JDK, jars and flags; ~40 s):
# each driver then starts ~5 s sooner (13.3 -> 8.2 s to a first Delta commit, measured).
if archive=$(.venv/bin/python scripts/jvm_class_archive.py 2> .cache/jvm_class_archive.log | tail -n 1) \
    && [ -f "$archive" ]; then
  export DKMSKS_DRIVER_JAVA_OPTS="$DKMSKS_DRIVER_JAVA_OPTS -XX:SharedArchiveFile=$archive"
else
  echo "test.sh: no JVM class archive (see .cache/jvm_class_archive.log); drivers start without it" >&2
fi
scripts/install_test_deps.sh  # Debian's chromium and docker-compose for the e2e tests; a no-op once installed
# Two pytest-xdist workers: most of the suite's time is JVM and Airflow start-up and waiting,
# which two processes overlap on two cores. tests/conftest.py keeps tests that share a fixture
# (one Airflow, one SparkSession, one prepared warehouse) on one worker. -n 0: one process.
exec .venv/bin/python -m pytest -q -n "${DKMSKS_TEST_WORKERS:-2}" --dist loadgroup "$@"
