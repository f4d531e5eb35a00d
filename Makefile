# Two entry points for a fresh clone (only python3 and make needed):
#   make demo   run the monitoring agent on its embedded demo
#   make test   lint, type-check, build the docs and run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# One stamp per install: the demo's (the agent and the simulator, nothing else) does not stand
# for the tests' (the whole development toolchain), so `make test` after `make demo` installs
# the rest. Each is remade when pyproject.toml changes.
DEMO_STAMP := $(VENV)/.installed-demo
STAMP      := $(VENV)/.installed

.PHONY: demo test lint typecheck docs pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[agent,simulator]'
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/failover-agent demo $(DEMO_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir $(VENV)/site

# Tests marked `alone` time several processes against tight bounds: they run after the
# others, by themselves (see tests/conftest.py).
pytest: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "not alone" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -p no:xdist -m alone $(PYTEST_ARGS) || test $$? -eq 5  # 5: PYTEST_ARGS selected none

test: lint typecheck docs pytest

bench: $(STAMP)
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
