# The two commands of the README: `make demo` (main job end to end) and `make test`.
# Both bootstrap everything they need and are safe to re-run.
.PHONY: bootstrap demo test test-unit lint clean

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	@scripts/demo.sh

test: bootstrap
	@scripts/test.sh

test-unit: bootstrap
	@.venv/bin/python -m pytest -m unit -q -n 2

# ruff (style, bugs, docstrings) on all Python code and mypy on lib/; settings in pyproject.toml.
# scripts/test.sh runs it before the suite.
lint: bootstrap
	@scripts/lint.sh

clean:
	rm -rf .cache/demo .pytest_cache
