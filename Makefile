# Yardstick: `make run` brings everything up; `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test venv browser bench clean-test

run: $(STAMP)
	$(PY) manage.py up $(ARGS)

test: $(STAMP) browser
	YARDSTICK_DATA_DIR=$${YARDSTICK_TEST_DATA_DIR:-var/test} $(PY) -m pytest $(PYTEST_ARGS)

venv: $(STAMP)

$(STAMP): requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Yardstick needs Python 3.11 (PyTorch 2.13 CPU build); found " + sys.version.split()[0] + ". Set PYTHON=/path/to/python3.11")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

# Browser tests drive Debian's Chromium through Playwright (Playwright's own
# browser download needs the open internet). Install it when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing Debian's chromium for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "The browser tests need Chromium: run 'sudo apt-get install chromium' (Debian/Ubuntu) or set CHROMIUM=/path/to/chrome"; exit 1; \
	  fi; }

bench: $(STAMP)
	for b in bench/*.py; do echo "== $$b"; YARDSTICK_DATA_DIR=var/bench $(PY) $$b || exit 1; done

clean-test:
	rm -rf var/test
