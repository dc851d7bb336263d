# Two commands do all the set-up on a fresh machine:
#   make demo   runs the demo campaign through Airflow against this machine (results in DuckDB)
#   make test   runs ruff, mypy and the test suite (unit, integration, e2e)
#   make up     starts Airflow for this project here (UI, Benchmarks view); make down stops it
# Both create .venv on first use and refresh it when the requirements change.

VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTHON ?= python3
# The tests start a real OpenSSH server on loopback ports and drive the UI with Debian's Chromium.
SYSTEM_DEPS := /usr/sbin/sshd /usr/bin/chromium
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint venv constraints clean compose-env up down

$(STAMP): requirements.txt requirements-dev.txt constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt -c constraints.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/bench run moe_kernel_local

# The project's Airflow on this machine, no Docker: api-server, scheduler, dag-processor, triggerer (LocalExecutor),
# metadata in the local PostgreSQL when it answers, else SQLite. Prints the URL and the login; `make down` stops it.
up: $(STAMP)
	$(VENV)/bin/bench up

down:
	$(VENV)/bin/bench down

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

$(SYSTEM_DEPS):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openssh-server openssh-client chromium

test: lint $(SYSTEM_DEPS)
	TRITON_INTERPRET=1 $(VENV)/bin/pytest

# docker-compose.yaml's gpu-sim: its host key and the workers' client key (./secrets/, never in git),
# and in .env the pinned host key and the UID the containers run as.
compose-env:
	mkdir -p secrets var logs
	test -f secrets/gpu_sim_host_ed25519 || ssh-keygen -q -t ed25519 -N "" -C gpu-sim -f secrets/gpu_sim_host_ed25519
	test -f secrets/gpu_sim_client_ed25519 || ssh-keygen -q -t ed25519 -N "" -C airflow -f secrets/gpu_sim_client_ed25519
	touch .env
	grep -vE '^(AIRFLOW_UID|GPU_SIM_HOST_KEY)=' .env > .env.new || true
	echo "AIRFLOW_UID=$$(id -u)" >> .env.new
	echo "GPU_SIM_HOST_KEY=$$(cut -d' ' -f1,2 secrets/gpu_sim_host_ed25519.pub)" >> .env.new
	mv .env.new .env

# Re-pin the whole resolved set after changing requirements*.txt.
constraints: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | sed 's/^torch==\(.*\)+cpu$$/torch==\1/' > constraints.txt

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
