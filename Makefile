# The two commands a new user needs: `make demo` and `make test`. Both set up everything on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-real lint bench bench-real clean ui-install ui-test ui-build chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade uv

# uv resolves and installs Airflow in seconds where pip takes minutes; reinstall only when pyproject changes.
# localkube (./localkube, the test cluster) is a distribution of its own that the dev extra needs.
$(STAMP): pyproject.toml localkube/pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e ./localkube -e '.[dev]'
	touch $(STAMP)

# The Training tab (airflow_provider_training/plugins/www): node packages from the committed lock file.
WWW := airflow_provider_training/plugins/www
UI_STAMP := $(WWW)/node_modules/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(UI_STAMP): $(WWW)/package-lock.json
	cd $(WWW) && npm ci --no-audit --no-fund
	touch $(UI_STAMP)

ui-install: $(UI_STAMP)

# Type-check and the component tests (vitest).
ui-test: $(UI_STAMP)
	cd $(WWW) && npx tsc --noEmit && npx vitest run

# Rebuild the committed bundle dist/main.umd.cjs after changing $(WWW)/src (tests check that they match).
ui-build: $(UI_STAMP)
	cd $(WWW) && npm run build

# The browser test (tests/e2e/test_training_tab.py) drives Debian's chromium; the machine image lacks it.
chromium:
	@test -x /usr/bin/chromium || { $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }

# The tab's vitest tests first (seconds), then pytest (the bundle check and the browser test included).
test: $(STAMP) ui-test chromium
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# tests/real against a real control plane: etcd, kube-apiserver and kube-controller-manager built from Go
# modules by scripts/realkube/build.sh (cached by version under ~/.cache/airflow-provider-training/k8s; see
# docs/testing.md for the first build's time), localkube's agent as the operators and the kubelet; and
# localkube's own API tests against that real server (their `real` parameter: `-m real` leaves out the
# localkube one, which `make test` runs); and Kubeflow's real training operator v1.9.2, built as a Go module
# by scripts/realkube/build-training-operator.sh into the same cache, for tests/real/test_real_operator.py.
test-real: $(STAMP)
	bin=$$(nice -n 10 scripts/realkube/build.sh) && \
	to=$$(nice -n 10 scripts/realkube/build-training-operator.sh) && \
	tr=$$(nice -n 10 scripts/realkube/build-trainer.sh) && \
	REALKUBE_BIN=$$bin REALTO_BIN=$$to REALTRAINER_BIN=$$tr $(BIN)/python -m pytest -q -p no:cacheprovider -m real tests/real localkube/tests $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check airflow_provider_training localkube tests benchmarks example_dags scripts
	$(BIN)/ruff format --check airflow_provider_training localkube tests benchmarks example_dags scripts
	$(BIN)/mypy

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

bench: $(STAMP)
	$(BIN)/python benchmarks/import_time.py
	$(BIN)/python benchmarks/trigger_load.py
	$(BIN)/python benchmarks/loop_lag.py
	$(BIN)/python benchmarks/scale.py
	$(BIN)/python benchmarks/unrelated_pods.py
	$(BIN)/python benchmarks/position_writes.py
	$(MAKE) bench-real

# The budget on a real kube-apiserver and etcd over TLS (scripts/realkube/build.sh, cached), N = 1,000, side by
# side with main before issue 28 (53df9b2, exported once into ~/.cache/airflow-provider-training): memory per
# waiting job with and without logs, steady requests, status change to event, the loop's longest stall with
# 200 triggers starting at once (benchmarks/README.md, "The budget").
bench-real: $(STAMP)
	bin=$$(nice -n 10 scripts/realkube/build.sh) && \
	REALKUBE_BIN=$$bin $(BIN)/python benchmarks/budget.py --jobs 1000 && \
	REALKUBE_BIN=$$bin $(BIN)/python benchmarks/log_throughput.py

clean:
	rm -rf $(VENV) .demo
