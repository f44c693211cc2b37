# Yardstick: `make run` brings everything up; `make test` runs the whole suite.
SHELL := /bin/bash
# The newest Python on the PATH that every pinned requirement supports (3.11 to
# 3.13); each candidate is run, since a pyenv shim can exist for a version that
# is not active. PYTHON=/path/to/python overrides the choice.
PYTHONS := python3.13 python3.12 python3.11 python3
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for p in $(PYTHONS); do $$p -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null && { command -v $$p; break; }; done)
endif
# Set to a PyTorch wheel index to take torch from there (README: "PyTorch builds").
TORCH_INDEX_URL ?=
VENV := .venv
PY := $(VENV)/bin/python
# Two stamps: `make run` installs what Yardstick runs on (requirements.txt), `make test`
# adds the test tools and the real clients the suite drives (requirements-dev.txt).
# pip installs --no-compile: it compiles all 26,000 modules of .venv to bytecode, one after another (half
# the time of an install), where a process imports a few thousand; Python compiles those as it imports them.
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# Set before `run`, whose prerequisites are read where the rule stands.
EXAMPLES_STAMP := $(VENV)/.installed-examples

.PHONY: run test coverage lint venv dev-venv examples system-packages browser prometheus slurm bench clean-test which-python

# With what the example recipes import (below), so the first launch (trl-grpo-cpu) runs out of the box.
run: $(STAMP) $(EXAMPLES_STAMP)
	$(PY) manage.py up $(ARGS)

# Test processes side by side (pytest-xdist), each with its own embedded servers
# (tests/parallel.py); TEST_WORKERS=0 runs the suite in one process. --dist loadgroup keeps
# the tests of one xdist_group in one process (the Ray and Slurm tests, in turn: tests/parallel.py).
# Three, on two cores too: a third process keeps the cores busy while the others wait on a cluster, a browser or
# a launched run (the whole suite on the 2-core machine: 551 s with three, 667 s with two, the same hour).
TEST_WORKERS ?= 3

# The suite runs with Python keeping the bytecode it compiles, even where PYTHONDONTWRITEBYTECODE is set (CI machines
# set it): else each of its processes would compile again every module it imports, torch's and ours alike.
WRITE_BYTECODE := env -u PYTHONDONTWRITEBYTECODE
# The test tools in .venv and Debian's packages are installed side by side (pip and apt-get each wait on downloads).
test:
	@$(MAKE) --no-print-directory -j2 $(DEV_STAMP) system-packages
	@$(MAKE) --no-print-directory lint
	$(WRITE_BYTECODE) YARDSTICK_DATA_DIR=$${YARDSTICK_TEST_DATA_DIR:-var/test} $(PY) -m pytest -p tests.parallel -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The suite under coverage.py (.coveragerc: lines and branches of the product, in every Python process the tests
# start), then its report: var/coverage/report.txt, and var/coverage/html/index.html file by file.
coverage:
	@$(MAKE) --no-print-directory -j2 $(DEV_STAMP) system-packages
	rm -rf var/coverage && mkdir -p var/coverage
	export COVERAGE_FILE=$(CURDIR)/var/coverage/data; \
	$(WRITE_BYTECODE) YARDSTICK_DATA_DIR=$${YARDSTICK_TEST_DATA_DIR:-var/test} \
	  $(VENV)/bin/coverage run -m pytest -p tests.parallel -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS); status=$$?; \
	$(VENV)/bin/coverage combine --quiet && $(VENV)/bin/coverage report > var/coverage/report.txt; \
	$(VENV)/bin/coverage html --quiet -d var/coverage/html; tail -1 var/coverage/report.txt; exit $$status

# The architecture of docs/architecture.md (.importlinter) and a small rule set of mistakes (ruff.toml).
lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/lint-imports --no-cache

venv: $(STAMP)
dev-venv: $(DEV_STAMP)

$(STAMP): requirements.txt
	@test -n "$(PYTHON)" || { echo "Yardstick needs Python 3.11, 3.12 or 3.13 and found none on the PATH (tried $(PYTHONS)). Install one, or set PYTHON=/path/to/python3.x"; exit 1; }
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if (3, 11) <= v <= (3, 13) else "Yardstick needs Python 3.11, 3.12 or 3.13 (what its pinned requirements support); $(PYTHON) is " + sys.version.split()[0])'
	@echo "Using $$($(PYTHON) -c 'import sys; print(sys.executable, sys.version.split()[0])')"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-compile --upgrade pip
	$(if $(TORCH_INDEX_URL),$(PY) -m pip install --quiet --no-compile --index-url $(TORCH_INDEX_URL) "$$(grep -E '^torch==' requirements.txt)")
	$(PY) -m pip install --quiet --no-compile -r requirements.txt
	touch $(STAMP)

# What the example recipes' scripts import (TRL, transformers, MLflow's client, yardstick_mlflow): `make run` installs
# them (a launch worker runs the examples with its own Python); `make examples` installs them alone.
examples: $(EXAMPLES_STAMP)

$(EXAMPLES_STAMP): $(STAMP) requirements-examples.txt client/pyproject.toml
	$(PY) -m pip install --quiet --no-compile -r requirements-examples.txt
	$(PY) -m pip install --quiet --no-compile -e ./client
	touch $(EXAMPLES_STAMP)

$(DEV_STAMP): $(STAMP) requirements-dev.txt requirements-examples.txt client/pyproject.toml Makefile
# With the client package (client/): the tests run real MLflow clients with it installed.
	$(PY) -m pip install --quiet --no-compile -r requirements-dev.txt -e ./client
# veRL's wheel, for its own logging code (verl/utils/tracking.py) in the veRL test: unpacked
# into a folder of its own, off the path (it ships a top-level `tests` package that would
# shadow ours), without its dependencies (Ray, vLLM, a torch of its own) that module never uses.
	$(PY) -m pip install --quiet --no-compile --no-deps --upgrade --target $(VENV)/verl verl==0.9.1
	touch $(DEV_STAMP)

# Debian's packages the tests drive (their own downloads need the open internet): Chromium's headless shell for the
# browser tests (through Playwright; a full `chromium` does too, with more processes and dependencies), Prometheus for the exporter's test (it scrapes /metrics), slurmctld and slurmd for the Slurm
# executor's tests (a one-node cluster, tests/slurm_cluster.py). `make test` installs every missing one at once, as
# root (one apt-get update, while pip fills .venv); otherwise it says what to install. `make browser` (prometheus,
# slurm) installs one.
NEEDS ?= browser prometheus slurm
system-packages:
	@chromium=""; others=""; \
	case " $(NEEDS) " in *" browser "*) test -n "$$CHROMIUM" || command -v chromium-headless-shell >/dev/null 2>&1 \
	  || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
	  || chromium="chromium-headless-shell";; esac; \
	case " $(NEEDS) " in *" prometheus "*) test -x /usr/bin/prometheus || others="prometheus";; esac; \
	case " $(NEEDS) " in *" slurm "*) test -x /usr/sbin/slurmctld -a -x /usr/sbin/slurmd -a -x /usr/bin/sbatch \
	  || others="$$others slurm-wlm munge";; esac; \
	missing="$$(echo $$chromium $$others)"; test -n "$$missing" || exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "The tests need Debian's $$missing: run 'sudo apt-get install $$missing' (Debian/Ubuntu)$${chromium:+, or set \
	  CHROMIUM=/path/to/chrome}"; \
	  exit 1; fi; \
	echo "Installing Debian's $$missing for the tests"; \
	apt-get update -qq || exit 1; \
	if [ -n "$$chromium" ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null || exit 1; fi; \
	if [ -n "$$others" ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$others >/dev/null; fi

browser prometheus slurm:
	@$(MAKE) --no-print-directory system-packages NEEDS=$@

bench: $(DEV_STAMP)
	for b in bench/*.py; do echo "== $$b"; YARDSTICK_DATA_DIR=var/bench $(PY) $$b || exit 1; done

which-python:
	@echo "$(PYTHON)"

clean-test:
	rm -rf var/test
