# `make test` builds everything it needs from nothing: a fresh clone needs only python3 >= 3.11.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: test lint typecheck unit install bench test-bench docs demo clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

lint: install
	$(BIN)/ruff check crew tests bench
	$(BIN)/ruff format --check crew tests bench

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest

test: lint typecheck unit

# The example crew in .crew-example/: four agents, answered by its autoRespond rules.
demo: install
	$(BIN)/crew run .crew-example/crew.toml

bench: install
	$(BIN)/python -m bench

# That the benchmarks still run against the library (their quick sizes; not part of `make test`).
test-bench: install
	$(BIN)/pytest -m bench

docs: install
	$(BIN)/python -m crew.docgen

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
