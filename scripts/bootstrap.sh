#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: a venv with the pinned packages, this project
# installed editable, and the Delta Lake jars from Maven Central. Re-runs are no-ops.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi

# Reinstall only when the pins or the project metadata change.
stamp=".venv/.installed-$(cat requirements.lock pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing pinned packages (first run takes ~3 min)"
  .venv/bin/python -m pip install -q --upgrade "pip==26.3"
  .venv/bin/python -m pip install -q -r requirements.lock
  .venv/bin/python -m pip install -q --no-deps -e .
  rm -f .venv/.installed-*
  touch "$stamp"
fi

# Delta's jars (delta-spark, delta-storage, delta-kernel-*) for pyspark's bundled Spark.
# Only io.delta artifacts are copied: Spark, Scala and Hadoop already ship with pyspark.
jars=.cache/jars
if [ ! -f "$jars/.complete" ]; then
  if command -v mvn >/dev/null 2>&1; then
    echo "bootstrap: fetching Delta jars with Maven into $jars"
    mkdir -p "$jars"
    mvn -B -q -f build/delta-jars.pom.xml dependency:copy-dependencies \
      -DincludeGroupIds=io.delta -DoutputDirectory="$PWD/$jars"
    touch "$jars/.complete"
  else
    echo "bootstrap: mvn not found; Spark will resolve the Delta jars through Ivy on first start"
  fi
fi

# A warehouse on S3 (dkmsks.spark.s3): Hadoop's S3A connector and the AWS SDK modules it calls
# (build/s3-jars.pom.xml; only the groups pyspark does not ship), and the LogStore that commits
# by create-if-absent (build/logstore). Redone when either pom or the LogStore's source changes.
s3jars=.cache/jars-s3
s3stamp="$s3jars/.complete-$(cat build/s3-jars.sh build/s3-jars.pom.xml build/logstore/pom.xml \
  $(find build/logstore/src -type f | LC_ALL=C sort) | sha256sum | cut -c1-16)"
if [ ! -f "$s3stamp" ]; then
  if command -v mvn >/dev/null 2>&1; then
    echo "bootstrap: fetching the S3A jars and building the S3 LogStore into $s3jars"
    rm -rf "$s3jars"
    build/s3-jars.sh "$s3jars"
    touch "$s3stamp"
  else
    echo "bootstrap: mvn not found; a warehouse on S3 needs the S3A jars and LogStore (install Maven, re-run)"
  fi
fi

# The worker kernels, compiled into numba's cache (lib/dkmsks/core/__pycache__/numba-<digest of the
# core's sources>, dkmsks.numba_cache) unless it holds them for these sources already (then a load,
# ~1 s): the first Spark job's worker processes then load them instead of each compiling them at
# once (a cold compile of every kernel took 48 s on the 2-core VM).
.venv/bin/python -c "from dkmsks.core.warm import warm_up; warm_up()"
