#!/usr/bin/env bash
# The static checks (`make lint`; scripts/test.sh runs them before the suite): ruff on all
# Python code, mypy on lib/. Both read their settings from pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
.venv/bin/ruff check lib dags plugins spark_apps tests scripts bench || status=1
.venv/bin/mypy || status=1  # [tool.mypy] files = lib
if [ "$status" -ne 0 ]; then
  echo "lint: failed (above); fix the code, or see [tool.ruff]/[tool.mypy] in pyproject.toml" >&2
fi
exit "$status"
