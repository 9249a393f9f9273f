# The two commands of the README: `make demo` (main job end to end) and `make test`.
# Both bootstrap everything they need and are safe to re-run.
.PHONY: bootstrap demo test test-unit clean

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	@scripts/demo.sh

test: bootstrap
	@scripts/test.sh

test-unit: bootstrap
	@.venv/bin/python -m pytest -m unit -q

clean:
	rm -rf .cache/demo .pytest_cache
