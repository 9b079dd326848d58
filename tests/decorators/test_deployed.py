"""A deferred ``@task.pytorch_job`` in a real deployment (api-server, scheduler with LocalExecutor,
dag-processor, triggerer) against localkube's scripted runtime: its success ends in the triggerer, which
pushes the return value the Master logged, so no worker resumes the task (apache/airflow#72716 has no
resumed try to fail)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from localkube.cluster import LocalKube

from tests.e2e.conftest import Airflow, deploy, kube
from tests.operators.harness import KIND_BY_NAME, jobs

__all__ = ["kube"]

pytestmark = pytest.mark.timeout(900)  # a busy machine: the test also starts the deployment

DAG_ID = "e2e_decorated"
DAGS = Path(__file__).parent / "deployed_dags"


@pytest.fixture(scope="module")
def deployed(kube: LocalKube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    with deploy(kube, tmp_path_factory, DAGS) as deployment:
        yield deployment


def test_the_triggerer_pushes_the_masters_return_value(deployed: Airflow, kube: LocalKube) -> None:
    deployed.trigger(DAG_ID, "run1")

    def ended(task_id: str) -> dict | None:
        ti = deployed.task_instance(DAG_ID, "run1", task_id)
        return ti if ti["state"] in ("success", "failed", "upstream_failed") else None

    train = deployed.wait("train to end", lambda: ended("train"), 300)
    consume = deployed.wait("consume to end", lambda: ended("consume"), 300)

    assert (train["state"], consume["state"]) == ("success", "success"), deployed.diagnostics()
    assert train["try_number"] == 1
    base = f"/dags/{DAG_ID}/dagRuns/run1/taskInstances"
    assert deployed.request("GET", f"{base}/train/xcomEntries/return_value")["value"] == {
        "loss": 0.25,
        "rank": 0,
    }
    assert deployed.request("GET", f"{base}/train/xcomEntries/loss")["value"] == 0.25  # multiple_outputs
    assert deployed.request("GET", f"{base}/consume/xcomEntries/return_value")["value"] == 0.5
    trigger_log = deployed.trigger_log(DAG_ID, "run1", "train")
    assert "is Succeeded" in trigger_log and "TriggerEvent<'success'>" in trigger_log, trigger_log[-3000:]
    assert "Deleting PyTorchJob default/" in trigger_log  # on_finish_action, after the value was read
    assert jobs(kube, KIND_BY_NAME["PyTorchJob"]) == []
