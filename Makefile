# fleetbench: `make demo` and `make test` work on a fresh machine; each creates its virtualenvs on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The CPU build on every host, GPUs or not, unless asked for another: `make EXTRA=gpu demo`.
# Why not the gpu extra when nvidia-smi lists a GPU (as it was): PyPI's only CUDA build of Paddle,
# paddlepaddle-gpu==2.6.2, needs the CUDA 11.8 and cuDNN 8.6 system libraries, so on any current
# (CUDA 12) host it loads neither and every demo cell was refused; the demo's emulated-network cells
# need a CPU build anyway, the parameter server runs on CPU, and `make test` runs CPU ranks
# (docs/guide/gpu.md: installing a GPU build, and validating a first GPU node).
EXTRA  ?= cpu
STAMP  := $(VENV)/.installed-$(EXTRA)
# A second virtualenv with the current Paddle 3.x CPU build: the collective family and the core are
# tested on it too (3.x has no parameter-server support: `make test-paddle3` deselects the `ps` tests).
VENV3  := .venv3
PY3    := $(VENV3)/bin/python
STAMP3 := $(VENV3)/.installed-cpu3
# What 3.x runs is chosen by marker, not by file: the unit and job tiers minus the parameter-server
# tests (marker `ps`: 3.x has no parameter server) and the root tier (emulated networks and clusters
# do not depend on the Paddle build), nor the files tests/conftest.py marks `build_neutral` (sweep
# YAML, Kubernetes documents, documented commands, charts). The unit tier runs on both builds: it is cheap, and it is where
# the collective family's configs, the comm arithmetic and the run layer meet the Paddle under test.
PADDLE3_MARKS  := not ps and not root and not build_neutral
PADDLE3_SELECT := -m "$(PADDLE3_MARKS)" tests/unit tests/job

comma := ,
# Every process that imports Paddle (each rank, each Paddle launcher, each device probe: ~740 in
# `make test`) imports setuptools through paddle.utils.cpp_extension; the setuptools a virtualenv
# starts with (65.5 for Python 3.11) imports pkg_resources with it, 0.1 s of CPU a process (import
# paddle 1.24 -> 1.11 s on 2.6.2, 1.18 -> 1.06 s on 3.3.1 with setuptools 84; both builds import and
# train with it). Capped: Paddle imports setuptools.command.easy_install, which setuptools deprecates.
SETUPTOOLS := setuptools>=70,<85
# $(call make-venv,DIR,EXTRAS): create DIR if needed and install fleetbench with EXTRAS into it.
define make-venv
test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
$(1)/bin/python -m pip install --quiet --upgrade pip "$(SETUPTOOLS)"
$(1)/bin/python -m pip install --quiet -e ".[$(2)]"
touch $@
endef

.PHONY: deps deps-demo deps-test install install-paddle3 demo test test-fresh test-fast test-paddle3 test-gpu-sim bench versions clean

# The Debian packages, in two sets (tools/deps.sh lists them and says why), installed when missing
# and we are root with apt; otherwise one line naming them. The demo's (iproute2, for its emulated
# network cells) never stops a user who is not root: its local cells need none.
deps-demo:
	@bash tools/deps.sh demo
deps-test:
	@bash tools/deps.sh test
deps: deps-test

install: $(STAMP)

# paddlepaddle and paddlepaddle-gpu both install paddle/: one virtualenv holds one build, so a
# .venv stamped for the other extra is refused in one line (exit 2) before pip touches it.
$(STAMP): setup.cfg pyproject.toml Makefile
	@case '$(EXTRA)' in cpu|gpu) ;; *) echo "make: EXTRA=$(EXTRA): expected cpu (the default) or gpu (paddlepaddle-gpu==2.6.2: CUDA 11.8, cuDNN 8.6)" >&2; exit 2;; esac
	@other=$$(ls -d $(VENV)/.installed-* 2>/dev/null | grep -vx '$(STAMP)' | head -1); \
	if [ -n "$$other" ]; then echo "make: $(VENV) holds the $${other##*/.installed-} build of Paddle and this host wants '$(EXTRA)' (paddlepaddle and paddlepaddle-gpu both own paddle/): run make clean first, or give this build its own virtualenv: make VENV=.venv-$(EXTRA) $(or $(MAKECMDGOALS),install)" >&2; exit 2; fi
	$(call make-venv,$(VENV),$(EXTRA)$(comma)test)

install-paddle3: $(STAMP3)

$(STAMP3): setup.cfg pyproject.toml Makefile
	$(call make-venv,$(VENV3),cpu3$(comma)test)

# Not root: the local ResNet50 and CTR cells run and the emulated-network cells are named as skipped,
# with the command that runs them. It ends by rewriting README.md's results section and images/.
demo: deps-demo install
	@[ "$$(id -u)" = 0 ] || echo "make demo: not root: the emulated-network cells are skipped (sudo make demo runs them)"
	$(VENV)/bin/fleetbench sweep --preset demo --results results/demo.jsonl
	$(VENV)/bin/fleetbench report results/demo.jsonl --images images --readme README.md --full docs/demo.md

# The whole suite on 2.6.2 and, beside it, the collective and core tests on 3.x (tools/test.sh says why).
# The two virtualenvs are made side by side: on a fresh 2-core machine each takes ~40 s, mostly
# unpacking Paddle's wheel on one core.
test: deps-test
	@$(MAKE) --no-print-directory -j2 install install-paddle3
	@bash tools/test.sh $(PY) $(PY3) "$(PADDLE3_MARKS)"

# The fresh-machine check (root): make demo as a user who is not root, then make test, on a new Debian
# 12 machine made with debootstrap and entered with namespaces of its own (docs/testing.md).
test-fresh:
	bash tools/fresh_machine.sh

# The pure tier only (tests/unit: no Paddle job, no launcher, no root): the quickest check of a change.
test-fast: install
	$(PY) -m pytest -q -m "not job and not root" tests/unit

test-paddle3: install-paddle3
	$(PY3) -m pytest -q $(PADDLE3_SELECT)

# The simulated GPU host alone (tests/gpu_sim; `make test` runs it with the other tiers: its root
# tests, sshd and Slurm nodes, in the root pass). Its 3.x builds run on .venv3's Paddle.
test-gpu-sim: deps-test install install-paddle3
	FLEETBENCH_TEST_PADDLE3=$(PY3) $(PY) -m pytest -q -m gpu_sim tests/gpu_sim

bench: install
	$(PY) bench/loop_overhead.py --preset small --repeats 5
	$(PY) bench/reader_throughput.py

# The same collective cells under 2.6.2 and 3.x, 3 repeats each, one file per Paddle (a file's
# resumable cells are keyed without the Paddle version), reported side by side. Needs a quiet machine.
versions: install install-paddle3
	$(VENV)/bin/fleetbench sweep --preset versions --results results/versions-paddle2.jsonl --log-dir log/sweep-versions-paddle2
	$(VENV3)/bin/fleetbench sweep --preset versions --results results/versions-paddle3.jsonl --log-dir log/sweep-versions-paddle3
	$(VENV)/bin/fleetbench report results/versions-paddle2.jsonl results/versions-paddle3.jsonl --images images/versions --title "Paddle versions"

clean:
	rm -rf $(VENV) $(VENV3) build *.egg-info
