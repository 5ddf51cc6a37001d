# The two commands a user needs are `make run` and `make test`; both install what they need first.
# The interpreter the venv is made with. Debian's python3.11 is built with profile-guided and
# link-time optimisation into one binary; pyenv's default build (python3 on this machine's PATH)
# loads libpython as a shared library and costs boxmq a quarter more user CPU per message
# (docs/benchmarks.md, "The interpreter"). `make PYTHON=python3.12 ...` picks another.
DEBIAN_PYTHON := /usr/bin/python3.11
PYTHON ?= $(shell $(DEBIAN_PYTHON) -c 'import ensurepip, venv' 2>/dev/null && echo $(DEBIAN_PYTHON) || echo python3)
VENV   := .venv
BIN    := $(VENV)/bin
DATA   ?= ./data

.PHONY: demo run test lint typecheck unit bench bench-mqtt install dev system-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The package alone: what `make run` needs.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The package with its spark and xmpp extras, plus the dev group: what `make test` needs (the Spark
# tests run in CI too; they also need java, which the machine has).
$(VENV)/.dev-installed: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[spark,xmpp,demo]' --group dev
	touch $@

# The references the benchmarks compare with.
$(VENV)/.bench-installed: pyproject.toml $(VENV)/.dev-installed
	$(BIN)/python -m pip install --quiet --group bench
	touch $@

# The real peers the tests talk to: mosquitto_pub/sub and the mosquitto broker (MQTT tests and
# bench), Prosody (the XMPP component's server), strace (a test that watches boxmq's system
# calls). Installed from Debian when missing; as root only, so a developer without root gets a
# clear message and the tests that need them skip locally (under CI=true they fail instead).
SYSTEM_TOOLS := mosquitto_pub:mosquitto-clients mosquitto:mosquitto prosody:prosody strace:strace
system-deps:
	@missing=""; for pair in $(SYSTEM_TOOLS); do \
	  tool=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$tool >/dev/null 2>&1 || [ -x /usr/sbin/$$tool ] || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing$$missing from Debian"; \
	    (DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null)) \
	      || { echo "apt-get could not install$$missing"; exit 1; }; \
	  else echo "not root: install$$missing yourself (apt-get install$$missing); their tests will skip"; fi; \
	fi

install: $(VENV)/.installed
dev: $(VENV)/.dev-installed

# `make run MQTT=127.0.0.1:1884` when 1883 is taken (another broker, another user's make run).
MQTT ?=
run: $(VENV)/.installed
	$(BIN)/boxmq serve --data $(DATA)$(if $(MQTT), --mqtt $(MQTT))

# The whole pipeline on this machine: sensors over MQTT -> boxmq serve -> Spark -> Parquet,
# alerts back over MQTT, a plot (examples/demo.py; DEMO_DIR must not hold an earlier run).
DEMO_DIR ?= ./demo-$(shell date +%Y%m%d-%H%M%S)
$(VENV)/.demo-installed: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	touch $@

demo: $(VENV)/.demo-installed
	$(BIN)/python examples/demo.py --dir $(DEMO_DIR)

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check src tests bench harness examples
	$(BIN)/ruff format --check src tests bench harness examples

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

# The suite starts boxmq in hundreds of subprocesses (servers, CLI commands, workers). Under
# PYTHONDONTWRITEBYTECODE, which some machines set (this one does), each compiled boxmq again:
# 0.55-0.6 s of CPU to import boxmq.cli and the MQTT server, against 0.35-0.45 s from cached
# bytecode.
# Four workers (pytest-xdist), a test file each at a time, on two cores: most of the suite's
# time is spent waiting on servers, clients, lock timeouts and Spark, not computing. The whole
# suite kept the two cores about half busy with four workers: 9.7 min and 624 s of CPU on a
# quiet machine, where two workers had taken 19-21 min (docs/development.md).
# A file keeps to one worker because its tests share module fixtures (servers, a SparkSession).
# `make unit TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 4
unit: $(VENV)/.dev-installed system-deps
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

test: lint typecheck unit

bench: $(VENV)/.bench-installed
	$(BIN)/python bench/store.py

# boxmq, mosquitto and amqtt under the same mosquitto_pub/sub clients (docs/benchmarks.md).
bench-mqtt: $(VENV)/.bench-installed system-deps
	$(BIN)/python bench/mqtt.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
