# fleetbench: `make demo` and `make test` work on a fresh machine; each creates .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The gpu build when nvidia-smi lists a GPU, else the CPU build (the only one with parameter-server support).
EXTRA  := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU' && echo gpu || echo cpu)
STAMP  := $(VENV)/.installed-$(EXTRA)

.PHONY: install demo test bench clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRA),test]"
	touch $@

demo: install
	$(VENV)/bin/fleetbench sweep --preset demo --results results/demo.jsonl
	$(VENV)/bin/fleetbench report results/demo.jsonl --images images --readme README.md

test: install
	$(PY) -m pytest -q tests

bench: install
	$(PY) bench/loop_overhead.py --preset small --repeats 5
	$(PY) bench/reader_throughput.py

clean:
	rm -rf $(VENV) build *.egg-info
