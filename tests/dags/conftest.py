from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.operators.harness import cluster

__all__ = ["airflow_db", "cluster"]

DAG_FILES = Path(__file__).parent / "dag_files"


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[str]:
    """``airflow db migrate`` once per session on the test-wide temporary SQLite AIRFLOW_HOME, with the DAGs
    folder set to ``dag_files`` (``dag.test()`` reads the DAG back from its bundle)."""
    from airflow import settings

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(DAG_FILES))
        mp.setattr(settings, "DAGS_FOLDER", str(DAG_FILES))  # read once when airflow.settings is imported
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            check=True,
            capture_output=True,
            env=os.environ.copy(),
        )
        yield os.environ["AIRFLOW_HOME"]
