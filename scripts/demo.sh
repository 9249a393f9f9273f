#!/usr/bin/env bash
# The README's main job, on local Spark with embedded defaults and the real data.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export SPARK_LOCAL_IP=127.0.0.1
exec .venv/bin/dkm demo "$@"
