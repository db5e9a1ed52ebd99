# The README's quick start: `make demo` runs the sample scenario, `make test` runs every check.
# Both create (or reuse) .venv and install what they need, so a fresh machine with Python 3.11 works.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m samples.demo $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict idempotent_lambda

test: lint typecheck
	$(BIN)/coverage erase
	$(BIN)/coverage run -m pytest -q tests
	$(BIN)/coverage report

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .coverage .mypy_cache .ruff_cache build *.egg-info
