"""Fixtures for running the example DAGs: the Airflow DB, the DAGs folder, and a localkube per runtime."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localkube.cluster import LocalKube
from localkube.pytest_plugin import connection_json
from localkube.runtime import ANNOTATION

from tests.fixtures import CRD_ONLY, torch_runtime

EXAMPLE_DAGS = Path(__file__).resolve().parents[2] / "example_dags"


@pytest.fixture(scope="session")
def migrated_db() -> str:
    """``airflow db migrate`` once per session on the test-wide temporary SQLite AIRFLOW_HOME."""
    command = [sys.executable, "-m", "airflow", "db", "migrate"]
    subprocess.run(command, check=True, capture_output=True, env=os.environ.copy())
    return os.environ["AIRFLOW_HOME"]


@pytest.fixture
def examples_db(migrated_db: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The migrated DB; the DAGs folder is ``example_dags`` (``dag.test()`` reads the DAG back from it)."""
    from airflow import settings

    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(EXAMPLE_DAGS))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(EXAMPLE_DAGS))  # read once when airflow.settings loads
    return migrated_db


def _cluster(runtime: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """localkube with every default controller; it also serves the kinds it needs CRDs for (the MPI
    Operator's v2beta1 MPIJob, Trainer v2 and JobSet), with upstream's torch-distributed runtime."""
    kube = LocalKube(runtime=runtime, crd_dir=list(CRD_ONLY))
    with kube, pytest.MonkeyPatch.context() as mp:
        runtimes = kube.store.resource_type("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes")
        kube.store.create(runtimes, "", torch_runtime())
        path = kube.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
        mp.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(path))
        yield kube


@pytest.fixture(scope="module")
def scripted_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """localkube whose pods follow scripted timelines; the default connection points at it."""
    yield from _cluster("scripted", tmp_path_factory)


@pytest.fixture(scope="module")
def process_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """localkube whose pods run their commands as local processes; the default connection points at it."""
    yield from _cluster("process", tmp_path_factory)


def load_dag(name: str) -> Any:
    """The ``dag`` of ``example_dags/<name>.py``, imported as the DAG processor does (by file)."""
    spec = importlib.util.spec_from_file_location(f"example_dag_{name}", EXAMPLE_DAGS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def with_script(dag: Any, task_id: str, script: dict[str, Any]) -> None:
    """Give the job of ``task_id`` a scripted timeline (an annotation the operator adds to the job)."""
    dag.get_task(task_id).annotations[ANNOTATION] = json.dumps(script)
