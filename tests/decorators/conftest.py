"""The Airflow DB with ``dag_files`` as the DAGs folder, and localkube's process runtime."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.examples.conftest import migrated_db, process_cluster

__all__ = ["decorated_db", "load_dag", "migrated_db", "process_cluster"]

DAG_FILES = Path(__file__).parent / "dag_files"


@pytest.fixture
def decorated_db(migrated_db: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The migrated DB; the DAGs folder is ``dag_files`` (``dag.test()`` reads the DAG back from it)."""
    from airflow import settings

    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(DAG_FILES))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(DAG_FILES))
    return migrated_db


def load_dag(dag_id: str, file: str = "decorated") -> Any:
    """The DAG ``dag_id`` of ``dag_files/<file>.py``, imported by file as the DAG processor does."""
    spec = importlib.util.spec_from_file_location(f"decorated_dags_{file}", DAG_FILES / f"{file}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, dag_id)
