# Two commands do all the set-up on a fresh machine:
#   make demo   runs the demo campaign through Airflow against this machine (results in DuckDB)
#   make test   runs ruff, mypy, the docs site's strict build and the whole test suite (unit, integration, e2e, stack)
#               in parallel processes
#   make check  the edit loop: ruff, mypy, the docs site's strict build, the unit and integration tiers
#   make docs   the documentation site (docs/, mkdocs.yml) alone, into var/site/
#   make flaky TESTS=... N=5   chosen tests N times beside a CPU hog, and how many runs passed
#   make up     starts Airflow for this project here (UI, Benchmarks view); make down stops it
# They create .venv (Airflow's environment) and .venv-host (the serving host's: torch, triton, the real
# SGLang/vLLM benchmark clients and sglang-router) on first use and refresh them when their requirements change.

SHELL  := /bin/bash
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTHON ?= python3
# The tests start a real OpenSSH server on loopback ports and drive the UI with Debian's Chromium.
SYSTEM_DEPS := /usr/sbin/sshd /usr/bin/chromium
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# The benchmark host's own environment, beside .venv and never mixed into it (see requirements-host.txt).
HOST_VENV  := .venv-host
HOST_PY    := $(HOST_VENV)/bin/python
HOST_STAMP := $(HOST_VENV)/.installed

.PHONY: demo test check flaky lint docs venv host-venv constraints clean compose-env up down

# pip prints each package as it collects and installs it: the progress of a first set-up that takes minutes.
$(STAMP): requirements.txt requirements-dev.txt requirements-nodeps.txt constraints.txt pyproject.toml
	@echo "make: Airflow's environment, $(VENV) (pip prints each package; minutes on a fresh machine)"
	@date +%s > $(VENV).began
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	set -o pipefail; $(PY) -m pip install --progress-bar off -r requirements-dev.txt -c constraints.txt \
	  | { grep -E '^(Collecting|Installing|Successfully)' || true; }
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)
	@echo "make: $(VENV) ready in $$(( $$(date +%s) - $$(cat $(VENV).began) )) s"; rm -f $(VENV).began

venv: $(STAMP)

# One pip step, no dependency resolution (every module pinned); then the torchvision shim, then a smoke check
# that each client, the router and the tiny server import. About 2 minutes and 3.7 GB on a fresh machine.
$(HOST_STAMP): requirements-host.txt include/hostenv/benchflow_torchvision_cpu.py
	@echo "make: the benchmark host's environment, $(HOST_VENV) (torch, triton, the SGLang and vLLM clients)"
	@date +%s > $(HOST_VENV).began
	test -x $(HOST_PY) || $(PYTHON) -m venv $(HOST_VENV)
	set -o pipefail; $(HOST_PY) -m pip install --progress-bar off --no-deps -r requirements-host.txt \
	  | { grep -E '^(Collecting|Installing|Successfully)' || true; }
	site=$$($(HOST_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	  cp include/hostenv/benchflow_torchvision_cpu.py $$site/ && \
	  echo "import benchflow_torchvision_cpu" > $$site/benchflow_torchvision_cpu.pth
	for check in "-m sglang.bench_serving --help" "-m vllm.entrypoints.cli.main bench serve --help" \
	             "-m sglang_router.launch_router --help" "kernels/serving/server.py --help"; do \
	  HF_HUB_OFFLINE=1 $(HOST_PY) $$check > $(HOST_VENV)/smoke.log 2>&1 || { cat $(HOST_VENV)/smoke.log; exit 1; }; \
	done
	touch $(HOST_STAMP)
	@echo "make: $(HOST_VENV) ready in $$(( $$(date +%s) - $$(cat $(HOST_VENV).began) )) s"; rm -f $(HOST_VENV).began

host-venv: $(HOST_STAMP)

demo: $(STAMP) $(HOST_STAMP)
	$(VENV)/bin/bench run moe_kernel_local

# The project's Airflow on this machine, no Docker: api-server, scheduler, dag-processor, triggerer (LocalExecutor),
# metadata in the local PostgreSQL when it answers, else SQLite. Prints the URL and the login; `make down` stops it.
up: $(STAMP) $(HOST_STAMP)
	$(VENV)/bin/bench up

down:
	$(VENV)/bin/bench down

# The documentation site, warnings as errors (mkdocs.yml: strict, every link and anchor checked), into var/site/
# (git-ignored). NO_MKDOCS_2_WARNING: mkdocs-material's banner about its end of life, on every build.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir var/site

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(MKDOCS)

docs: $(STAMP)
	$(MKDOCS)

$(SYSTEM_DEPS):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openssh-server openssh-client chromium stress-ng

# The suite in PYTEST_WORKERS processes (pytest-xdist; tests/conftest.py groups what shares a fixture), each test
# under a timeout; it ends with the 15 slowest tests, the time per tier, and the total of lint, types and tests.
# A worker that dies ends the run (pyproject's --max-worker-restart=0) and SUITE_TIMEOUT caps the whole of it, so
# that a hang fails in minutes with its traceback instead of holding CI until its own limit.
PYTEST_WORKERS ?= 4
SUITE_TIMEOUT  ?= 2400
PYTEST := TRITON_INTERPRET=1 timeout --kill-after=30 $(SUITE_TIMEOUT) $(VENV)/bin/pytest -n $(PYTEST_WORKERS)

test: $(STAMP) $(SYSTEM_DEPS) $(HOST_STAMP)
	@start=$$(date +%s); status=0; \
	$(MAKE) --no-print-directory lint && \
	$(PYTEST) || status=$$?; \
	[ $$status -ne 124 ] || echo "make test: the suite ran past SUITE_TIMEOUT=$(SUITE_TIMEOUT) s and was stopped"; \
	echo "make test: $$(( $$(date +%s) - start )) s in all (lint, types and the whole suite), exit $$status"; \
	exit $$status

# The edit loop: lint, types, the docs site, the unit and integration tiers (no DAG run, no Airflow stack).
check: $(STAMP) $(SYSTEM_DEPS) $(HOST_STAMP)
	@start=$$(date +%s); status=0; \
	$(MAKE) --no-print-directory lint && \
	$(PYTEST) -m "unit or integration" || status=$$?; \
	echo "make check: $$(( $$(date +%s) - start )) s in all, exit $$status"; \
	exit $$status

# Hunting flakes: TESTS (paths or node ids) N times in a row while a one-core busy loop runs beside them (Debian's
# stress-ng where it is installed, else a shell loop), as on a busy CI machine; prints each run's outcome and the
# pass count, and fails unless every run passed. A new e2e or stack test lands only after N=5 of 5 here.
N ?= 5
TESTS ?=
FLAKY_WORKERS ?= 1
flaky: $(STAMP) $(SYSTEM_DEPS) $(HOST_STAMP)
	@test -n "$(TESTS)" || { echo "make flaky: name the tests: make flaky TESTS=tests/e2e/test_bench_run.py N=5"; exit 2; }
	@mkdir -p var
	@if command -v stress-ng >/dev/null; then stress-ng --cpu 1 --quiet & else sh -c 'while :; do :; done' & fi; \
	hog=$$!; trap 'kill $$hog 2>/dev/null' EXIT; passed=0; \
	for run in $$(seq $(N)); do \
	  start=$$(date +%s); \
	  if TRITON_INTERPRET=1 $(VENV)/bin/pytest -n $(FLAKY_WORKERS) -q -p no:cacheprovider --durations=0 $(TESTS) \
	       > var/flaky-$$run.log 2>&1; then passed=$$((passed + 1)); outcome=passed; else outcome=FAILED; fi; \
	  echo "make flaky: run $$run of $(N) $$outcome in $$(( $$(date +%s) - start )) s ($$(tail -n 1 var/flaky-$$run.log)); log var/flaky-$$run.log"; \
	done; \
	echo "make flaky: $$passed of $(N) runs passed beside a CPU hog: $(TESTS)"; \
	[ $$passed -eq $(N) ]

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
	# one Fernet key (connections encrypted at rest) and one JWT secret (the task and Edge worker tokens) for
	# every container: left unset, each container's Airflow makes its own; made once and kept
	grep -qE '^AIRFLOW__CORE__FERNET_KEY=.' .env.new || \
	  echo "AIRFLOW__CORE__FERNET_KEY=$$(python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())')" >> .env.new
	grep -qE '^AIRFLOW__API_AUTH__JWT_SECRET=.' .env.new || \
	  echo "AIRFLOW__API_AUTH__JWT_SECRET=$$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')" >> .env.new
	mv .env.new .env

# Re-pin the whole resolved set after changing requirements*.txt.
constraints: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | sed 's/^torch==\(.*\)+cpu$$/torch==\1/' > constraints.txt

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
