"""Every example DAG file imports cleanly, as the DAG processor and ``airflow dags list-import-errors``
see it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.conftest import EXAMPLE_DAGS

# Every example and the test that runs it (tests/examples/test_*_dags.py); a new example needs both.
EXAMPLES = {
    "retraining_pipeline",
    "hyperparameter_sweep",
    "tfjob_ps_workers",
    "xgboost_job",
    "mpi_job",
    "mpi_operator_pi",
    "train_job",
    "t9k_job",
    "edl_training_job",
    "decorated_training",
}


def test_dagbag_has_every_example_and_no_import_errors(monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    # No cluster here: a DAG file that called the API at import would fail to load.
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", '{"conn_type": "kubernetes"}')
    bag = DagBag(dag_folder=str(EXAMPLE_DAGS))

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == EXAMPLES
    assert {Path(dag.fileloc).stem for dag in bag.dags.values()} == EXAMPLES  # one DAG per file, named alike


def list_import_errors(dags_folder: Path) -> tuple[int, list[dict]]:
    """The command's exit code (1 when it lists errors) and the errors it lists."""
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder)}
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "list-import-errors", "--local", "--output", "json"],
        env=env,
        capture_output=True,
        text=True,
    )
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(240)
def test_airflow_dags_list_import_errors_is_clean(migrated_db, tmp_path):
    assert list_import_errors(EXAMPLE_DAGS) == (0, [])
    # The same command does report a broken DAG file, so the empty list above means something.
    (tmp_path / "broken_dag.py").write_text("import no_such_module\nfrom airflow.sdk import DAG\n")
    code, [error] = list_import_errors(tmp_path)
    assert code == 1 and error["filepath"].endswith("broken_dag.py") and "no_such_module" in error["error"]
