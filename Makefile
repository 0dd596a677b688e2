# Two commands do all set-up on a fresh machine: `make run` (the app) and `make test` (every test).
# Browsers come before setup where both are needed: setup makes the runtime snapshot in Chromium.
VENV   := .venv
PY     := $(VENV)/bin/python
CLI    := $(VENV)/bin/py-in-browser
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PORT   ?= 8000
HOST   ?= 127.0.0.1

.PHONY: run test setup lint unit e2e browsers postgres bench docs

$(VENV)/.installed-base: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed-base
	$(PY) -m pip install -q -e '.[test,torch,docs]'
	touch $@

$(VENV)/.installed-docs: $(VENV)/.installed-base
	$(PY) -m pip install -q -e '.[docs]'
	touch $@

setup: $(VENV)/.installed-base
	$(CLI) setup

run: setup
	$(CLI) serve --host $(HOST) --port $(PORT)

# Debian's Chromium and Firefox ESR, Xvfb for Firefox's WebGL2 and WebKit, lavapipe for
# Vulkan-backed WebGPU, and WebKitGTK's WebKitWebDriver with its MiniBrowser (the WebKit leg).
browsers:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/firefox-esr ] || ! command -v Xvfb >/dev/null \
		|| ! ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || ! command -v WebKitWebDriver >/dev/null; then \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium firefox-esr xvfb mesa-vulkan-drivers webkit2gtk-driver; \
	fi

# Debian's PostgreSQL binaries for the registry tests, which start their own throwaway server
# (initdb in a temporary folder, pg_ctl on a loopback port) and touch no system service.
postgres:
	@if ! command -v pg_ctl >/dev/null && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql; \
	fi

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

unit: $(VENV)/.installed-test setup postgres
	$(VENV)/bin/pytest tests_unit

e2e: $(VENV)/.installed-test browsers setup bench/node_modules/.installed
	$(VENV)/bin/pytest tests_e2e

# The API reference (served at /docs) from the engine's docstrings, into the git-ignored
# build/docs; any Sphinx warning fails the build, so `make test` catches broken docstrings.
docs: $(VENV)/.installed-docs
	$(VENV)/bin/sphinx-build -q -W --keep-going -b html -d build/docs-doctrees docs build/docs

# The e2e suite includes a smoke run of the benchmark harness, so TF.js and jax-js are installed
# here too.
test: $(VENV)/.installed-test browsers setup postgres bench/node_modules/.installed lint docs
	$(VENV)/bin/pytest --durations=25 tests_unit tests_e2e

# TensorFlow.js 4.22.0 and jax-js 0.1.25 for the benchmarks, from npm (versions and integrity
# pinned by bench/package-lock.json) into the git-ignored bench/node_modules.
bench/node_modules/.installed: bench/package.json bench/package-lock.json
	cd bench && npm ci --no-audit --no-fund
	touch $@

# Ours vs TensorFlow.js and jax-js in one Chromium session: `make bench`, or
# `make bench BENCH_ARGS=--quick`.
bench: $(VENV)/.installed-test browsers setup bench/node_modules/.installed
	$(PY) -m bench $(BENCH_ARGS)
