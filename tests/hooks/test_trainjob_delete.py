"""The TrainJob is deleted with background propagation (its kind's ``delete_propagation``), the other kinds
with foreground, against localkube over HTTP: a dependent that cannot go yet (a finalizer of its own) keeps a
foreground-deleted owner, and not a background-deleted one. The real Trainer v2.3.0 re-creates the JobSet of a
TrainJob kept for a foreground deletion (tests/real/test_real_trainer.py, the on_kill tests)."""

from __future__ import annotations

from typing import Any

import pytest
from localkube.controllers.builtin import owner_reference

from airflow_provider_training.jobs import create_job, delete_job
from airflow_provider_training.kinds.registry import get_kind
from tests.fixtures import CRDS
from tests.hooks.kube_env import cluster_and_hook, job_body

TRAIN_JOB = get_kind("TrainJob", "trainer.kubeflow.org/v1alpha1")
PYTORCH = get_kind("PyTorchJob")


def held_dependent(owner: dict[str, Any]) -> dict[str, Any]:
    """A ConfigMap owned by ``owner`` (blockOwnerDeletion) that its own finalizer keeps while deleted."""
    name = owner["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{name}-child",
            "ownerReferences": [owner_reference(owner)],
            "finalizers": ["test/hold"],
        },
    }


def train_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }


@pytest.mark.parametrize(
    ("kind", "body", "kept"),
    [(TRAIN_JOB, train_job("tj"), False), (PYTORCH, job_body("pj"), True)],
    ids=["TrainJob-background", "PyTorchJob-foreground"],
)
async def test_delete_job_propagates_as_the_kind_says(tmp_path, monkeypatch, kind, body, kept):
    options = {"crd_dir": CRDS / "trainer.kubeflow.org-v1alpha1"} if kind is TRAIN_JOB else {}
    async with cluster_and_hook(tmp_path, monkeypatch, **options) as (kube, hook):
        created = await create_job(hook, kind, body, "default")
        configmaps = kube.store.resource_type("", "v1", "configmaps")
        kube.store.create(configmaps, "default", held_dependent(created))

        assert await delete_job(hook, kind, body["metadata"]["name"], "default") is True

        left = await hook.get_job(kind, body["metadata"]["name"], "default")
        assert (left is not None) is kept, left
        if kept:
            assert "foregroundDeletion" in left["metadata"]["finalizers"]
