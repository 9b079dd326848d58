# The two commands a new user needs: `make demo` and `make test`. Both set up everything on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade uv

# uv resolves and installs Airflow in seconds where pip takes minutes; reinstall only when pyproject changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check airflow_provider_training tests benchmarks example_dags scripts
	$(BIN)/ruff format --check airflow_provider_training tests benchmarks example_dags scripts
	$(BIN)/mypy

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

bench: $(STAMP)
	$(BIN)/python benchmarks/import_time.py
	$(BIN)/python benchmarks/trigger_load.py
	$(BIN)/python benchmarks/loop_lag.py
	$(BIN)/python benchmarks/scale.py

clean:
	rm -rf $(VENV) .demo
