# Two commands do all the set-up on a fresh machine:
#   make demo   runs the demo campaign through Airflow against this machine (results in DuckDB)
#   make test   runs ruff, mypy and the test suite (unit, integration, e2e)
# Both create .venv on first use and refresh it when the requirements change.

VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTHON ?= python3
SSHD   := /usr/sbin/sshd
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint venv constraints clean

$(STAMP): requirements.txt requirements-dev.txt constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt -c constraints.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/bench run moe_kernel_local

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The tests start a real OpenSSH server on a loopback port (tests/sshd.py): a second "machine".
$(SSHD):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openssh-server openssh-client

test: lint $(SSHD)
	TRITON_INTERPRET=1 $(VENV)/bin/pytest

# Re-pin the whole resolved set after changing requirements*.txt.
constraints: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | sed 's/^torch==\(.*\)+cpu$$/torch==\1/' > constraints.txt

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
